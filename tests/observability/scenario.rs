//! The end-to-end scenario: three operator replicas, then a fourth
//! (scale-out: checkers move through drains), checkers of every kind on one
//! witness, and a real Prometheus scraping every replica each second with the
//! alert rules loaded (the version of WEBCHECKER_PROMETHEUS, 3.x by
//! default), and beside it the other version (Debian's 2.42 by default), scraping
//! the same, for the checks that run on both (expressions.rs). The checks (the
//! other modules) read what it leaves.

use std::collections::{BTreeSet, HashMap};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};

use crate::platform::prometheus3_bin;
use crate::prom::Prometheus;
use crate::support::fleet::shard_sizes;
use crate::support::objlog::{ObjRec, ObjectLog, RecKind};
use crate::support::*;

pub const HEALTHY: usize = 24;
pub const FAILING: usize = 8;
pub const SLOW: usize = 3;
pub const SLOW_FAILING: usize = 3;
pub const BREAKING: usize = 4;
pub const LATE: usize = 2;
const SLOW_HANG: Duration = Duration::from_millis(600);
/// The replica the scale-out adds.
pub const NEW_REPLICA: &str = "obs-r3";

/// The scenario's checkers. All probe one witness, path /c/<name>.
struct Spec {
    name: String,
    interval: u64,
    extra: Value,
}

fn fleet_specs() -> Vec<Spec> {
    let mut v = Vec::new();
    let mut add = |prefix: &str, n: usize, interval: u64, extra: Value| {
        for i in 0..n {
            v.push(Spec {
                name: format!("{prefix}-{i}"),
                interval,
                extra: extra.clone(),
            });
        }
    };
    // Answer 200 at once.
    add("ok", HEALTHY, 2, json!({}));
    // Answer 503: UnexpectedStatus, never Ready.
    add("down", FAILING, 2, json!({}));
    // Answer 200 after 600ms: Ready, but slow (p90 above 500ms).
    add("slow", SLOW, 3, json!({"timeoutSeconds": 2}));
    // Same, with a 300ms limit: SlowResponse, never Ready.
    add(
        "sla",
        SLOW_FAILING,
        3,
        json!({"timeoutSeconds": 2, "maxResponseTimeMillis": 300}),
    );
    // Answer 200, then 500 from the middle of the test: down after a success.
    add("brk", BREAKING, 2, json!({}));
    // Created after the scale-out: the sharder assigns them (cause `new`),
    // which feeds the assignment latency histogram in the last minute.
    add("new", LATE, 2, json!({}));
    v
}

/// Unix time of a witness Instant.
pub struct Clock {
    i0: Instant,
    w0: f64,
}

impl Clock {
    fn now() -> Clock {
        Clock {
            i0: Instant::now(),
            w0: now_unix(),
        }
    }

    pub fn wall(&self, i: Instant) -> f64 {
        self.w0 + i.saturating_duration_since(self.i0).as_secs_f64()
    }
}

pub fn now_unix() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// What the scenario leaves for the checks.
pub struct Run {
    pub started: Instant,
    pub clock: Clock,
    pub prom: Prometheus,
    /// The other Prometheus version, scraping the same replicas with the same
    /// rules (only expressions.rs asks it).
    pub prom_other: Prometheus,
    pub ops: Vec<Operator>,
    pub witness: Witness,
    pub client: kube::Client,
    pub ns: String,
    pub names: Vec<String>,
    /// Owner of every initial checker just before the scale-out.
    pub before: HashMap<String, String>,
    /// Owner of every checker at the end.
    pub after: HashMap<String, String>,
    /// The checkers the scale-out moved (to NEW_REPLICA).
    pub moved: Vec<String>,
    /// Every version of every checker since before the first was created:
    /// the handovers and acks the replicas' counters must match.
    pub objlog: ObjectLog,
    /// Unix time at which the scale-out began.
    pub move_at: f64,
}

