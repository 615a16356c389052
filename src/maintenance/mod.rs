//! Maintenance windows (`WebCheckerMaintenance`): every replica watches
//! them and hands its engine the calendar (webchecker_core::maintenance),
//! which each checker's next probe consults; the leader writes each
//! window's status (open or not, the checkers it covers, its next opening).

mod status;
mod watch;

use std::sync::Arc;

use tokio::sync::mpsc;

use crate::coordination::shard::LeaderGate;
use crate::engine::Command;
use crate::error::Error;
use crate::kubeio::client::Clients;
use crate::observe::metrics::WatchMetrics;

/// What the windows' tasks need.
pub struct Maintenance {
    pub clients: Clients,
    pub watch_namespace: Option<String>,
    /// The engine's commands: the calendar goes there.
    pub commands: mpsc::Sender<Command>,
    /// Whether this replica leads (it writes the windows' status then).
    pub leader: Arc<LeaderGate>,
    pub watch_failures: Arc<WatchMetrics>,
}

/// Starts the watch (vital: without it windows would silently stop
/// counting) and the leader's status writer (not vital: a window's status
/// is for people, the calendar does not need it).
pub fn spawn(m: Maintenance) -> tokio::task::JoinHandle<Result<(), Error>> {
    let (snapshots, seen) = tokio::sync::watch::channel(Arc::new(watch::Snapshot::default()));
    tokio::spawn(status::run(
        m.clients.requests.clone(),
        m.leader.clone(),
        seen,
    ));
    tokio::spawn(watch::run(
        m.clients.watches.clone(),
        m.watch_namespace,
        m.commands,
        snapshots,
        m.watch_failures,
    ))
}
