//! Worker fairness over time (docs/security.md, "Starve another namespace's
//! probes"): a namespace whose targets accept and never answer, with long
//! timeouts, holds at most its guaranteed share of the pool, so another
//! namespace's probes keep their intervals.

use std::time::{Duration, Instant};

use crate::support::witness::Mode;
use crate::support::*;

/// B's interval; its target answers after 1 s, its timeout is 3 s.
const INTERVAL: u64 = 5;
const WORKERS: usize = 64;

async fn inflight(op: &Operator) -> f64 {
    let m = eventually(Duration::from_secs(10), "metrics", || op.metrics()).await;
    metric(&m, "webchecker_inflight_probes", &[]).unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hanging_targets_with_long_timeouts_hold_no_more_than_their_share_of_workers() {
    let c = Cluster::shared("isolation");
    let client = c.client().await;
    let leases = c.namespace("iso-workers-leases");
    let op = Operator::spawn_all_namespaces_with(
        c,
        &format!("iso-workers-{leases}"),
        &leases,
        &["--workers=64"],
    );
    op.wait_ready(Duration::from_secs(60)).await;
    let witness = Witness::start().await;
    witness.set_default_mode(Mode::Hang(Duration::from_secs(1)));

    // B: 40 checkers every 5 s whose target answers after 1 s.
    let b_ns = c.namespace("iso-steady");
    let a_ns = c.namespace("iso-hanging");
    let _cleanup = crate::DeleteCheckers(c, vec![a_ns.clone(), b_ns.clone()]);
    let steady: Vec<String> = (0..40).map(|i| format!("steady{i}")).collect();
    let objs = steady
        .iter()
        .map(|n| {
            checker_object(
                n,
                &witness.url(),
                INTERVAL,
                serde_json::json!({"timeoutSeconds": 3}),
            )
        })
        .collect();
    create_all(&client, &b_ns, objs, 8).await;
    eventually(
        Duration::from_secs(60),
        "every steady checker probed twice",
        || async {
            let hits = witness.hits();
            steady
                .iter()
                .all(|n| hits.iter().filter(|h| &h.checker == n).count() >= 2)
                .then_some(())
        },
    )
    .await;

    // A: 200 checkers whose target accepts and never answers, 590 s timeout.
    let hanging: Vec<String> = (0..200).map(|i| format!("hanging{i}")).collect();
    for n in &hanging {
        witness.set_mode(n, Mode::Hang(Duration::from_secs(3600)));
    }
    let objs = hanging
        .iter()
        .map(|n| {
            checker_object(
                n,
                &witness.url(),
                600,
                serde_json::json!({"timeoutSeconds": 590}),
            )
        })
        .collect();
    create_all(&client, &a_ns, objs, 16).await;
    // A's probes now hold workers (the load is real): its guaranteed share
    // is half the pool (two namespaces have checkers).
    let share = WORKERS / 2;
    eventually(
        Duration::from_secs(30),
        "A's probes hold their share",
        || async { (witness.open_exchanges(&hanging) >= share).then_some(()) },
    )
    .await;

    let from = Instant::now();
    let (mut most, mut most_a) = (0.0f64, 0);
    while from.elapsed() < Duration::from_secs(4 * INTERVAL) {
        most = most.max(inflight(&op).await);
        most_a = most_a.max(witness.open_exchanges(&hanging));
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (gap, slowest) = largest_gap(&witness.hits(), &steady, from, Instant::now());
    println!(
        "B (40 checkers, 1 s answers, every {INTERVAL} s) beside A (200 hanging, 590 s timeouts) on {WORKERS} workers: \
         largest gap {gap:?} ({slowest}); A's probes in flight at most {most_a}, all probes {most}"
    );
    // A never held more than its share; B's 40 probes, which come due
    // together, run 32 at a time at worst (the last 8 start 1 s late).
    assert!(
        most_a <= share,
        "A held {most_a} of {WORKERS} workers with probes that never end"
    );
    assert!(
        gap <= Duration::from_secs(INTERVAL + 2),
        "a checker of B waited {gap:?} between two probes ({slowest}): it missed an interval"
    );
}
