//! A busy API server: API Priority and Fairness answers a share of requests
//! with 429 (`Retry-After: 1`). Each replica reaches the API server through a
//! fault proxy of its own that does so.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::support;
use support::faults::{FaultProxy, ProxyMode, pause, resume};
use support::fleet::*;
use support::*;

/// A busy API server from the first request on: each replica's requests are
/// answered 429 at a 30% share (as Priority and Fairness does under load,
/// with `Retry-After: 1`). Every replica starts, becomes ready and stays up
/// (before, one of three exited at start-up on a single 429 to its
/// permission check: a crash loop exactly when the API server is busiest),
/// and every checker is probed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_replica_exits_at_start_up_on_a_busy_api_server() {
    let cluster = Cluster::shared("reliability");
    let ns = cluster.namespace("busy");
    let mut proxies = Vec::new();
    let mut ops = Vec::new();
    for i in 0..3 {
        let p = FaultProxy::for_cluster(cluster, &format!("busy-r{i}"), 7 + i).await;
        p.set_mode(ProxyMode::Errors {
            share: 0.3,
            codes: vec![429],
        });
        ops.push(Operator::spawn_with_kubeconfig(
            cluster,
            &format!("busy-r{i}"),
            &ns,
            FAST_LEASES,
            &p.kubeconfig,
        ));
        proxies.push(p);
    }
    for o in &ops {
        o.wait_ready(Duration::from_secs(90)).await;
    }
    let witness = Witness::start().await;
    witness.set_hold(support::HOLD.0, support::HOLD.1);
    let client = cluster.client().await;
    let names: Vec<String> = (0..30).map(|i| format!("busy{i}")).collect();
    create_checkers(&client, &ns, &witness.url(), &names, 2).await;
    eventually(Duration::from_secs(60), "every checker probed", || async {
        let hits = witness.hits();
        names
            .iter()
            .all(|n| hits.iter().any(|h| &h.checker == n))
            .then_some(())
    })
    .await;
    let answered: u64 = proxies
        .iter()
        .map(|p| p.stats().injected_errors.load(Ordering::Relaxed))
        .sum();
    println!(
        "busy API server: 3 replicas ready and probing; {answered} requests answered 429 by the proxies"
    );
    assert!(answered > 0, "the proxies answered no request with 429");
    for o in &mut ops {
        assert!(
            o.exited().is_none(),
            "{} exited: {}",
            o.identity,
            o.log_text()
        );
    }
}

/// How long the fleet runs on the busy API server before a replica falls
/// silent: `BUSY_STEADY_SECS`, 30 s in `make test`, 300 in `make busy`.
fn steady() -> Duration {
    let secs = std::env::var("BUSY_STEADY_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(30);
    Duration::from_secs(secs)
}

/// The failover bound of the issue that asked for this, at a 30% share:
/// lease + retry + interval + 4 s (9.5 s with the fast leases of the kit).
fn busy_bound() -> Duration {
    LEASE + RETRY + Duration::from_secs(INTERVAL.into()) + Duration::from_secs(4)
}

/// Failover on a busy API server: every replica's requests are answered 429
/// at a share (30%, then 50%). First the fleet runs `steady()` with nothing
/// to do: no replica fences itself, exits or loses a checker. Then a
/// non-leader falls silent (SIGSTOP: its port neither answers nor refuses, so
/// no peer has evidence; it is judged by its Lease alone), then, once it is
/// back, the leader. Liveness: every checker of the silent replica probed by
/// another within `busy_bound()` at 30%, twice that at 50% (before, each
/// failed call restarted the judge's and the elector's clocks: minutes at
/// 50%); safety: no two replicas probed one checker at once or in turns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_api_server_moves_nothing_and_a_silent_replica_is_replaced() {
    let cluster = Cluster::shared("reliability");
    for (round, share, bound) in [(0, 0.3, busy_bound()), (1, 0.5, 2 * busy_bound())] {
        let ns = cluster.namespace(&format!("busy-failover-{round}"));
        let mut proxies = Vec::new();
        let mut ops = Vec::new();
        for i in 0..3 {
            let id = format!("bf{round}-r{i}");
            let p = FaultProxy::for_cluster(cluster, &id, 30 + 3 * round + i).await;
            ops.push(Operator::spawn_with_kubeconfig(
                cluster,
                &id,
                &ns,
                FAST_LEASES,
                &p.kubeconfig,
            ));
            proxies.push(p);
        }
        let witness = Witness::start().await;
        witness.set_hold(HOLD.0, HOLD.1);
        let fleet =
            Fleet::start_with_witness(cluster, ns.clone(), ops, witness, 300, INTERVAL).await;
        let before = fleet.wait_all_assigned(Duration::from_secs(60)).await;
        let moves_before = fleet.sum("webchecker_moves_total").await;
        for p in &proxies {
            p.set_mode(ProxyMode::Errors {
                share,
                codes: vec![429],
            });
        }
        let pct = share * 100.0;
        quiet_while_busy(&fleet, &before, moves_before, pct).await;
        for leader in [false, true] {
            silent_replica_replaced(&fleet, leader, pct, bound).await;
        }
        assert_eq!(exclusivity_violation(&fleet.witness.hits()), None);
        let injected: u64 = proxies
            .iter()
            .map(|p| p.stats().injected_errors.load(Ordering::Relaxed))
            .sum();
        println!("busy API server ({pct:.0}% 429): {injected} requests answered 429 in all");
    }
}

