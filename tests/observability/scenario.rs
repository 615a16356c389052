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
    // Answer 503: UnexpectedStatus, never Ready; with an objective, whose
    // series feed the SLO rules and panels.
    add(
        "down",
        FAILING,
        2,
        json!({"slo": {"objective": "99.5", "window": "7d"}}),
    );
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

/// The scenario's fixtures before any replica runs: the namespace, the
/// witness (answering as each kind of checker needs), the object log.
struct Stage {
    started: Instant,
    clock: Clock,
    cluster: &'static Cluster,
    ns: String,
    client: kube::Client,
    witness: Witness,
    objlog: ObjectLog,
    specs: Vec<Spec>,
    names: Vec<String>,
}

/// What the scale-out 3 -> 4 did.
struct ScaleOut {
    /// Owners just before it, and once the fourth replica holds its share.
    before: HashMap<String, String>,
    after: HashMap<String, String>,
    moved: Vec<String>,
    /// Unix time at which it began; seconds until the owners settled.
    move_at: f64,
    settle_secs: f64,
}

impl Stage {
    async fn prepare() -> Stage {
        // Prometheus 3 may be built first (hack/build-prometheus.sh, minutes
        // on a fresh machine): before anything runs, off the runtime's threads.
        tokio::task::spawn_blocking(prometheus3_bin).await.unwrap();
        let started = Instant::now();
        let clock = Clock::now();
        let cluster = Cluster::shared("observability");
        let ns = cluster.namespace("obs");
        let client = cluster.client().await;
        let witness = Witness::start().await;
        let objlog = ObjectLog::start(client.clone(), &ns).await;
        let specs = fleet_specs();
        let names: Vec<String> = specs.iter().map(|s| s.name.clone()).collect();
        for n in group(&names, "down") {
            witness.set_mode(&n, Mode::Status(503));
        }
        for n in group(&names, "slow")
            .into_iter()
            .chain(group(&names, "sla"))
        {
            witness.set_mode(&n, Mode::Hang(SLOW_HANG));
        }
        Stage {
            started,
            clock,
            cluster,
            ns,
            client,
            witness,
            objlog,
            specs,
            names,
        }
    }

    async fn create(&self, s: &Spec) {
        let obj = checker_object(&s.name, &self.witness.url(), s.interval, s.extra.clone());
        checkers_api(&self.client, &self.ns)
            .create(&Default::default(), &obj)
            .await
            .unwrap();
    }

    /// The checkers created before the scale-out (all but the late ones).
    fn initial(&self) -> Vec<String> {
        self.names
            .iter()
            .filter(|n| !n.starts_with("new-"))
            .cloned()
            .collect()
    }

    /// Three replicas and both Prometheus versions scraping them, all ready.
    async fn replicas_and_prometheus(&self) -> (Vec<Operator>, Prometheus, Prometheus) {
        let flags = replica_flags();
        let ops: Vec<Operator> = (0..3)
            .map(|i| Operator::spawn(self.cluster, &format!("obs-r{i}"), &self.ns, &flags))
            .collect();
        // WebCheckerDown at once: its two minutes would outlast the scenario.
        let rules = [crate::prom::rules_with_down_wait(0)];
        let prom = Prometheus::start(&targets(&ops), &rules);
        let prom_other = Prometheus::start_with(prom.version.other(), &targets(&ops), &rules);
        for o in &ops {
            o.wait_ready(Duration::from_secs(60)).await;
        }
        for p in [&prom, &prom_other] {
            p.wait_ready().await;
            p.wait_targets_up(&targets(&ops)).await;
        }
        (ops, prom, prom_other)
    }

    /// Creates the initial checkers on the three replicas; their settled
    /// owners once every one was probed.
    async fn create_initial(
        &self,
        ops: &[Operator],
        initial: &[String],
    ) -> HashMap<String, String> {
        // The checkers only now: every owner from the first is scraped (a
        // replica that held a checker before Prometheus' first scrape of it
        // left no series), and the three replicas are up, so that placement
        // does not hand checkers from the first replica to the others.
        for s in self.specs.iter().filter(|s| !s.name.starts_with("new-")) {
            self.create(s).await;
        }
        let live = identities(ops);
        let before = eventually(Duration::from_secs(60), "every checker assigned", || {
            settled(&self.client, &self.ns, &live, initial.len())
        })
        .await;
        wait_probed(
            &self.witness,
            initial,
            Duration::from_secs(30),
            "every checker probed",
        )
        .await;
        println!(
            "fleet of {} checkers on 3 replicas after {:?}",
            initial.len(),
            self.started.elapsed()
        );
        before
    }