impl Run {
    /// Runs the scenario: 3 replicas, the checkers, a scale-out to 4, late
    /// checkers, then 20 s on four replicas.
    pub async fn start() -> Run {
        // Prometheus 3 may be built first (hack/build-prometheus.sh, minutes
        // on a fresh machine): before anything runs, off the runtime's threads.
        tokio::task::spawn_blocking(prometheus3_bin).await.unwrap();
        let started = Instant::now();
        let clock = Clock::now();
        let cluster = Cluster::shared("observability");
        let ns = cluster.namespace("obs");
        let client = cluster.client().await;
        let api = checkers_api(&client, &ns);
        let witness = Witness::start().await;
        let objlog = ObjectLog::start(client.clone(), &ns).await;
        let specs = fleet_specs();
        let names: Vec<String> = specs.iter().map(|s| s.name.clone()).collect();
        let total = names.len();
        let create = |s: &Spec| {
            let obj = checker_object(&s.name, &witness.url(), s.interval, s.extra.clone());
            let api = api.clone();
            async move { api.create(&Default::default(), &obj).await.unwrap() }
        };
        for n in group(&names, "down") {
            witness.set_mode(&n, Mode::Status(503));
        }
        for n in group(&names, "slow")
            .into_iter()
            .chain(group(&names, "sla"))
        {
            witness.set_mode(&n, Mode::Hang(SLOW_HANG));
        }

        // Three replicas, Prometheus scraping them, the checkers.
        let mut ops: Vec<Operator> = (0..3)
            .map(|i| Operator::spawn(cluster, &format!("obs-r{i}"), &ns, FAST_LEASES))
            .collect();
        let rules = [repo().join("alerts/webchecker.rules.yaml")];
        let prom = Prometheus::start(&targets(&ops), &rules);
        let prom_other = Prometheus::start_with(prom.version.other(), &targets(&ops), &rules);
        for o in &ops {
            o.wait_ready(Duration::from_secs(60)).await;
        }
        for p in [&prom, &prom_other] {
            p.wait_ready().await;
            p.wait_targets_up(&targets(&ops)).await;
        }
        // The checkers only now: every owner from the first is scraped (a
        // replica that held a checker before Prometheus' first scrape of it
        // left no series), and the three replicas are up, so that placement
        // does not hand checkers from the first replica to the others.
        for s in specs.iter().filter(|s| !s.name.starts_with("new-")) {
            create(s).await;
        }
        let live = identities(&ops);
        let initial: Vec<String> = names
            .iter()
            .filter(|n| !n.starts_with("new-"))
            .cloned()
            .collect();
        let before = eventually(Duration::from_secs(60), "every checker assigned", || {
            settled(&client, &ns, &live, initial.len())
        })
        .await;
        wait_probed(
            &witness,
            &initial,
            Duration::from_secs(30),
            "every checker probed",
        )
        .await;
        println!(
            "fleet of {} checkers on 3 replicas after {:?}",
            initial.len(),
            started.elapsed()
        );

        // Let it run; the brk-* checkers break in the middle (down after successes).
        tokio::time::sleep(Duration::from_secs(12)).await;
        for n in group(&names, "brk") {
            witness.set_mode(&n, Mode::Status(500));
        }
        tokio::time::sleep(Duration::from_secs(8)).await;

        // Scale 3 -> 4: the sharder drains about a quarter of the checkers to obs-r3.
        let before = {
            // Owners may not change without a ring change; re-read to be sure.
            let now = settled(&client, &ns, &live, initial.len())
                .await
                .expect("still settled");
            assert_eq!(now, before, "owners changed without a ring change");
            now
        };
        let move_at = now_unix();
        ops.push(Operator::spawn(cluster, NEW_REPLICA, &ns, FAST_LEASES));
        prom.set_targets(&targets(&ops));
        prom_other.set_targets(&targets(&ops));
        let live = identities(&ops);
        let after = eventually(
            Duration::from_secs(60),
            "the fourth replica holds its share",
            || settled(&client, &ns, &live, initial.len()),
        )
        .await;
        let moved: Vec<String> = initial
            .iter()
            .filter(|n| before[*n] != after[*n])
            .cloned()
            .collect();
        assert!(
            moved.iter().all(|n| after[n] == NEW_REPLICA),
            "scale-out moves checkers to the new replica only"
        );
        assert!(!moved.is_empty(), "the scale-out moved nothing");
        let settle_secs = now_unix() - move_at;
        eventually(
            Duration::from_secs(20),
            "moved checkers probed by the new replica",
            || async {
                let hits = witness.all_hits();
                moved
                    .iter()
                    .all(|n| {
                        hits.iter()
                            .any(|h| &h.checker == n && h.replica == NEW_REPLICA)
                    })
                    .then_some(())
            },
        )
        .await;
        prom.wait_targets_up(&targets(&ops)).await;
        prom_other.wait_targets_up(&targets(&ops)).await;
        // Late checkers, assigned as new ones; nothing else moves.
        for s in specs.iter().filter(|s| s.name.starts_with("new-")) {
            create(s).await;
        }
        let after = {
            let all = eventually(Duration::from_secs(30), "late checkers assigned", || {
                settled(&client, &ns, &live, total)
            })
            .await;
            for n in &initial {
                assert_eq!(all[n], after[n], "{n} moved when the late checkers came");
            }
            all
        };
        wait_probed(
            &witness,
            &names,
            Duration::from_secs(20),
            "late checkers probed",
        )
        .await;
        println!(
            "scale 3->4: {} of {} moved ({:?}), settled {:.1}s after the new replica started",
            moved.len(),
            initial.len(),
            moved,
            settle_secs
        );
        // Run a while on four replicas.
        tokio::time::sleep(Duration::from_secs(20)).await;
        Run {
            started,
            clock,
            prom,
            prom_other,
            ops,
            witness,
            client,
            objlog,
            ns,
            names,
            before,
            after,
            moved,
            move_at,
        }
    }

