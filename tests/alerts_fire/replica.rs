//! The per-replica alerts and WebCheckerNoLeader, each on a replica of its
//! own (fleets.rs):
//!
//! - `leaderless`: SIGSTOP for longer than its Lease, then SIGCONT: it notices
//!   the pause and fences itself (WebCheckerSelfFencing, reason `paused`).
//!   Then its proxy resets every connection: Lease renewals fail
//!   (WebCheckerLeaseRenewFailing) and leadership lapses with nobody to take
//!   it (WebCheckerNoLeader for its job).
//! - `lag`: WebCheckerScheduleLagHigh from the start (one worker, 1.5 s of
//!   probing due each second), and WebCheckerReplicaMemoryHigh (a
//!   `--memory-limit` below its resident memory).
//! - `writes`: WebCheckerStatusWritesFailing from the start (every status
//!   write answered 500 by its proxy; the writer retries with backoff).
//! - `limited`: WebCheckerAddressDiscoveryFailing for each source its
//!   ServiceAccount may not read (nodes, service, endpointslices), never for
//!   `namespaces`, which it may.

use std::time::{Duration, Instant};

use crate::fleets::{LAG, LAG_MEMORY_LIMIT, Single, WRITES};
use crate::support::faults::{ProxyMode, pause, resume};
use crate::support::fleet::{LEASE, RETRY};
use crate::support::*;
use crate::watch::{Alerts, labels_of};

/// The status writer's longest backoff between two tries of a write
/// (src/engine/writer.rs, `backoff`).
const WRITER_MAX_BACKOFF: Duration = Duration::from_secs(30);

/// How long `leaderless` stays stopped: more than its Lease.
const PAUSE: Duration = Duration::from_secs(5);

pub async fn leaderless(s: &Single, alerts: &Alerts<'_>, client: &kube::Client) {
    // Joined: its checker is assigned to it (the assignment names its Lease).
    eventually(
        Duration::from_secs(60),
        "leaderless owns its checker",
        || async {
            let o = owners(client, &s.ns).await.ok()?;
            (o.get("n-0")?.as_deref() == Some(s.op.identity.as_str())).then_some(())
        },
    )
    .await;
    pause(&s.op);
    // The length of the fault, not a wait for something.
    tokio::time::sleep(PAUSE).await;
    resume(&s.op);
    let resumed = Instant::now();
    let mut want = s.replica_labels("warning");
    want.insert("reason".into(), "paused".into());
    alerts
        .wait_firing(
            &format!("paused {PAUSE:?}"),
            "WebCheckerSelfFencing",
            want,
            resumed,
            // It notices within a heartbeat; then the next scrape.
            RETRY * 2 + Duration::from_secs(2),
        )
        .await;

    let proxy = s.proxy.as_ref().expect("behind a proxy");
    proxy.set_mode(ProxyMode::Reset);
    let cut = Instant::now();
    tokio::join!(
        alerts.wait_firing(
            "cut off from the API server",
            "WebCheckerNoLeader",
            labels_of(&[("job", &s.job), ("severity", "critical")]),
            cut,
            // Its renew deadline (2 s) passes.
            LEASE,
        ),
        alerts.wait_firing(
            "cut off from the API server",
            "WebCheckerLeaseRenewFailing",
            s.replica_labels("warning"),
            cut,
            // More than 5 failures, an attempt each retry period (500 ms).
            RETRY * 8,
        ),
    );
    println!("leaderless: proxy {}", proxy.stats());
}

pub async fn lag(s: &Single, alerts: &Alerts<'_>) {
    // Late, and above its memory limit, from the start: the waits count
    // from now.
    let t = Instant::now();
    let (late, short) = (
        format!("{} checkers due each second on one worker", LAG.len()),
        format!("--memory-limit={LAG_MEMORY_LIMIT}"),
    );
    tokio::join!(
        alerts.wait_firing(
            &late,
            "WebCheckerScheduleLagHigh",
            s.replica_labels("warning"),
            t,
            Duration::from_secs(10),
        ),
        alerts.wait_firing(
            &short,
            "WebCheckerReplicaMemoryHigh",
            s.replica_labels("warning"),
            t,
            Duration::from_secs(10),
        ),
    );
}

pub async fn writes(s: &Single, alerts: &Alerts<'_>) {
    alerts
        .wait_firing(
            &format!("status writes of {} checkers answered 500", WRITES.len()),
            "WebCheckerStatusWritesFailing",
            s.replica_labels("warning"),
            // Refused from the start: the wait counts from now. The rate
            // needs the error counter to rise between two scrapes, and by now
            // each write is retried only after the writer's longest backoff.
            Instant::now(),
            WRITER_MAX_BACKOFF + Duration::from_secs(2),
        )
        .await;
    let proxy = s.proxy.as_ref().expect("behind a proxy");
    println!("writes: proxy {}", proxy.stats());
}

/// The limited replica's missing permissions: address discovery, tokens.
pub async fn limited(s: &Single, alerts: &Alerts<'_>) {
    let (job, pod) = (s.job.clone(), s.op.identity.clone());
    alerts.never("the limited replica may list namespaces", move |a| {
        a.name == "WebCheckerAddressDiscoveryFailing"
            && a.labels.get("job") == Some(&job)
            && a.labels.get("pod") == Some(&pod)
            && a.labels.get("source").map(String::as_str) == Some("namespaces")
    });
    // Not permitted from the start: the waits count from now.
    let t = Instant::now();
    // Nor may its ServiceAccount request tokens: it cannot ask others to
    // confirm its failures.
    alerts
        .wait_firing(
            "no token to ask with",
            "WebCheckerConfirmCredentialsMissing",
            s.replica_labels("warning"),
            t,
            Duration::from_secs(5),
        )
        .await;
    for source in ["nodes", "service", "endpointslices"] {
        let mut want = s.replica_labels("warning");
        want.insert("source".into(), source.into());
        alerts
            .wait_firing(
                &format!("no permission on {source}"),
                "WebCheckerAddressDiscoveryFailing",
                want,
                t,
                Duration::from_secs(5),
            )
            .await;
    }
}
