//! The leader writes each window's status: whether it is open, how many
//! WebCheckers of its namespace it selects, when it opens next, and why it
//! cannot be used if so. Counting lists the namespace's WebCheckers by the
//! window's selector (metadata only, from the API server's cache), at most
//! once a minute per window unless its spec changed, or every 10 seconds
//! while it covers none (a window made with its checkers counts them
//! soon); a write only when something changed.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::api::{ListParams, Patch, PatchParams};
use kube::core::Selector;
use kube::{Api, Client};
use tracing::{debug, warn};

use super::watch::{Seen, Snapshot};
use crate::api::{MaintenanceStatus, WebChecker, WebCheckerMaintenance};
use crate::coordination::shard::LeaderGate;
use webchecker_core::maintenance::{Calendar, MAX_PER_NAMESPACE};

/// How often the windows are looked at (openings and closings show within it).
const TICK: Duration = Duration::from_secs(5);
/// A window's checkers are counted again after this long, or the shorter
/// while it covers none.
const RECOUNT: Duration = Duration::from_secs(60);
const RECOUNT_NONE: Duration = Duration::from_secs(10);
/// Every call to the API server gets this long.
const CALL: Duration = Duration::from_secs(10);

/// A count of a window's checkers, and what it was counted for.
struct Count {
    at: Instant,
    generation: Option<i64>,
    checkers: i64,
}

pub async fn run(
    client: Client,
    leader: Arc<LeaderGate>,
    mut seen: tokio::sync::watch::Receiver<Arc<Snapshot>>,
) {
    let mut counts: HashMap<(String, String), Count> = HashMap::new();
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            changed = seen.changed() => if changed.is_err() { return },
        }
        if !leader.valid() {
            counts.clear();
            continue;
        }
        let snapshot = seen.borrow_and_update().clone();
        counts.retain(|k, _| snapshot.windows.contains_key(k));
        let now = chrono::Utc::now().timestamp();
        for ((ns, name), w) in &snapshot.windows {
            if !leader.valid() {
                break;
            }
            let key = (ns.clone(), name.clone());
            let checkers = count(&client, ns, w, counts.get(&key)).await;
            if let Some(c) = checkers {
                counts.insert(key, c);
            }
            let checkers = counts.get(&(ns.clone(), name.clone()));
            let want = desired(&snapshot.calendar, ns, name, w, checkers, now);
            if w.object.status.as_ref() != Some(&want) {
                write(&client, ns, name, &want).await;
            }
        }
    }
}

/// The status a window should have at `now`.
fn desired(
    calendar: &Calendar,
    ns: &str,
    name: &str,
    w: &Seen,
    count: Option<&Count>,
    now: i64,
) -> MaintenanceStatus {
    let checkers = count.map_or(0, |c| c.checkers);
    let window = match &w.window {
        Err(invalid) => {
            return MaintenanceStatus {
                checkers,
                problem: Some(invalid.0.clone()),
                ..Default::default()
            };
        }
        Ok(window) => window,
    };
    if calendar.ignored(ns, name) {
        return MaintenanceStatus {
            checkers,
            problem: Some(format!(
                "namespace {ns} has more than {MAX_PER_NAMESPACE} maintenance windows: only the first {MAX_PER_NAMESPACE} by name count, and this one is not among them"
            )),
            ..Default::default()
        };
    }
    MaintenanceStatus {
        active: window.when.open_until(now).is_some(),
        checkers,
        next_start: window.when.next_start(now).map(rfc3339),
        problem: None,
    }
}

fn rfc3339(unix: i64) -> String {
    chrono::DateTime::from_timestamp(unix, 0)
        .unwrap_or_default()
        .format("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

/// The WebCheckers of `ns` the window selects, when a count is due.
async fn count(client: &Client, ns: &str, w: &Seen, last: Option<&Count>) -> Option<Count> {
    let generation = w.object.metadata.generation;
    let fresh = |c: &Count| {
        let every = if c.checkers == 0 {
            RECOUNT_NONE
        } else {
            RECOUNT
        };
        c.generation == generation && c.at.elapsed() < every
    };
    if last.is_some_and(fresh) {
        return None;
    }
    let selector = Selector::try_from(w.object.spec.selector.clone()).ok()?;
    let api: Api<WebChecker> = Api::namespaced(client.clone(), ns);
    // From the watch cache (resourceVersion 0), not from etcd.
    let params = ListParams::default().labels_from(&selector).match_any();
    let list = match tokio::time::timeout(CALL, api.list_metadata(&params)).await {
        Ok(Ok(list)) => list,
        Ok(Err(e)) => {
            debug!(namespace = ns, error = %crate::error::describe(&e), "cannot count a maintenance window's checkers");
            return None;
        }
        Err(_) => return None,
    };
    Some(Count {
        at: Instant::now(),
        generation,
        checkers: list.items.len() as i64,
    })
}

async fn write(client: &Client, ns: &str, name: &str, status: &MaintenanceStatus) {
    let api: Api<WebCheckerMaintenance> = Api::namespaced(client.clone(), ns);
    // Explicit nulls: a merge patch keeps what it does not name.
    let patch = serde_json::json!({ "status": {
        "active": status.active,
        "checkers": status.checkers,
        "nextStart": status.next_start,
        "problem": status.problem,
    }});
    let pp = PatchParams::default();
    match tokio::time::timeout(CALL, api.patch_status(name, &pp, &Patch::Merge(&patch))).await {
        Ok(Ok(_)) => {}
        Ok(Err(e)) => {
            warn!(namespace = ns, window = name, error = %crate::error::describe(&e), "cannot write a maintenance window's status")
        }
        Err(_) => {
            warn!(
                namespace = ns,
                window = name,
                "cannot write a maintenance window's status in time"
            )
        }
    }
}
