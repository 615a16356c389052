//! One namespace cannot drown another's Events (docs/security.md, "Drown
//! other namespaces' Events"): a real API server, one operator replica
//! watching every namespace (one publisher carries every Event), and two
//! targets of the test's own.
//!
//! Namespace A holds 500 checkers at 1 s whose target answers each checker
//! 200 and 500 in turn, so every probe is a Ready transition and every
//! transition an Event: about 500 Events a second, more than one publisher
//! writes. Namespace B holds 20 quiet checkers that turn Ready=True once and
//! Ready=False once. With one queue for all namespaces, B's Events found it
//! full of A's and were dropped; with a share per namespace A loses its own.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::events::v1::Event;
use kube::Api;
use serde_json::json;

use super::support::targets::{Answer, RecordingTarget};
use super::support::*;

const FLOOD: usize = 500;
const QUIET: usize = 20;
/// How long a queued Event may take to reach the API server: the old queue
/// (1,024 Events at a few hundred writes a second) drains in seconds.
const PUBLISH_WITHIN: Duration = Duration::from_secs(20);

async fn dropped(op: &Operator) -> f64 {
    let m = eventually(Duration::from_secs(10), "metrics", || op.metrics()).await;
    metric(&m, "webchecker_events_dropped_total", &[]).unwrap_or(0.0)
}

/// How many of `names` the replica holds at this Ready value
/// (`webchecker_up`, set by the engine as it emits the transition's Event;
/// the status write may come much later: A's writes crowd B's, see below).
async fn up_is(op: &Operator, ns: &str, names: &[String], up: f64) -> usize {
    let m = op.metrics().await.unwrap_or_default();
    names
        .iter()
        .filter(|n| metric(&m, "webchecker_up", &[("namespace", ns), ("name", n)]) == Some(up))
        .count()
}

/// The checkers of `names` without an Event of this reason in `ns`
/// (events.k8s.io/v1, what kube's Recorder writes); `None` when the list
/// failed.
async fn without_event(
    client: &kube::Client,
    ns: &str,
    names: &[String],
    reason: &str,
) -> Option<Vec<String>> {
    let events: Api<Event> = Api::namespaced(client.clone(), ns);
    let list = events.list(&Default::default()).await.ok()?;
    Some(
        names
            .iter()
            .filter(|n| {
                !list.items.iter().any(|e| {
                    e.reason.as_deref() == Some(reason)
                        && e.regarding.as_ref().and_then(|r| r.name.as_ref()) == Some(*n)
                })
            })
            .cloned()
            .collect(),
    )
}

/// Waits up to PUBLISH_WITHIN for every checker's Event of `reason`: the
/// ones still missing then, and how long the wait took.
async fn missing_after_wait(
    client: &kube::Client,
    ns: &str,
    names: &[String],
    reason: &str,
) -> (Vec<String>, Duration) {
    let from = Instant::now();
    let all = eventually(
        2 * PUBLISH_WITHIN,
        "never: bounded by the timeout",
        || async {
            without_event(client, ns, names, reason)
                .await
                .is_some_and(|m| m.is_empty())
                .then_some(())
        },
    );
    if tokio::time::timeout(PUBLISH_WITHIN, all).await.is_ok() {
        return (Vec::new(), from.elapsed());
    }
    let missing = eventually(Duration::from_secs(30), "a list of B's Events", || {
        without_event(client, ns, names, reason)
    })
    .await;
    (missing, from.elapsed())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_namespace_flipping_on_every_probe_drops_none_of_another_namespaces_events() {
    let started = Instant::now();
    // A control plane of its own: its replica watches every namespace, and
    // two rings watching the same namespaces would fight over the checkers.
    let c: &'static Cluster = Box::leak(Box::new(Cluster::start("isolation-events")));
    let client = c.client().await;
    let leases = c.namespace("ev-leases");
    // Default Lease timings: the flood loads the API server on purpose.
    let op = Operator::spawn_all_namespaces(c, &format!("ev-{leases}"), &leases);
    op.wait_ready(Duration::from_secs(60)).await;

    let answered: Arc<Mutex<HashMap<String, u64>>> = Arc::default();
    let flipping = RecordingTarget::http(move |r| {
        let mut a = answered.lock().unwrap();
        let n = a.entry(r.uri.clone()).or_default();
        *n += 1;
        Answer::status(if *n % 2 == 1 { 200 } else { 500 })
    })
    .await;
    let quiet_down = Arc::new(AtomicBool::new(false));
    let quiet = RecordingTarget::http({
        let down = quiet_down.clone();
        move |_| {
            Answer::status(if down.load(Ordering::SeqCst) {
                500
            } else {
                200
            })
        }
    })
    .await;

    let a_ns = c.namespace("ev-a");
    let objs = (0..FLOOD)
        .map(|i| {
            checker_object(
                &format!("flip{i}"),
                &flipping.url(),
                1,
                json!({"timeoutSeconds": 0.5}),
            )
        })
        .collect();
    create_all(&client, &a_ns, objs, 32).await;
    // The flood is on once it overflows the queue.
    eventually(
        Duration::from_secs(90),
        "A's transitions overflow the Event queue",
        || async { (dropped(&op).await > 0.0).then_some(()) },
    )
    .await;
    let dropped_before = dropped(&op).await;

    let b_ns = c.namespace("ev-b");
    let names: Vec<String> = (0..QUIET).map(|i| format!("q{i}")).collect();
    let objs = names
        .iter()
        .map(|n| checker_object(n, &quiet.url(), 2, json!({"timeoutSeconds": 1})))
        .collect();
    create_all(&client, &b_ns, objs, 8).await;
    eventually(Duration::from_secs(60), "B Ready=True", || async {
        (up_is(&op, &b_ns, &names, 1.0).await == QUIET).then_some(())
    })
    .await;
    quiet_down.store(true, Ordering::SeqCst);
    eventually(Duration::from_secs(60), "B Ready=False", || async {
        (up_is(&op, &b_ns, &names, 0.0).await == QUIET).then_some(())
    })
    .await;
    // Each transition has been handed to the Event queue: what is not
    // published within PUBLISH_WITHIN was dropped.
    let (no_true, _) = missing_after_wait(&client, &b_ns, &names, "ProbeSucceeded").await;
    let (no_false, waited) = missing_after_wait(&client, &b_ns, &names, "UnexpectedStatus").await;
    let dropped_after = dropped(&op).await;
    let probes_a = flipping.requests().len();
    println!(
        "B ({QUIET} checkers, one Ready=True and one Ready=False each): {} of {QUIET} Ready=True Events and {} of {QUIET} \
         Ready=False Events missing (the wait for them ended {waited:?} after the last \
         transition); A ({FLOOD} checkers flipping at 1 s): {probes_a} probes, \
         {dropped_before} Events dropped before B started, {} while B's Events were due; {:?} in all",
        no_true.len(),
        no_false.len(),
        dropped_after - dropped_before,
        started.elapsed()
    );
    // The pressure was real while B's Events were due.
    assert!(
        dropped_after > dropped_before,
        "the flood no longer overflowed the queue while B's Events were due"
    );
    assert!(
        no_true.is_empty() && no_false.is_empty(),
        "B's Events were dropped: Ready=True {no_true:?}, Ready=False {no_false:?}"
    );
}
