//! A fleet of operator replicas with checkers on one witness, shared by the
//! high-availability and reliability tests.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use kube::Api;
use kube::core::DynamicObject;

use crate::*;

pub const INTERVAL: u32 = 2;
/// Must match FAST_LEASES.
pub const LEASE: Duration = Duration::from_secs(3);
pub const RETRY: Duration = Duration::from_millis(500);

/// A replica chosen to suffer a fault.
pub struct Victim {
    pub index: usize,
    pub identity: String,
    /// The leader when it was chosen.
    pub leader: String,
    pub checkers: Vec<String>,
}

pub struct Fleet {
    pub cluster: &'static Cluster,
    pub ns: String,
    pub ops: Vec<Operator>,
    pub witness: Witness,
    pub names: Vec<String>,
    pub client: kube::Client,
}

impl Fleet {
    pub async fn start(
        cluster_name: &str,
        prefix: &str,
        replicas: usize,
        checkers: usize,
    ) -> Fleet {
        Self::start_on(Cluster::shared(cluster_name), prefix, replicas, checkers).await
    }

    pub async fn start_on(
        cluster: &'static Cluster,
        prefix: &str,
        replicas: usize,
        checkers: usize,
    ) -> Fleet {
        let ns = cluster.namespace(prefix);
        let ops: Vec<Operator> = (0..replicas)
            .map(|i| Operator::spawn(cluster, &format!("{prefix}-r{i}"), &ns, FAST_LEASES))
            .collect();
        Self::start_with(cluster, ns, ops, checkers).await
    }

    /// A fleet of replicas the caller spawned (in `ns`, for example behind
    /// proxies of its own), with `checkers` new checkers, settled.
    pub async fn start_with(
        cluster: &'static Cluster,
        ns: String,
        ops: Vec<Operator>,
        checkers: usize,
    ) -> Fleet {
        Self::start_at_interval(cluster, ns, ops, checkers, INTERVAL).await
    }

    /// Same, the checkers probed every `interval_s` seconds.
    pub async fn start_at_interval(
        cluster: &'static Cluster,
        ns: String,
        ops: Vec<Operator>,
        checkers: usize,
        interval_s: u32,
    ) -> Fleet {
        let witness = Witness::start().await;
        witness.set_hold(crate::witness::HOLD.0, crate::witness::HOLD.1);
        Self::start_with_witness(cluster, ns, ops, witness, checkers, interval_s).await
    }

    /// Same, the checkers probing `witness` (one on an address of the
    /// test's choice).
    pub async fn start_with_witness(
        cluster: &'static Cluster,
        ns: String,
        ops: Vec<Operator>,
        witness: Witness,
        checkers: usize,
        interval_s: u32,
    ) -> Fleet {
        let client = cluster.client().await;
        // Let every replica join first, so the initial assignment is already
        // balanced (a late joiner would take its share through drains).
        for o in &ops {
            o.wait_ready(Duration::from_secs(60)).await;
        }
        let names: Vec<String> = (0..checkers).map(|i| format!("c{i}")).collect();
        create_checkers(&client, &ns, &witness.url(), &names, interval_s).await;
        let f = Fleet {
            cluster,
            ns,
            ops,
            witness,
            names,
            client,
        };
        f.wait_all_assigned(Duration::from_secs(60)).await;
        f.wait_all_probed_since(Instant::now(), Duration::from_secs(30))
            .await;
        f
    }

    /// The leader (`leader`) or a live replica that is not the leader: its
    /// index, identity and the checkers it owns once every checker is owned.
    pub async fn victim(&self, leader: bool) -> Victim {
        let owners = self.wait_all_assigned(Duration::from_secs(60)).await;
        // On a busy API server leadership can lapse for a moment.
        let leader_id = eventually(Duration::from_secs(30), "a leader", || self.leader()).await;
        let index = self
            .ops
            .iter()
            .position(|o| o.child.is_some() && (o.identity == leader_id) == leader)
            .expect("a live victim");
        let identity = self.ops[index].identity.clone();
        let checkers: Vec<String> = owners
            .iter()
            .filter(|(_, o)| **o == identity)
            .map(|(k, _)| k.clone())
            .collect();
        assert!(!checkers.is_empty(), "{identity} owns checkers");
        Victim {
            index,
            identity,
            leader: leader_id,
            checkers,
        }
    }

    /// SIGKILLs `v` and waits (up to `limit`) until each of its checkers is
    /// probed again; returns the largest gap and the checker it was seen on.
    pub async fn kill_and_wait_failover(
        &mut self,
        v: &Victim,
        limit: Duration,
    ) -> (Duration, String) {
        let at = Instant::now();
        self.ops[v.index].kill();
        eventually(
            limit,
            "the killed replica's checkers probed again",
            || async {
                (failover_gap(&self.witness.hits(), &v.checkers, at).0 != Duration::MAX)
                    .then_some(())
            },
        )
        .await;
        failover_gap(&self.witness.hits(), &v.checkers, at)
    }

