//! One namespace cannot slow another, end to end (docs/security.md): a real
//! API server, operator replicas watching every namespace, witnesses for the
//! victims' checkers and hostile targets for the attackers'. The attacks:
//! slow patterns (this file), hanging targets with long timeouts
//! (`isolation/workers.rs`), more patterns than a replica's memory holds
//! (`isolation/memory.rs`), a flood of Events (`isolation/events.rs`), and
//! route discovery turned against others (`isolation/discovery.rs`).
//!
//! Slow patterns: namespace A holds 24 checkers whose `bodyMatch` is
//! `(?s:.){0,1000}zzz`: it compiles within the size limits, but each search
//! of 64 KiB costs the lazy DFA its cache over and over, hundreds of
//! milliseconds of CPU that no deadline interrupts. On the async runtime
//! that blinded namespace B (100 healthy checkers at 2 s: up to 12.4 s
//! between two probes) and starved the Lease renewals. On the matching
//! pool, A waits behind its own checks.

mod discovery;
mod events;
mod memory;
mod secrets;
use webchecker_kit as support;
mod workers;

use std::time::{Duration, Instant};

use support::targets::{Answer, RecordingTarget};
use support::*;

const INTERVAL: u64 = 2;
/// A's checkers with slow patterns.
const SLOW: usize = 24;

/// Deletes the checkers of these namespaces when the test ends, however it
/// ends: the next test of this binary runs replicas that watch every
/// namespace, and must inherit none of its load.
struct DeleteCheckers<'a>(&'a Cluster, Vec<String>);

impl Drop for DeleteCheckers<'_> {
    fn drop(&mut self) {
        for ns in &self.1 {
            let _ = self
                .0
                .kubectl(&["delete", "webcheckers", "--all", "-n", ns, "--wait=false"]);
        }
    }
}

async fn scrape(op: &Operator) -> String {
    eventually(Duration::from_secs(10), "metrics", || op.metrics()).await
}

/// One replica's self-fences and renewal failures so far, and its renewal
/// duration histogram.
type Coordination = (f64, f64, Vec<(f64, f64)>);

async fn coordination(ops: &[Operator]) -> Vec<Coordination> {
    let mut out = Vec::new();
    for o in ops {
        let m = scrape(o).await;
        out.push((
            metric(&m, "webchecker_self_fences_total", &[]).unwrap_or(0.0),
            metric(&m, "webchecker_lease_renew_failures_total", &[]).unwrap_or(0.0),
            histogram_buckets(&m, "webchecker_lease_renew_duration_seconds"),
        ));
    }
    out
}

/// The renewal durations observed between two scrapes, summed over replicas:
/// (p99 bucket, count).
fn renewals_between(before: &[Coordination], after: &[Coordination]) -> (Option<f64>, f64) {
    let mut d: Vec<(f64, f64)> = Vec::new();
    for (b, a) in before.iter().zip(after) {
        for (i, (le, n)) in a.2.iter().enumerate() {
            let was = b.2.get(i).map_or(0.0, |x| x.1);
            match d.get_mut(i) {
                Some(x) => x.1 += n - was,
                None => d.push((*le, n - was)),
            }
        }
    }
    (bucket_upper(&d, 0.99), d.last().map_or(0.0, |x| x.1))
}

async fn owners(client: &kube::Client, ns: &str) -> Vec<(String, Option<String>)> {
    let api = checkers_api(client, ns);
    let mut out: Vec<(String, Option<String>)> = api
        .list(&Default::default())
        .await
        .expect("list checkers")
        .items
        .into_iter()
        .map(|o| {
            let owner = owner_label(&o.metadata).map(str::to_string);
            (o.metadata.name.unwrap_or_default(), owner)
        })
        .collect();
    out.sort();
    out
}

/// Two replicas watching every namespace, their Leases in `leases`, ready.
async fn replicas_of_every_namespace(c: &'static Cluster, leases: &str) -> Vec<Operator> {
    let ops: Vec<Operator> = (0..2)
        .map(|i| {
            Operator::spawn_all_namespaces_with(
                c,
                &format!("iso-r{i}-{leases}"),
                leases,
                FAST_LEASES,
            )
        })
        .collect();
    for o in &ops {
        o.wait_ready(Duration::from_secs(60)).await;
    }
    ops
}

/// What a window of observation saw: the largest gap between two probes of
/// a healthy checker (and which), the replicas' coordination before and after.
struct Window {
    gap: Duration,
    slowest: String,
    before: Vec<Coordination>,
    after: Vec<Coordination>,
}

/// Observes `window` from now.
async fn observe(
    ops: &[Operator],
    witness: &Witness,
    healthy: &[String],
    window: Duration,
) -> Window {
    let from = Instant::now();
    let before = coordination(ops).await;
    tokio::time::sleep(window).await;
    let after = coordination(ops).await;
    let hits = witness.hits();
    let (gap, slowest) = largest_gap(&hits, healthy, from, Instant::now());
    Window {
        gap,
        slowest,
        before,
        after,
    }
}