/// `steady()` on the busy API server: no self-fence, no move, no exit, and
/// every checker probed throughout by its owner.
async fn quiet_while_busy(
    fleet: &Fleet,
    before: &std::collections::HashMap<String, String>,
    moves_before: f64,
    pct: f64,
) {
    let from = Instant::now();
    tokio::time::sleep(steady()).await;
    let to = Instant::now();
    let mut fences = 0.0;
    for o in &fleet.ops {
        fences += fleet
            .counter(&o.identity, "webchecker_self_fences_total", &[])
            .await;
    }
    let moves = fleet.sum("webchecker_moves_total").await - moves_before;
    let after = fleet.wait_all_assigned(Duration::from_secs(10)).await;
    let hits = fleet.witness.hits_between(from, to);
    let interval = Duration::from_secs(INTERVAL.into());
    let (gap, who) = largest_gap(&hits, &fleet.names, from + interval, to);
    println!(
        "busy API server ({pct:.0}% 429), {:.0} s with nothing to do: {fences} self-fences, {moves} moves, largest probe gap {gap:?} ({who})",
        steady().as_secs_f64()
    );
    assert_eq!(fences, 0.0, "a replica fenced itself on a busy API server");
    assert_eq!(moves, 0.0, "checkers moved on a busy API server");
    assert_eq!(before, &after, "owners changed on a busy API server");
    assert!(gap <= interval + interval / 2, "{who}: {gap:?}");
}

/// SIGSTOP of the leader or of another replica: its checkers must be probed
/// by others within `bound`; resumed, it fences itself and rejoins.
async fn silent_replica_replaced(fleet: &Fleet, leader: bool, pct: f64, bound: Duration) {
    let victim = fleet.victim(leader).await;
    let fences = fleet
        .counter(&victim.identity, "webchecker_self_fences_total", &[])
        .await;
    let stopped_at = Instant::now();
    pause(&fleet.ops[victim.index]);
    let what = if leader { "the leader" } else { "a non-leader" };
    let moved_in = eventually(
        bound,
        &format!("every checker of the silent {what} probed by another replica"),
        || async {
            let hits = fleet.witness.hits_between(stopped_at, Instant::now());
            victim
                .checkers
                .iter()
                .all(|c| {
                    hits.iter()
                        .any(|h| &h.checker == c && h.replica != victim.identity)
                })
                .then_some(stopped_at.elapsed())
        },
    )
    .await;
    // Leadership can lapse for a moment at a share of 429s: the new leader
    // is the one seen first while the old one is silent.
    let new_leader = eventually(
        bound,
        "a leader while the silent one is stopped",
        || async { fleet.leader().await.filter(|l| *l != victim.identity) },
    )
    .await;
    println!(
        "busy API server ({pct:.0}% 429): SIGSTOP of {what} {}: its {} checkers probed elsewhere {moved_in:?} after (bound {bound:?}); leader {new_leader}",
        victim.identity,
        victim.checkers.len()
    );
    resume(&fleet.ops[victim.index]);
    // Resumed, it holds its probes until a renewal answers: 404, fenced.
    eventually(8 * LEASE, "the resumed replica fenced itself", || async {
        let now = fleet
            .counter_if_answered(&victim.identity, "webchecker_self_fences_total", &[])
            .await?;
        (now > fences).then_some(())
    })
    .await;
    // Back in the ring with a share of its own before the next round.
    eventually(
        Duration::from_secs(60),
        "the resumed replica holds checkers again",
        || async {
            let owners = fleet.wait_all_assigned(Duration::from_secs(60)).await;
            owners.values().any(|o| *o == victim.identity).then_some(())
        },
    )
    .await;
}