    pub fn api(&self) -> Api<DynamicObject> {
        checkers_api(&self.client, &self.ns)
    }

    /// Owner of every checker; a checker with a drain in progress counts as unassigned.
    pub async fn owners(&self) -> HashMap<String, Option<String>> {
        owners(&self.client, &self.ns).await.unwrap()
    }

    pub fn live_identities(&self) -> Vec<String> {
        self.ops
            .iter()
            .filter(|o| o.child.is_some())
            .map(|o| o.identity.clone())
            .collect()
    }

    /// Every checker owned by a live replica.
    pub async fn wait_all_assigned(&self, timeout: Duration) -> HashMap<String, String> {
        let live = self.live_identities();
        eventually(
            timeout,
            "every checker assigned to a live replica",
            || async {
                let owners = self.owners().await;
                if owners.len() == self.names.len()
                    && owners
                        .values()
                        .all(|o| o.as_ref().is_some_and(|o| live.contains(o)))
                {
                    Some(owners.into_iter().map(|(k, v)| (k, v.unwrap())).collect())
                } else {
                    None
                }
            },
        )
        .await
    }

    pub async fn wait_all_probed_since(&self, since: Instant, timeout: Duration) {
        eventually(timeout, "every checker probed", || async {
            let hits = self.witness.hits();
            let mut seen = std::collections::HashSet::new();
            for h in hits.iter().filter(|h| h.start >= since) {
                seen.insert(h.checker.clone());
            }
            (seen.len() == self.names.len()).then_some(())
        })
        .await
    }

    pub fn op(&self, identity: &str) -> &Operator {
        self.ops.iter().find(|o| o.identity == identity).unwrap()
    }

    pub async fn leader(&self) -> Option<String> {
        for o in self.ops.iter().filter(|o| o.child.is_some()) {
            if let Some(m) = o.metrics().await
                && metric(&m, "webchecker_leader", &[]) == Some(1.0)
            {
                return Some(o.identity.clone());
            }
        }
        None
    }

    /// A counter of one replica (0 while the series has not been exported).
    /// Panics if the replica does not answer: a silent 0 would let an
    /// equality between two readings hold vacuously.
    pub async fn counter(&self, identity: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.counter_if_answered(identity, name, labels)
            .await
            .unwrap_or_else(|| panic!("{identity} does not serve its metrics"))
    }

    /// A counter of one replica, None while it does not answer (a replica
    /// just resumed from SIGSTOP first serves the connections queued while
    /// it was stopped, and refuses a peer's beyond its per-peer limit).
    pub async fn counter_if_answered(
        &self,
        identity: &str,
        name: &str,
        labels: &[(&str, &str)],
    ) -> Option<f64> {
        let m = self.op(identity).metrics().await?;
        Some(metric(&m, name, labels).unwrap_or(0.0))
    }

    /// A metric summed over every replica; each must answer.
    pub async fn sum(&self, name: &str) -> f64 {
        let mut total = 0.0;
        for o in &self.ops {
            total += self.counter(&o.identity, name, &[]).await;
        }
        total
    }

    /// Probing went on at its interval throughout `[from, to]` (while the API
    /// server was away, say): no checker's probes further apart than an
    /// interval and 700 ms, after the first interval. The probes of the
    /// window; `what` names it in the report.
    pub fn assert_probed_throughout(&self, from: Instant, to: Instant, what: &str) -> Vec<Hit> {
        let hits = self.witness.hits_between(from, to);
        let interval = Duration::from_secs(INTERVAL.into());
        let (gap, who) = largest_gap(&hits, &self.names, from + interval, to);
        println!("{what}: largest probe gap {gap:?} ({who})");
        assert!(
            gap <= interval + Duration::from_millis(700),
            "{what}: {who}: {gap:?}"
        );
        hits
    }

    /// Waits (up to `timeout`) until the first condition of each of `names`
    /// has this reason.
    pub async fn wait_reason(&self, names: &[String], reason: &str, timeout: Duration) {
        let api = self.api();
        eventually(
            timeout,
            &format!("reason {reason} in the status of {} checkers", names.len()),
            || async {
                for c in names {
                    let o = api.get(c).await.ok()?;
                    o.data
                        .pointer("/status/conditions/0/reason")
                        .and_then(|v| v.as_str())
                        .filter(|r| *r == reason)?;
                }
                Some(())
            },
        )
        .await
    }
}

pub fn shard_sizes(owners: &HashMap<String, String>) -> BTreeMap<String, usize> {
    let mut sizes = BTreeMap::new();
    for o in owners.values() {
        *sizes.entry(o.clone()).or_default() += 1;
    }
    sizes
}