/// A's SLOW checkers with slow patterns on `heavy`: once every one is
/// Ready=False, their reasons.
async fn slow_patterns(client: &kube::Client, a_ns: &str, heavy: &str) -> Vec<String> {
    let hostile: Vec<String> = (0..SLOW).map(|i| format!("slow{i}")).collect();
    let objs = hostile
        .iter()
        .map(|n| {
            checker_object(
                n,
                heavy,
                INTERVAL,
                serde_json::json!({
                    "timeoutSeconds": 1,
                    "bodyMatch": { "regex": "(?s:.){0,1000}zzz" },
                }),
            )
        })
        .collect();
    create_all(client, a_ns, objs, 8).await;
    let api = checkers_api(client, a_ns);
    eventually(
        Duration::from_secs(30),
        "every hostile checker Ready=False",
        || async {
            let list = api.list(&Default::default()).await.ok()?;
            let reasons: Vec<String> = list
                .items
                .iter()
                .filter_map(|o| {
                    let conds = o.data["status"]["conditions"].as_array()?;
                    let ready = conds.iter().find(|c| c["type"] == "Ready")?;
                    (ready["status"] == "False")
                        .then(|| ready["reason"].as_str().unwrap_or("").to_string())
                })
                .collect();
            (reasons.len() == hostile.len()).then_some(reasons)
        },
    )
    .await
}

/// Waits until the witness saw two probes of each of `healthy` (B's checkers).
async fn every_healthy_checker_probed_twice(witness: &Witness, healthy: &[String]) {
    eventually(
        Duration::from_secs(60),
        "every healthy checker probed twice",
        || async {
            let hits = witness.hits();
            healthy
                .iter()
                .all(|n| hits.iter().filter(|h| &h.checker == n).count() >= 2)
                .then_some(())
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_patterns_in_one_namespace_delay_neither_another_namespace_nor_the_leases() {
    let c = Cluster::shared("isolation");
    let client = c.client().await;
    let leases = c.namespace("iso-leases");
    let ops = replicas_of_every_namespace(c, &leases).await;
    let witness = Witness::start().await;
    let body = "a".repeat(64 * 1024);
    let heavy = RecordingTarget::http(move |_| Answer::text(&body)).await;

    let b_ns = c.namespace("iso-b");
    let a_ns = c.namespace("iso-a");
    let _cleanup = DeleteCheckers(c, vec![a_ns.clone(), b_ns.clone()]);
    let healthy: Vec<String> = (0..100).map(|i| format!("h{i}")).collect();
    create_checkers(&client, &b_ns, &witness.url(), &healthy, INTERVAL as u32).await;
    every_healthy_checker_probed_twice(&witness, &healthy).await;
    let window = Duration::from_secs(8 * INTERVAL);
    let base = observe(&ops, &witness, &healthy, window).await;
    let (base_renew_p99, _) = renewals_between(&base.before, &base.after);
    let b_owners = owners(&client, &b_ns).await;

    // A's checkers fail, each with a reason that names the checks.
    let reasons = slow_patterns(&client, &a_ns, &heavy.url()).await;
    assert!(
        reasons
            .iter()
            .all(|r| r == "CheckTimeout" || r == "BodyMismatch"),
        "A's reasons: {reasons:?}"
    );

    let Window {
        gap,
        slowest,
        before,
        after,
    } = observe(&ops, &witness, &healthy, window).await;
    let (renew_p99, renewals) = renewals_between(&before, &after);
    let probed_a = heavy.requests().len();
    println!(
        "B (100 healthy at {INTERVAL} s): largest gap {gap:?} ({slowest}) with A's 24 slow patterns, {:?} without; \
         Lease renewals p99 <= {renew_p99:?} s ({renewals} renewals), {base_renew_p99:?} s without; A probed {probed_a} times; A's reasons {:?}",
        base.gap,
        {
            let mut r = reasons.clone();
            r.sort();
            r.dedup();
            r
        }
    );
    // The load was real: A kept being probed all along.
    assert!(
        probed_a >= 3 * SLOW,
        "the hostile target was probed {probed_a} times"
    );
    assert!(
        gap <= Duration::from_secs(INTERVAL + 1),
        "a healthy checker of B waited {gap:?} between two probes ({slowest})"
    );
    assert_eq!(owners(&client, &b_ns).await, b_owners, "B's checkers moved");
    for (i, (b, a)) in before.iter().zip(&after).enumerate() {
        assert_eq!(a.0, b.0, "{} fenced itself", ops[i].identity);
        assert_eq!(a.1, b.1, "{}: a Lease renewal failed", ops[i].identity);
    }
    assert!(renewals > 0.0, "renewals went on");
    assert!(
        renew_p99.is_some_and(|p| p <= base_renew_p99.unwrap_or(0.0).max(0.1)),
        "Lease renewals slowed: p99 <= {renew_p99:?} s, {base_renew_p99:?} s without A"
    );
}
