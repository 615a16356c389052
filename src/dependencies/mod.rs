//! spec.dependsOn: every replica watches every WebChecker's labels,
//! dependsOn and Ready (whoever owns it), keeps the dependency graph
//! (webchecker_core::dependencies) and hands its engine each namespace's
//! edges whenever they move: a dependency turning Ready=False, recovering,
//! appearing or going.
//!
//! A status write of a dependency reaches its dependents' owners through
//! this watch; nothing else travels between replicas.

mod node;

use std::collections::BTreeSet;
use std::sync::Arc;

use futures::{FutureExt, StreamExt};
use kube::Api;
use kube::core::DynamicObject;
use kube::discovery::ApiResource;
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::mpsc;
use tracing::debug;

use crate::api::WebChecker;
use crate::engine::Command;
use crate::error::Error;
use crate::kubeio::client::Clients;
use crate::observe::metrics::WatchMetrics;
use webchecker_core::dependencies::{Dependencies, Graph};

/// Runs as long as the process (a vital task: stale edges could hold a
/// page back); a closed engine channel ends it.
pub async fn run(
    clients: Clients,
    namespace: Option<String>,
    commands: mpsc::Sender<Command>,
    failures: Arc<WatchMetrics>,
) -> Result<(), Error> {
    let ar = ApiResource::erase::<WebChecker>(&());
    let api: Api<DynamicObject> = match &namespace {
        Some(ns) => Api::namespaced_with(clients.watches.clone(), ns, &ar),
        None => Api::all_with(clients.watches.clone(), &ar),
    };
    let cfg = watcher::Config::default().timeout(crate::kubeio::client::WATCH_TIMEOUT_SECS);
    let mut stream = watcher::watcher(api, cfg)
        .backoff(crate::kubeio::client::WatchBackoff::default())
        .boxed();
    let mut graph = Graph::default();
    let mut edges = Dependencies::default();
    // A (re)list builds its graph apart and replaces the old one at its end.
    let mut listing: Option<Graph> = None;
    while let Some(ev) = stream.next().await {
        let mut dirty = BTreeSet::new();
        let mut next = Some(ev);
        // Everything already delivered, then one set of edges.
        while let Some(ev) = next {
            match ev {
                Ok(watcher::Event::Init) => listing = Some(Graph::default()),
                Ok(watcher::Event::InitApply(o)) => {
                    if let (Some(l), Some((ns, name, n))) = (listing.as_mut(), node::read(&o)) {
                        l.set(&ns, &name, n);
                    }
                }
                Ok(watcher::Event::InitDone) => {
                    if let Some(l) = listing.take() {
                        graph = l;
                        dirty.extend(edges.namespaces());
                        dirty.extend(graph.namespaces().cloned());
                    }
                }
                Ok(watcher::Event::Apply(o)) => {
                    if let Some((ns, name, n)) = node::read(&o) {
                        graph.set(&ns, &name, n);
                        dirty.insert(ns);
                    }
                }
                Ok(watcher::Event::Delete(o)) => {
                    if let Some((ns, name, _)) = node::read(&o) {
                        graph.remove(&ns, &name);
                        dirty.insert(ns);
                    }
                }
                Err(e) => failures.failed("dependencies", &e),
            }
            next = stream.next().now_or_never().flatten();
        }
        let mut changed = false;
        for ns in &dirty {
            // A namespace without dependents has no edges to compute.
            let now = if graph.has_dependents(ns) {
                graph.edges(ns)
            } else {
                Default::default()
            };
            changed |= edges.set(ns, now);
        }
        if changed {
            let (all, blocked) = edges.counts();
            debug!(dependents = all, blocked, "dependencies changed");
            let sent = commands.send(Command::Dependencies(Arc::new(edges.clone())));
            if sent.await.is_err() {
                return Err(Error::TaskDied("engine"));
            }
        }
    }
    Err(Error::TaskDied("dependency watch"))
}
