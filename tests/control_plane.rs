//! Control-plane faults on a fixed schedule: etcd
//! frozen, the API server frozen, every connection to the API server reset.
//! Each replica reaches the API server through a proxy of its own. The
//! witness log and the objects decide: no checker moves because of the
//! fault, nobody fences itself, probing never pauses longer than an interval
//! and a little, and afterwards the system is alive: new checkers get owners
//! at once and a killed replica's checkers still fail over within the bound.

mod support;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use support::fleet::*;
use support::*;

const CHECKERS: usize = 300;

/// A fleet of 3 replicas, each behind its own proxy.
async fn fleet_behind_proxies(prefix: &str) -> (Fleet, Vec<TcpProxy>) {
    let cluster = Cluster::shared("cpfault");
    let ns = cluster.namespace(prefix);
    let mut proxies = Vec::new();
    let mut ops = Vec::new();
    for i in 0..3 {
        let p = TcpProxy::start(&cluster.kubeconfig).await;
        ops.push(Operator::spawn_with_kubeconfig(
            cluster,
            &format!("{prefix}-r{i}"),
            &ns,
            FAST_LEASES,
            &p.kubeconfig,
        ));
        proxies.push(p);
    }
    (Fleet::start_with(cluster, ns, ops, CHECKERS).await, proxies)
}

/// Counters that must not move because of a control-plane fault.
async fn churn(fleet: &Fleet) -> HashMap<&'static str, f64> {
    let mut c = HashMap::new();
    for o in &fleet.ops {
        for (key, name, labels) in [
            ("moves_dead", "webchecker_moves_total", [("cause", "dead")]),
            (
                "moves_departed",
                "webchecker_moves_total",
                [("cause", "departed")],
            ),
            (
                "fences_lost",
                "webchecker_self_fences_total",
                [("reason", "lost")],
            ),
            (
                "fences_paused",
                "webchecker_self_fences_total",
                [("reason", "paused")],
            ),
        ] {
            *c.entry(key).or_default() += fleet.counter(&o.identity, name, &labels).await;
        }
    }
    c
}

fn pid_file(cluster: &Cluster, which: &str) -> i32 {
    std::fs::read_to_string(cluster.dir.join(format!("{which}.pid")))
        .unwrap_or_else(|e| panic!("{which}.pid: {e}"))
        .trim()
        .parse()
        .unwrap()
}

fn signal(pid: i32, sig: i32) {
    assert_eq!(unsafe { libc::kill(pid, sig) }, 0, "kill({pid}, {sig})");
}

/// Runs `fault` (which returns when the fault is over), then checks safety
/// and liveness from the outside.
async fn survives<F, Fut>(prefix: &str, what: &str, fault: F)
where
    F: FnOnce(&'static Cluster, Vec<TcpProxy>) -> Fut,
    Fut: std::future::Future<Output = Vec<TcpProxy>>,
{
    let (mut fleet, proxies) = fleet_behind_proxies(prefix).await;
    let before = fleet.wait_all_assigned(Duration::from_secs(10)).await;
    let churn_before = churn(&fleet).await;
    let from = Instant::now();
    let proxies = fault(fleet.cluster, proxies).await;
    let healed = Instant::now();
    println!("{what}: fault lasted {:?}", healed - from);

    // Liveness 1: new checkers get owners promptly once the fault is over.
    let fresh: Vec<String> = (0..20).map(|i| format!("new{i}")).collect();
    let created = create_checkers(
        &fleet.client,
        &fleet.ns,
        &fleet.witness.url(),
        &fresh,
        INTERVAL,
    )
    .await;
    let assigned = eventually(Duration::from_secs(60), "new checkers assigned", || async {
        let owners = fleet.owners().await;
        fresh
            .iter()
            .all(|n| owners.get(n).is_some_and(|o| o.is_some()))
            .then(Instant::now)
    })
    .await;
    let last_created = created.values().max().copied().unwrap();
    let assign_time = assigned.saturating_duration_since(last_created);
    println!(
        "{what}: new checkers assigned {assign_time:?} after creation ({:?} after the fault ended)",
        assigned - healed
    );
    fleet.names.extend(fresh);

    // Safety: no move, no fence, probing never paused.
    let settle = from + (healed - from) + LEASE * 2;
    tokio::time::sleep(settle.saturating_duration_since(Instant::now())).await;
    let after = fleet.owners().await;
    let moved: Vec<&String> = before
        .iter()
        .filter(|(k, v)| after.get(*k) != Some(&Some((*v).clone())))
        .map(|(k, _)| k)
        .collect();
    assert!(
        moved.is_empty(),
        "{what}: {} checkers moved: {:?}",
        moved.len(),
        &moved[..moved.len().min(10)]
    );
    assert_eq!(
        churn(&fleet).await,
        churn_before,
        "{what}: moves or self-fences"
    );
    let hits = fleet.witness.hits();
    let old: Vec<String> = before.keys().cloned().collect();
    let (gap, who) = largest_gap(&hits, &old, from, healed);
    let bound = Duration::from_secs(INTERVAL as u64 + 2);
    println!("{what}: largest probe gap during the fault {gap:?} ({who}), bound {bound:?}");
    assert!(gap <= bound, "{what}: {who} unprobed for {gap:?}");
    assert_eq!(exclusivity_violation(&hits), None, "{what}");
    assert_eq!(reappearance(&hits), None, "{what}");
    // The assignment bound: a few retry periods, with room for a loaded machine.
    assert!(
        assign_time <= LEASE + 2 * RETRY,
        "{what}: new checkers assigned only after {assign_time:?}"
    );

    // Liveness 2: a replica killed afterwards still fails over within the bound.
    let victim = fleet.victim(false).await;
    let kill_bound = LEASE + Duration::from_secs(2) + Duration::from_secs(INTERVAL as u64);
    let (gap, who) = fleet
        .kill_and_wait_failover(&victim, kill_bound + Duration::from_secs(10))
        .await;
    println!("{what}: SIGKILL afterwards: largest gap {gap:?} ({who}), bound {kill_bound:?}");
    assert!(
        gap <= kill_bound,
        "{what}: after SIGKILL {who} unprobed for {gap:?}"
    );
    assert_eq!(exclusivity_violation(&fleet.witness.hits()), None, "{what}");
    drop(proxies);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_frozen_25s_moves_nothing() {
    survives("etcd", "etcd frozen 25 s", |cluster, proxies| async move {
        let etcd = pid_file(cluster, "etcd");
        signal(etcd, libc::SIGSTOP);
        tokio::time::sleep(Duration::from_secs(25)).await;
        signal(etcd, libc::SIGCONT);
        proxies
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_server_frozen_30s_moves_nothing() {
    survives(
        "apifreeze",
        "API server frozen 30 s",
        |cluster, proxies| async move {
            let api = pid_file(cluster, "apiserver");
            signal(api, libc::SIGSTOP);
            tokio::time::sleep(Duration::from_secs(30)).await;
            signal(api, libc::SIGCONT);
            proxies
        },
    )
    .await;
}

/// Every connection to the API server is reset, once a second for 10 s: the
/// watches fail with connection errors (not 410) and resume.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_reset_for_10s_move_nothing() {
    survives(
        "reset",
        "every connection reset for 10 s",
        |_, proxies| async move {
            let end = Instant::now() + Duration::from_secs(10);
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            while Instant::now() < end {
                tick.tick().await;
                for p in &proxies {
                    p.cut();
                    p.restore();
                }
            }
            proxies
        },
    )
    .await;
}
