//! The discovery task: not vital (a broken discovery must not stop probing,
//! so it is no task the replica exits for). It follows leadership: a
//! [`Session`] runs while [`LeaderGate`] says this replica leads and is
//! dropped (its watches and writes with it) when it no longer does; the
//! writer checks the gate again before every call. A panic restarts it
//! after a pause, logged.

use std::sync::Arc;
use std::time::Duration;

use kube::runtime::events::Reporter;
use tracing::{error, info, warn};

use super::Defaults;
use super::metrics::DiscoveryMetrics;
use super::session::Session;
use super::writer::Writer;
use crate::coordination::shard::LeaderGate;
use crate::kubeio::client::Clients;
use crate::observe::events::Recorder;
use crate::observe::metrics::WatchMetrics;

/// How often leadership is looked at while waiting for it or holding it.
const LEADERSHIP_POLL: Duration = Duration::from_millis(250);
/// Pause before a panicked discovery starts again.
const RESTART_PAUSE: Duration = Duration::from_secs(5);

#[derive(Clone)]
pub struct Discovery {
    pub clients: Clients,
    pub watch_namespace: Option<String>,
    pub leader: Arc<LeaderGate>,
    /// Where discovery registers its families.
    pub registry: prometheus::Registry,
    pub watch_failures: Arc<WatchMetrics>,
    pub identity: String,
    pub defaults: Defaults,
    /// Generated checkers per namespace at most.
    pub max_per_namespace: usize,
}

/// Starts discovery on the current runtime; it runs as long as the process.
pub fn spawn(d: Discovery) {
    let discovery = Arc::new(DiscoveryMetrics::register(&d.registry));
    info!(
        scope = d.watch_namespace.as_deref().unwrap_or("all namespaces"),
        "route discovery on: the leader generates WebCheckers for the Ingresses, HTTPRoutes, GRPCRoutes and Services that opt in"
    );
    tokio::spawn(async move {
        loop {
            let run = tokio::spawn(follow_leadership(d.clone(), discovery.clone()));
            match run.await {
                Ok(()) => return,
                Err(e) if e.is_panic() => {
                    error!(
                        "route discovery panicked; it starts again in {RESTART_PAUSE:?} (probing goes on)"
                    )
                }
                Err(_) => return,
            }
            discovery.stopped();
            tokio::time::sleep(RESTART_PAUSE).await;
        }
    });
}

async fn follow_leadership(d: Discovery, discovery: Arc<DiscoveryMetrics>) {
    let recorder = Recorder::new(
        d.clients.requests.clone(),
        Reporter {
            controller: "webchecker-operator".into(),
            instance: Some(d.identity.clone()),
        },
    );
    let writer = Arc::new(Writer::new(
        d.clients.requests.clone(),
        d.leader.clone(),
        discovery.clone(),
        recorder,
    ));
    loop {
        while !d.leader.valid() {
            tokio::time::sleep(LEADERSHIP_POLL).await;
        }
        info!("leading: route discovery starts");
        let session = Session {
            watches: d.clients.watches.clone(),
            watch_namespace: d.watch_namespace.clone(),
            writer: writer.clone(),
            watch_failures: d.watch_failures.clone(),
            discovery: discovery.clone(),
            defaults: d.defaults.clone(),
            max_per_namespace: d.max_per_namespace,
        };
        tokio::select! {
            _ = session.run() => warn!("route discovery's watches ended; starting them again"),
            _ = lost(&d.leader) => info!("no longer leading: route discovery stops"),
        }
        discovery.stopped();
        tokio::time::sleep(LEADERSHIP_POLL).await;
    }
}

async fn lost(leader: &LeaderGate) {
    while leader.valid() {
        tokio::time::sleep(LEADERSHIP_POLL).await;
    }
}
