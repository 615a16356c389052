//! Fast failover: a replica whose process is gone is proven gone
//! by its peers' evidence (its advertised address refuses connections) and
//! its checkers move at once, not one lease later; evidence that lies costs
//! at most one retry period of double probing, once. Default leases (10 s /
//! 7 s / 2 s), real processes, the witness's log as the oracle.

use webchecker_kit as support;

use support::fleet::*;

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use support::*;
use tokio::net::TcpListener;
use webchecker::api::PEER_EVIDENCE_ANNOTATION;

/// The operator's default Lease timings.
const DEFAULT_LEASE: Duration = Duration::from_secs(10);
const DEFAULT_RETRY: Duration = Duration::from_secs(2);

async fn default_fleet(
    prefix: &str,
    ops: impl Fn(&'static Cluster, &str) -> Vec<Operator>,
) -> Fleet {
    let cluster = Cluster::shared("failover");
    let ns = cluster.namespace(prefix);
    let ops = ops(cluster, &ns);
    Fleet::start_with(cluster, ns, ops, 300).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_replica_or_leader_is_replaced_within_an_interval_and_a_retry_period() {
    let mut fleet = default_fleet("kill", |cluster, ns| {
        (0..4)
            .map(|i| Operator::spawn(cluster, &format!("kill-r{i}"), ns, &[]))
            .collect()
    })
    .await;
    // At a 2 s interval the largest gap is at most
    // 4 s (interval + one retry period), where a lease-based failover needs
    // the interval plus the 10 s lease.
    let bound = Duration::from_secs(INTERVAL as u64) + DEFAULT_RETRY;
    let mut proven = 0.0;
    for kill_leader in [false, true] {
        let victim = fleet.victim(kill_leader).await;
        let (gap, who) = fleet
            .kill_and_wait_failover(&victim, DEFAULT_LEASE * 3)
            .await;
        let what = if kill_leader { "leader" } else { "non-leader" };
        println!(
            "fast failover: SIGKILL of the {what}: {} checkers, largest gap {gap:?} ({who}), bound {bound:?}, one lease would be {:?}",
            victim.checkers.len(),
            DEFAULT_LEASE + Duration::from_secs(INTERVAL as u64)
        );
        assert!(gap <= bound, "{what}: {who} unprobed for {gap:?}");
        let owners = fleet.wait_all_assigned(DEFAULT_LEASE).await;
        assert!(owners.values().all(|o| *o != victim.identity));
        let leader = fleet.leader().await.expect("a leader");
        proven += fleet
            .counter(
                &leader,
                "webchecker_peer_evidence_proofs_total",
                &[("result", "proven")],
            )
            .await;
    }
    // Both moves were made on evidence (the second leader counts its own).
    assert!(proven >= 1.0, "no member proven gone by evidence");
    assert_eq!(exclusivity_violation(&fleet.witness.hits()), None);
}

/// A door in front of a replica's HTTP port: it forwards until closed, then
/// refuses connections (as a firewall that rejects would), while the replica
/// behind it runs on.
struct Door {
    port: u16,
    task: tokio::task::JoinHandle<()>,
}

impl Door {
    async fn open() -> (Door, TcpListener) {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = l.local_addr().unwrap().port();
        (
            Door {
                port,
                task: tokio::spawn(async {}),
            },
            l,
        )
    }

    fn forward(&mut self, listener: TcpListener, to: u16) {
        self.task = tokio::spawn(async move {
            loop {
                let Ok((mut inbound, _)) = listener.accept().await else {
                    continue;
                };
                tokio::spawn(async move {
                    if let Ok(mut out) = tokio::net::TcpStream::connect(("127.0.0.1", to)).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut out).await;
                    }
                });
            }
        });
    }

    /// Drops the listener: connections to the door are refused from now on.
    async fn close(&mut self) {
        self.task.abort();
        let _ = (&mut self.task).await;
    }
}

/// For the accused's checkers: how long after another replica first probed
/// one did the accused still probe it (while the other's run went on).
fn double_probing(hits: &[Hit], accused: &str, of: &[String], at: Instant) -> (Duration, String) {
    let mut worst = (Duration::ZERO, String::new());
    for c in of {
        let mut hs: Vec<&Hit> = hits
            .iter()
            .filter(|h| &h.checker == c && h.start >= at)
            .collect();
        hs.sort_by_key(|h| h.start);
        let Some(first_other) = hs.iter().position(|h| h.replica != accused) else {
            continue;
        };
        let other = hs[first_other].replica.clone();
        // The other's run: up to its last probe before a hand-back.
        let run_end = hs
            .iter()
            .rposition(|h| h.replica == other)
            .expect("the other probed");
        for h in &hs[first_other..run_end] {
            if h.replica == accused {
                let d = h.start - hs[first_other].start;
                if d > worst.0 {
                    worst = (d, c.clone());
                }
            }
        }
    }
    worst
}

