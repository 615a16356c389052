//! The `shards` installation: two replicas share 100 checkers (the minimum
//! fleet of WebCheckerShardImbalance), each replica behind a fault proxy.
//!
//! 1. The leader's proxy refuses the sharder's assignment writes (PATCH of a
//!    checker's metadata; status writes and Lease renewals pass): a sharder
//!    that cannot write. A third replica joins; no drain can be written, so it
//!    owns nothing while the others own 50 each: WebCheckerShardImbalance
//!    (50 / 33.3 = 1.5 > 1.2).
//! 2. The other replica is SIGKILLed and not restarted: its target is down
//!    (WebCheckerReplicaMissing), and the sharder proves it gone but cannot
//!    reassign its checkers: after a lease they count as orphaned
//!    (WebCheckerOrphaned, value = its checkers).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::fleets::Jobs;
use crate::support::faults::{FaultProxy, sigkill};
use crate::support::fleet::{Fleet, LEASE, shard_sizes};
use crate::support::*;
use crate::watch::{Alerts, labels_of};

/// The rule's `minCheckers`.
pub const CHECKERS: usize = 100;
/// Long enough to keep the probing light; the alerts here do not depend on it.
const INTERVAL_S: u32 = 5;
pub const JOB: &str = "webchecker-shards";

pub struct Shards {
    pub fleet: Fleet,
    proxies: Vec<FaultProxy>,
}

impl Shards {
    /// Two replicas and the checkers, every checker owned.
    pub async fn start(cluster: &'static Cluster) -> Shards {
        let ns = cluster.namespace("shards");
        let mut proxies = Vec::new();
        for i in 0..3 {
            proxies.push(FaultProxy::for_cluster(cluster, &id(i), 10 + i as u64).await);
        }
        let ops: Vec<Operator> = (0..2)
            .map(|i| {
                Operator::spawn_with_kubeconfig(
                    cluster,
                    &id(i),
                    &ns,
                    FAST_LEASES,
                    &proxies[i].kubeconfig,
                )
            })
            .collect();
        let fleet = Fleet::start_at_interval(cluster, ns, ops, CHECKERS, INTERVAL_S).await;
        Shards { fleet, proxies }
    }

    pub fn targets(&self) -> Vec<(String, u16)> {
        self.fleet
            .ops
            .iter()
            .map(|o| (o.identity.clone(), o.port))
            .collect()
    }

    /// (namespace, name) of every checker: none must ever be down (the
    /// orphaned ones lose their series, they do not go down).
    pub fn healthy(&self) -> Vec<(String, String)> {
        self.fleet
            .names
            .iter()
            .map(|n| (self.fleet.ns.clone(), n.clone()))
            .collect()
    }

    pub async fn drive(&mut self, alerts: &Alerts<'_>, jobs: &Jobs<'_>) {
        let f = &mut self.fleet;
        let owners = f.wait_all_assigned(Duration::from_secs(60)).await;
        let sizes = shard_sizes(&owners);
        assert_eq!(sizes.len(), 2, "both replicas own checkers: {sizes:?}");
        let leader = eventually(Duration::from_secs(30), "a leader", || f.leader()).await;
        let li = f.ops.iter().position(|o| o.identity == leader).unwrap();
        let other = 1 - li;

        // 1. The sharder cannot write; a third replica joins.
        self.proxies[li].refuse(500, |method, path| {
            method.as_str() == "PATCH"
                && path.contains("/webcheckers/")
                && !path.ends_with("/status")
        });
        let join = Instant::now();
        let joined = Operator::spawn_with_kubeconfig(
            f.cluster,
            &id(2),
            &f.ns,
            FAST_LEASES,
            &self.proxies[2].kubeconfig,
        );
        joined.wait_ready(Duration::from_secs(60)).await;
        jobs.add(JOB, (joined.identity.clone(), joined.port)).await;
        f.ops.push(joined);
        let fired = alerts
            .wait_firing(
                "a replica joined a sharder that cannot write",
                "WebCheckerShardImbalance",
                labels_of(&[("job", JOB), ("severity", "info")]),
                join,
                // Its start and readiness, and the reload that adds its target.
                Duration::from_secs(20),
            )
            .await;
        let (max, total) = (*sizes.values().max().unwrap(), CHECKERS as f64);
        let ratio = max as f64 / (total / 3.0);
        assert!(
            (fired.alert.value - ratio).abs() < 0.01,
            "largest shard / average: {} (owners {sizes:?} and one empty)",
            fired.alert.value
        );
        assert_eq!(
            current(f).await,
            owners,
            "no assignment changed while the sharder's writes were refused"
        );
        println!(
            "shards: leader {leader}'s proxy: {}",
            self.proxies[li].stats()
        );

        // 2. The other replica dies; its checkers cannot be reassigned.
        let victim = f.ops[other].identity.clone();
        let lost = owners.values().filter(|o| **o == victim).count();
        sigkill(&mut f.ops[other]);
        let killed = Instant::now();
        let port = f.ops[other].port;
        let instance = format!("127.0.0.1:{port}");
        let (orphaned, _) = tokio::join!(
            alerts.wait_firing(
                "an owner was killed and the sharder cannot reassign",
                "WebCheckerOrphaned",
                labels_of(&[("job", JOB), ("severity", "critical")]),
                killed,
                // Its Lease runs out, then a lease of grace.
                LEASE * 3,
            ),
            alerts.wait_firing(
                "a replica was killed",
                "WebCheckerReplicaMissing",
                labels_of(&[
                    ("job", JOB),
                    ("instance", &instance),
                    ("pod", &victim),
                    ("severity", "warning"),
                ]),
                killed,
                Duration::from_secs(2),
            ),
        );
        assert_eq!(
            orphaned.alert.value, lost as f64,
            "orphans: {victim}'s checkers"
        );
    }
}

fn id(i: usize) -> String {
    format!("shards-r{i}")
}

/// Owners as they stand (every checker must have one).
async fn current(f: &Fleet) -> HashMap<String, String> {
    f.owners()
        .await
        .into_iter()
        .map(|(k, v)| {
            let v = v.unwrap_or_else(|| panic!("{k} lost its owner"));
            (k, v)
        })
        .collect()
}