    pub fn total(&self) -> usize {
        self.names.len()
    }

    /// The checkers of one kind: `<prefix>-<i>`.
    pub fn group(&self, prefix: &str) -> Vec<String> {
        group(&self.names, prefix)
    }

    /// The label selector of the scenario's checkers.
    pub fn sel(&self) -> String {
        format!("namespace=\"{}\"", self.ns)
    }

    /// The owners, which must still be settled on the four replicas.
    pub async fn owners_now(&self) -> HashMap<String, String> {
        settled(&self.client, &self.ns, &identities(&self.ops), self.total())
            .await
            .expect("still settled")
    }
}

fn group(names: &[String], prefix: &str) -> Vec<String> {
    names
        .iter()
        .filter(|n| n.starts_with(&format!("{prefix}-")))
        .cloned()
        .collect()
}

/// Waits until the witness has seen a probe of each of `names`.
async fn wait_probed(witness: &Witness, names: &[String], timeout: Duration, what: &str) {
    eventually(timeout, what, || async {
        let seen: BTreeSet<String> = witness.all_hits().into_iter().map(|h| h.checker).collect();
        names.iter().all(|n| seen.contains(n)).then_some(())
    })
    .await
}

/// Prometheus' targets: (replica identity, port of its /metrics).
fn targets(ops: &[Operator]) -> Vec<(String, u16)> {
    ops.iter().map(|o| (o.identity.clone(), o.port)).collect()
}

fn identities(ops: &[Operator]) -> Vec<String> {
    ops.iter().map(|o| o.identity.clone()).collect()
}

/// Every checker assigned, no drain in progress, no shard above ceil(M/N).
async fn settled(
    client: &kube::Client,
    ns: &str,
    live: &[String],
    total: usize,
) -> Option<HashMap<String, String>> {
    let o = owners(client, ns).await.unwrap();
    if o.len() != total
        || !o
            .values()
            .all(|v| v.as_ref().is_some_and(|v| live.contains(v)))
    {
        return None;
    }
    let o: HashMap<String, String> = o.into_iter().map(|(k, v)| (k, v.unwrap())).collect();
    let sizes = shard_sizes(&o);
    let cap = total.div_ceil(live.len());
    (sizes.len() == live.len() && sizes.values().all(|s| *s <= cap)).then_some(o)
}

/// Handovers and drain acknowledgements in the object log, each seen as a
/// change of one checker (listed baselines are not changes): (handovers,
/// acks). The old owner's acknowledgement that assigns the drain's target
/// itself is both (the sharder counts it as a rebalance move, the old owner
/// as a drain). Of a drain an earlier sharder wrote (no epoch of the
/// target), the ack is the old owner's removal of its owner label while the
/// drain stands, and the handover the sharder's assignment after it. A drain re-targeted
/// because its target looked gone (a starved replica's late renewal) is two
/// of each, as the counters see it.
pub fn handovers_and_acks(objs: &[ObjRec]) -> (usize, usize) {
    let mut last: HashMap<&str, &ObjRec> = HashMap::new();
    let (mut handovers, mut acks) = (0, 0);
    for o in objs {
        if o.kind != RecKind::Listed
            && let Some(prev) = last.get(o.name.as_str())
            && let Some(target) = &prev.drain
        {
            match (&prev.owner, &o.owner) {
                (Some(old), Some(owner))
                    if owner == target && old != owner && o.drain.is_none() =>
                {
                    handovers += 1;
                    acks += 1;
                }
                (None, Some(owner)) if owner == target && o.drain.is_none() => handovers += 1,
                (Some(_), None) if o.drain.as_ref() == Some(target) => acks += 1,
                _ => {}
            }
        }
        last.insert(o.name.as_str(), o);
    }
    (handovers, acks)
}
