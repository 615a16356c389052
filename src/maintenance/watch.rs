//! The watch of every WebCheckerMaintenance: the calendar for the engine
//! after each change (a burst of events costs one), and the objects for
//! the leader's status writer.

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::{FutureExt, StreamExt};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use tokio::sync::mpsc;
use tracing::{info, warn};

use crate::api::WebCheckerMaintenance;
use crate::engine::Command;
use crate::error::Error;
use crate::observe::metrics::WatchMetrics;
use webchecker_core::maintenance::{Calendar, Invalid, Window};

/// The windows as the watch last saw them, by (namespace, name).
#[derive(Debug, Default)]
pub struct Snapshot {
    pub windows: BTreeMap<(String, String), Seen>,
    pub calendar: Calendar,
}

/// One window: its object, and why it cannot be used if so.
#[derive(Clone, Debug)]
pub struct Seen {
    pub object: WebCheckerMaintenance,
    pub window: Result<Window, Invalid>,
}

/// Runs as long as the process; a closed engine channel ends it.
pub async fn run(
    client: Client,
    namespace: Option<String>,
    commands: mpsc::Sender<Command>,
    snapshots: tokio::sync::watch::Sender<Arc<Snapshot>>,
    failures: Arc<WatchMetrics>,
) -> Result<(), Error> {
    let api: Api<WebCheckerMaintenance> = match &namespace {
        Some(ns) => Api::namespaced(client, ns),
        None => Api::all(client),
    };
    let cfg = watcher::Config::default().timeout(crate::kubeio::client::WATCH_TIMEOUT_SECS);
    let mut stream = watcher::watcher(api, cfg)
        .backoff(crate::kubeio::client::WatchBackoff::default())
        .boxed();
    let mut windows: BTreeMap<(String, String), Seen> = BTreeMap::new();
    // A (re)list builds its set apart and replaces the old one at its end.
    let mut listing: Option<BTreeMap<(String, String), Seen>> = None;
    let mut said_missing = false;
    while let Some(ev) = stream.next().await {
        // The calendar changes with a spec; the snapshot with a status too.
        let (mut changed, mut seen) = (false, false);
        let mut next = Some(ev);
        // Everything already delivered, then one calendar.
        while let Some(ev) = next {
            match ev {
                Ok(watcher::Event::Init) => listing = Some(BTreeMap::new()),
                Ok(watcher::Event::InitApply(o)) => {
                    if let Some(l) = listing.as_mut() {
                        insert(l, o);
                    }
                }
                Ok(watcher::Event::InitDone) => {
                    if let Some(l) = listing.take() {
                        windows = l;
                        changed = true;
                    }
                }
                Ok(watcher::Event::Apply(o)) => {
                    let old = windows.get(&key(&o)).map(|s| &s.object.spec);
                    changed |= old != Some(&o.spec);
                    seen = true;
                    insert(&mut windows, o);
                }
                Ok(watcher::Event::Delete(o)) => {
                    windows.remove(&key(&o));
                    changed = true;
                }
                Err(e) => {
                    failures.failed("maintenance", &e);
                    if !said_missing && crate::error::watch_not_found(&e) {
                        said_missing = true;
                        warn!(
                            "the WebCheckerMaintenance CRD is not installed: no maintenance windows (apply the chart's crds/ to have them)"
                        );
                    }
                }
            }
            next = stream.next().now_or_never().flatten();
        }
        if !(changed || seen) {
            continue;
        }
        let mut calendar = Calendar::default();
        for ((ns, _), w) in &windows {
            if let Ok(w) = &w.window {
                calendar.set(ns, w.clone());
            }
        }
        if changed {
            info!(windows = windows.len(), "maintenance windows changed");
            let sent = commands.send(Command::Calendar(Arc::new(calendar.clone())));
            if sent.await.is_err() {
                return Err(Error::TaskDied("engine"));
            }
        }
        let windows = windows.clone();
        let _ = snapshots.send(Arc::new(Snapshot { windows, calendar }));
    }
    Err(Error::TaskDied("maintenance watch"))
}

fn key(o: &WebCheckerMaintenance) -> (String, String) {
    (o.namespace().unwrap_or_default(), o.name_any())
}

fn insert(into: &mut BTreeMap<(String, String), Seen>, o: WebCheckerMaintenance) {
    let window = Window::from_spec(&o.name_any(), &o.spec);
    into.insert(key(&o), Seen { object: o, window });
}
