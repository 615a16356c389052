//! Two namespaces' confirmations on replicas of 8 workers each: namespace
//! `hang`, whose targets stop answering (5 s timeouts) as the third
//! replica's path to the targets is cut, and namespace `quick`, whose
//! targets answer at once. Every failure of the third replica, and every
//! hang failure of the others, is asked of another replica.
//! The confirmations run on the confirmers' worker pools, in the fair queue
//! of their namespace: the witness never sees a replica with more than its
//! 8 workers' probes in flight, its own and others' together, and every
//! `quick` checker of the cut replica is still refuted by another zone in
//! time while `hang`'s probes hold what they may.
//!
//! The replicas watch every namespace, so this test has a control plane of
//! its own (the shared one holds other tests' checkers).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use kube::Api;
use kube::api::{ListParams, PostParams};
use serde_json::json;

use crate::support::fleet::*;
use crate::support::netns::ZonedReplicas;
use crate::support::*;
use webchecker::api::WebChecker;
use webchecker::assignment::OWNER_LABEL;

const WORKERS: usize = 8;
const HANG: usize = 60;
const QUICK: usize = 12;
const CUT: Duration = Duration::from_secs(20);
/// The witness sees a probe end when its connection closes, a moment after
/// the prober gave its worker back.
const CLOSE: Duration = Duration::from_millis(50);

/// Owner and Degraded (status, reason) of each checker of `api`.
async fn seen(api: &Api<WebChecker>) -> BTreeMap<String, (String, Option<(String, String)>)> {
    let list = api.list(&ListParams::default()).await.unwrap();
    list.items
        .into_iter()
        .map(|wc| {
            let name = wc.metadata.name.clone().unwrap();
            let owner = wc
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(OWNER_LABEL).cloned())
                .unwrap_or_default();
            let degraded = wc
                .status
                .unwrap_or_default()
                .condition("Degraded")
                .map(|c| (c.status.clone(), c.reason.clone()));
            (name, (owner, degraded))
        })
        .collect()
}

/// The most exchanges of `replica` open at once at the witness in [from, to].
fn most_in_flight(hits: &[Hit], replica: &str, from: Instant, to: Instant) -> usize {
    let mut edges: Vec<(Instant, i32)> = Vec::new();
    for h in hits
        .iter()
        .filter(|h| h.replica == replica && h.start >= from && h.start <= to)
    {
        let end = h.end.checked_sub(CLOSE).unwrap_or(h.end).max(h.start);
        edges.push((h.start, 1));
        edges.push((end, -1));
    }
    // Ends before starts at the same instant.
    edges.sort_by_key(|(t, d)| (*t, *d));
    let (mut now, mut most) = (0i32, 0i32);
    for (_, d) in edges {
        now += d;
        most = most.max(now);
    }
    most as usize
}