/// The count of members `leader` proved gone by evidence.
async fn proofs(fleet: &Fleet, leader: &str) -> f64 {
    fleet
        .counter(
            leader,
            "webchecker_peer_evidence_proofs_total",
            &[("result", "proven")],
        )
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_falsely_found_gone_double_probes_at_most_a_retry_period_once() {
    let mut doors = Vec::new();
    let mut listeners = Vec::new();
    for _ in 0..3 {
        let (d, l) = Door::open().await;
        doors.push(d);
        listeners.push(l);
    }
    let advertised: Vec<String> = doors
        .iter()
        .map(|d| format!("--advertise-address=127.0.0.1:{}", d.port))
        .collect();
    let cluster = Cluster::shared("failover");
    let ns = cluster.namespace("accuse");
    let ops: Vec<Operator> = (0..3)
        .map(|i| Operator::spawn(cluster, &format!("accuse-r{i}"), &ns, &[&advertised[i]]))
        .collect();
    // A door's listener is bound already: a peer that looks before it
    // forwards waits in the backlog, it is not refused.
    for (i, l) in listeners.into_iter().enumerate() {
        doors[i].forward(l, ops[i].port);
    }
    let fleet = Fleet::start_with(cluster, ns, ops, 300).await;
    let victim = fleet.victim(false).await;
    let leader = victim.leader.clone();
    let hits_before = fleet.witness.hits().len();
    let at = Instant::now();
    doors[victim.index].close().await;
    // The leader proves it gone on the refused connections...
    eventually(
        DEFAULT_LEASE,
        "the accused proven gone by evidence",
        || async { (proofs(&fleet, &leader).await >= 1.0).then_some(()) },
    )
    .await;
    rejoins_distrusted_and_takes_its_share_back(&fleet, &victim.identity).await;
    let watch_until = never_accused_again(&fleet, &victim.identity).await;
    let proven = proofs(&fleet, &leader).await;
    assert_eq!(proven, 1.0, "evidence against one process used once");
    let hits = fleet.witness.hits();
    let (overlap, who) =
        double_probing(&hits[hits_before..], &victim.identity, &victim.checkers, at);
    let (gap, gap_who) = largest_gap(&hits, &fleet.names, at, watch_until);
    println!(
        "false accusation: {} checkers, double probing at most {overlap:?} ({who}), largest gap {gap:?} ({gap_who})",
        victim.checkers.len()
    );
    // The accused probes until its next renewal answers 404: one retry
    // period, plus that renewal's round trip on a loaded machine.
    assert!(
        overlap <= DEFAULT_RETRY + DEFAULT_RETRY / 2,
        "{who}: probed by two replicas for {overlap:?}"
    );
    // No checker lost meanwhile.
    assert!(
        gap <= Duration::from_secs(INTERVAL as u64) + DEFAULT_RETRY,
        "{gap_who} unprobed for {gap:?}"
    );
}

/// `accused`, proven gone, re-joins distrusted and gets its share back.
async fn rejoins_distrusted_and_takes_its_share_back(fleet: &Fleet, accused: &str) {
    // ...it hears so at its next renewal, drops its checkers and re-joins,
    // marking its Lease: its address is no evidence any more.
    let leases: Api<Lease> = Api::namespaced(fleet.client.clone(), &fleet.ns);
    let name = format!("webchecker-member-{accused}");
    eventually(
        DEFAULT_LEASE * 2,
        "the accused re-joined, distrusted",
        || async {
            let l = leases.get_opt(&name).await.ok().flatten()?;
            let a = l.metadata.annotations?;
            (a.get(PEER_EVIDENCE_ANNOTATION).map(String::as_str) == Some("distrusted"))
                .then_some(())
        },
    )
    .await;
    // It gets its share back (through drains) and keeps it, its door still
    // closed: watch for two leases that nobody accuses it again.
    eventually(
        DEFAULT_LEASE * 3,
        "the accused holds its share again",
        || async {
            let owners = fleet.wait_all_assigned(DEFAULT_LEASE).await;
            (shard_sizes(&owners).get(accused).copied() == Some(fleet.names.len() / 3))
                .then_some(())
        },
    )
    .await;
}

/// For two leases from now, every retry period: `accused` lost its Lease
/// no more than the once. The end of the watch.
async fn never_accused_again(fleet: &Fleet, accused: &str) -> Instant {
    let watch_from = Instant::now();
    let watch_until = watch_from + DEFAULT_LEASE * 2;
    while Instant::now() < watch_until {
        let fences = fleet
            .counter(
                accused,
                "webchecker_self_fences_total",
                &[("reason", "lost")],
            )
            .await;
        assert_eq!(fences, 1.0, "the accused lost its Lease again");
        tokio::time::sleep(DEFAULT_RETRY).await;
    }
    watch_until
}