    /// Lets the fleet run; the brk-* checkers break in the middle (down
    /// after successes).
    async fn break_midway(&self) {
        tokio::time::sleep(Duration::from_secs(12)).await;
        for n in group(&self.names, "brk") {
            self.witness.set_mode(&n, Mode::Status(500));
        }
        tokio::time::sleep(Duration::from_secs(8)).await;
    }

    /// Scales 3 -> 4: the sharder drains about a quarter of the checkers to
    /// obs-r3, which probes them; both Prometheus scrape it.
    async fn scale_out(
        &self,
        ops: &mut Vec<Operator>,
        proms: [&Prometheus; 2],
        initial: &[String],
        settled_before: HashMap<String, String>,
    ) -> ScaleOut {
        let live = identities(ops);
        let before = {
            // Owners may not change without a ring change; re-read to be sure.
            let now = settled(&self.client, &self.ns, &live, initial.len())
                .await
                .expect("still settled");
            assert_eq!(now, settled_before, "owners changed without a ring change");
            now
        };
        let move_at = now_unix();
        ops.push(Operator::spawn(
            self.cluster,
            NEW_REPLICA,
            &self.ns,
            &replica_flags(),
        ));
        for p in proms {
            p.set_targets(&targets(ops));
        }
        let live = identities(ops);
        let after = eventually(
            Duration::from_secs(60),
            "the fourth replica holds its share",
            || settled(&self.client, &self.ns, &live, initial.len()),
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
        self.wait_probed_by_new_replica(&moved).await;
        for p in proms {
            p.wait_targets_up(&targets(ops)).await;
        }
        ScaleOut {
            before,
            after,
            moved,
            move_at,
            settle_secs,
        }
    }

    async fn wait_probed_by_new_replica(&self, moved: &[String]) {
        eventually(
            Duration::from_secs(20),
            "moved checkers probed by the new replica",
            || async {
                let hits = self.witness.all_hits();
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
    }

    /// Late checkers, assigned as new ones; nothing else moves. The owners
    /// of all, once the late ones were probed.
    async fn add_late(
        &self,
        ops: &[Operator],
        initial: &[String],
        after_scale_out: &HashMap<String, String>,
    ) -> HashMap<String, String> {
        for s in self.specs.iter().filter(|s| s.name.starts_with("new-")) {
            self.create(s).await;
        }
        let live = identities(ops);
        let all = eventually(Duration::from_secs(30), "late checkers assigned", || {
            settled(&self.client, &self.ns, &live, self.names.len())
        })
        .await;
        for n in initial {
            assert_eq!(
                all[n], after_scale_out[n],
                "{n} moved when the late checkers came"
            );
        }
        wait_probed(
            &self.witness,
            &self.names,
            Duration::from_secs(20),
            "late checkers probed",
        )
        .await;
        all
    }
}

impl Run {
    /// Runs the scenario: 3 replicas, the checkers, a scale-out to 4, late
    /// checkers, then 20 s on four replicas.
    pub async fn start() -> Run {
        let st = Stage::prepare().await;
        // Three replicas, Prometheus scraping them, the checkers.
        let (mut ops, prom, prom_other) = st.replicas_and_prometheus().await;
        let initial = st.initial();
        let before = st.create_initial(&ops, &initial).await;
        st.break_midway().await;
        let scale = st
            .scale_out(&mut ops, [&prom, &prom_other], &initial, before)
            .await;
        let after = st.add_late(&ops, &initial, &scale.after).await;
        println!(
            "scale 3->4: {} of {} moved ({:?}), settled {:.1}s after the new replica started",
            scale.moved.len(),
            initial.len(),
            scale.moved,
            scale.settle_secs
        );
        // Run a while on four replicas.
        tokio::time::sleep(Duration::from_secs(20)).await;
        let Stage {
            started,
            clock,
            ns,
            client,
            witness,
            objlog,
            names,
            ..
        } = st;
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
            before: scale.before,
            after,
            moved: scale.moved,
            move_at: scale.move_at,
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

/// Every replica's flags: the fast leases, and a memory limit as the chart
/// passes one (1 GiB, far above what a replica holds here).
fn replica_flags() -> Vec<&'static str> {
    let mut flags = FAST_LEASES.to_vec();
    flags.push("--memory-limit=1073741824");
    flags
}