/// Asks `ops` served so far, whatever came of them.
async fn asks_served(ops: &[Operator]) -> f64 {
    let mut total = 0.0;
    for o in ops {
        let text = o.scrape().await;
        total += text
            .lines()
            .filter(|l| l.starts_with("webchecker_confirm_requests_total{"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>();
    }
    total
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_namespaces_confirmations_share_the_workers_fairly() {
    let cluster: &'static Cluster = Box::leak(Box::new(Cluster::start("confirmation-fairness")));
    let lease_ns = cluster.namespace("fair");
    let workers = format!("--workers={WORKERS}");
    let flags: Vec<&str> = FAST_LEASES
        .iter()
        .copied()
        .chain([workers.as_str()])
        .collect();
    let ZonedReplicas {
        netns,
        proxy: _proxy,
        ops,
    } = ZonedReplicas::spawn_with(cluster, &lease_ns, "fq", &flags, true).await;
    for o in &ops {
        o.wait_ready(Duration::from_secs(60)).await;
    }
    let witness = Witness::start_on(&netns.host_ip).await;
    let client = cluster.client().await;
    let (hang_ns, quick_ns) = (cluster.namespace("hang"), cluster.namespace("quick"));
    create_hang_and_quick(&client, &hang_ns, &quick_ns, &witness).await;
    let quick: Api<WebChecker> = Api::namespaced(client.clone(), &quick_ns);
    let interval = Duration::from_secs(INTERVAL.into());
    let owners = every_quick_checker_owned_and_probed(&quick, &witness).await;
    let cut_one = "fq-c";
    let mine: Vec<String> = owners
        .iter()
        .filter(|(_, (o, _))| o == cut_one)
        .map(|(n, _)| n.clone())
        .collect();
    assert!(!mine.is_empty(), "{cut_one} owns quick checkers");
    // Everything Ready; then hang's targets stop answering (every probe of
    // them holds a worker for its whole timeout, the confirmers' too) as the
    // third replica's path is cut.
    let hang: Api<WebChecker> = Api::namespaced(client.clone(), &hang_ns);
    every_hang_checker_ready(&hang).await;
    let asked_before = asks_served(&ops[..2]).await;
    let cut_at = Instant::now();
    for i in 0..HANG {
        witness.set_mode(&format!("h{i}"), Mode::Hang(Duration::from_secs(120)));
    }
    netns.cut_tcp_to(&[witness.addr.port()]);
    let refuted_in = every_quick_checker_refuted(&quick, &mine, cut_at, interval).await;
    tokio::time::sleep(CUT.saturating_sub(cut_at.elapsed())).await;
    let to = Instant::now();
    netns.heal();
    let cut = Cut {
        cut_one,
        mine: mine.len(),
        cut_at,
        to,
        refuted_in,
        asked_before,
    };
    check_the_confirmers(&witness, &ops, &hang, &cut).await;
    drop(ops);
    cluster.down();
}

/// HANG checkers in namespace `hang` (5 s timeouts, every 6 s) and QUICK in
/// namespace `quick`, all on the witness.
async fn create_hang_and_quick(
    client: &kube::Client,
    hang_ns: &str,
    quick_ns: &str,
    witness: &Witness,
) {
    for (ns, prefix, n, extra) in [
        (
            hang_ns,
            "h",
            HANG,
            json!({"timeoutSeconds": 5, "intervalSeconds": 6}),
        ),
        (quick_ns, "k", QUICK, json!({})),
    ] {
        let api = crate::support::checkers_api(client, ns);
        for i in 0..n {
            let name = format!("{prefix}{i}");
            let o = checker_object(&name, &witness.url(), INTERVAL.into(), extra.clone());
            api.create(&PostParams::default(), &o).await.unwrap();
        }
    }
}

/// The quick checkers once every one is owned and the witness saw probes.
async fn every_quick_checker_owned_and_probed(
    quick: &Api<WebChecker>,
    witness: &Witness,
) -> BTreeMap<String, (String, Option<(String, String)>)> {
    eventually(
        Duration::from_secs(60),
        "every quick checker owned and probed",
        || async {
            let now = seen(quick).await;
            let probed = witness.hits().len() >= QUICK;
            (now.len() == QUICK && now.values().all(|(o, _)| !o.is_empty()) && probed)
                .then_some(now)
        },
    )
    .await
}

async fn every_hang_checker_ready(hang: &Api<WebChecker>) {
    eventually(
        Duration::from_secs(60),
        "every hang checker Ready",
        || async {
            let list = hang.list(&ListParams::default()).await.ok()?;
            let ready = list.items.iter().filter(|wc| {
                wc.status
                    .as_ref()
                    .and_then(|s| s.condition("Ready"))
                    .is_some_and(|c| c.status == "True")
            });
            (ready.count() == HANG).then_some(())
        },
    )
    .await;
}

/// How long after `cut_at` every one of `mine` was Degraded, refuted by
/// another zone.
async fn every_quick_checker_refuted(
    quick: &Api<WebChecker>,
    mine: &[String],
    cut_at: Instant,
    interval: Duration,
) -> Duration {
    eventually(
        2 * interval + LEASE + Duration::from_secs(5),
        "every quick checker of the cut replica refuted by another zone",
        || async {
            let now = seen(quick).await;
            mine.iter()
                .all(|n| {
                    now[n]
                        .1
                        .as_ref()
                        .is_some_and(|(s, r)| s == "True" && r == "UnconfirmedFailure")
                })
                .then(|| cut_at.elapsed())
        },
    )
    .await
}

/// The cut of the third replica and what came of it.
struct Cut<'a> {
    cut_one: &'a str,
    /// How many quick checkers it owns.
    mine: usize,
    cut_at: Instant,
    to: Instant,
    refuted_in: Duration,
    /// Asks the confirmers had served before the cut.
    asked_before: f64,
}

/// No confirmer had more than its workers' probes in flight during the cut,
/// and the cut replica's hang failures were asked too.
async fn check_the_confirmers(
    witness: &Witness,
    ops: &[Operator],
    hang: &Api<WebChecker>,
    cut: &Cut<'_>,
) {
    let Cut {
        cut_one,
        mine,
        cut_at,
        to,
        refuted_in,
        asked_before,
    } = *cut;
    let mut hits = witness.hits();
    hits.extend(witness.confirmation_hits());
    hits.extend(witness.zone_probe_hits());
    hits.extend(witness.abandoned_hits());
    hits.extend(witness.abandoned_ask_hits());
    // Confirmations of hang's checkers time out at the witness: abandoned.
    let confirmed = hits
        .iter()
        .filter(|h| h.headers.contains_key(CONFIRM_FOR) && h.start >= cut_at)
        .fold(BTreeMap::<&str, usize>::new(), |mut by, h| {
            let ns = if h.checker.starts_with('h') {
                "hang"
            } else {
                "quick"
            };
            *by.entry(ns).or_default() += 1;
            by
        });
    let most: Vec<(String, usize)> = ops[..2]
        .iter()
        .map(|o| {
            (
                o.identity.clone(),
                most_in_flight(&hits, &o.identity, cut_at, to),
            )
        })
        .collect();
    println!(
        "{CUT:?} cut of {cut_one} on {WORKERS} workers: its {mine} quick checkers refuted after \
         {refuted_in:?}; confirmation probes by namespace {confirmed:?}; most probes in flight \
         at once per confirmer {most:?}"
    );
    for (replica, n) in &most {
        assert!(*n <= WORKERS, "{replica} had {n} probes in flight at once");
    }
    // Hang's failures were asked too (they wait in hang's own share, behind
    // hang's own probes, and may be given up unprobed).
    let asked = asks_served(&ops[..2]).await - asked_before;
    let hang_of_cut = seen(hang)
        .await
        .values()
        .filter(|(o, _)| o == cut_one)
        .count();
    println!(
        "asks served by the confirmers during the cut: {asked} (the cut replica owns \
         {hang_of_cut} hang checkers)"
    );
    assert!(asked >= hang_of_cut as f64, "{asked} asks");
}
