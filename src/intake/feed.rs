//! The checker feed: a watch of this replica's own shard (label selector on
//! the owner label), classified into intake steps (found.rs), with compiled
//! patterns attached (compiler.rs). The steps go to the engine through the
//! resolver task (resolver.rs), which attaches the referenced Secret/ConfigMap
//! values: the feed itself never waits for a read.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use futures::StreamExt;
use kube::core::DynamicObject;
use kube::discovery::ApiResource;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client};
use tokio::sync::mpsc;
use tracing::warn;

use crate::api::{WebChecker, object_key};
use crate::assignment::{self, Assignment};
use crate::checker::Change;
use crate::coordination::membership::Membership;
use crate::engine::Command;
use crate::error::Error;
use crate::intake::found::{Found, Step, malformed};
use crate::intake::resolver::ValueResolver;
use crate::observe::metrics::{CheckerInfo, LabelAllowlist, WatchMetrics};
use crate::observe::server::HealthFlags;

/// What the feed reports to: its watch's failures, and the labels of a
/// checker that its info series copies (`--metric-labels-allowlist`).
pub struct FeedMetrics {
    pub watches: Arc<WatchMetrics>,
    pub labels: LabelAllowlist,
}

impl FeedMetrics {
    fn info(&self, wc: &WebChecker) -> Arc<CheckerInfo> {
        Arc::new(CheckerInfo::new(
            &wc.spec.host,
            &wc.spec.path,
            wc.metadata.labels.as_ref(),
            &self.labels,
        ))
    }
}

fn classify(
    obj: DynamicObject,
    membership: &Membership,
    metrics: &FeedMetrics,
    initial: bool,
    seen: std::time::Instant,
) -> (String, Option<Step<()>>) {
    let namespace = obj.metadata.namespace.clone().unwrap_or_default();
    let name = obj.metadata.name.clone().unwrap_or_default();
    let key = object_key(&namespace, &name);
    let assignment = Assignment::of(&obj.metadata);
    if !assignment.held_by(&membership.identity, membership.epoch().as_deref()) {
        // Assigned to an earlier incarnation of this replica: not ours to probe.
        return (
            key.clone(),
            Some(Step::Command(Command::Change(Change::Remove { key }))),
        );
    }
    let resource_version = obj.metadata.resource_version.clone().unwrap_or_default();
    if assignment.draining() {
        return (
            key.clone(),
            Some(Step::Command(Command::Change(Change::Drain {
                key,
                namespace,
                name,
                resource_version,
                uid: obj.metadata.uid.clone().unwrap_or_default(),
                epoch: assignment.epoch.clone(),
                handover: assignment.handover(),
            }))),
        );
    }
    let epoch = assignment.epoch;
    let generation = obj.metadata.generation;
    let value = serde_json::to_value(&obj).unwrap_or_default();
    let step = match serde_json::from_value::<WebChecker>(value) {
        // The compiler attaches the compiled patterns, the resolver the
        // referenced Secret/ConfigMap values.
        Ok(wc) => {
            let info = metrics.info(&wc);
            let found = Found {
                wc: Box::new(wc),
                info,
                initial,
                seen,
            };
            Step::Found(Box::new(found), ())
        }
        Err(e) => {
            let mut cmd = malformed(
                namespace,
                name,
                resource_version,
                generation,
                e.to_string().chars().take(200).collect(),
                initial,
                seen,
            );
            if let Command::Change(Change::Upsert { checker, .. }) = &mut cmd {
                checker.epoch = epoch;
            }
            Step::Command(cmd)
        }
    };
    (key, Some(step))
}

/// What one event of the shard's watch asks of the intake; `present`
/// collects the keys of a (re)list for its closing Resync.
fn step_of(
    ev: Result<Event<DynamicObject>, watcher::Error>,
    present: &mut HashSet<String>,
    membership: &Membership,
    metrics: &FeedMetrics,
    health: &HealthFlags,
) -> Option<Step<()>> {
    match ev {
        Ok(Event::Init) => {
            present.clear();
            None
        }
        Ok(Event::InitApply(o)) => {
            let (key, step) = classify(o, membership, metrics, true, std::time::Instant::now());
            if matches!(
                step,
                Some(
                    Step::Found(..)
                        | Step::Command(
                            Command::Change(Change::Upsert { .. })
                                | Command::Change(Change::Drain { .. })
                        )
                )
            ) {
                present.insert(key);
            }
            step
        }
        Ok(Event::InitDone) => {
            health.synced.store(true, Ordering::Relaxed);
            Some(Step::Command(Command::Change(Change::Resync {
                present: std::mem::take(present),
            })))
        }
        Ok(Event::Apply(o)) => classify(o, membership, metrics, false, std::time::Instant::now()).1,
        Ok(Event::Delete(o)) => Some(Step::Command(Command::Change(Change::Remove {
            key: object_key(
                o.metadata.namespace.as_deref().unwrap_or_default(),
                o.metadata.name.as_deref().unwrap_or_default(),
            ),
        }))),
        Err(e) => {
            metrics.watches.failed("checkers", &e);
            warn!(error = %e, "checker watch failed; retrying (probing goes on)");
            None
        }
    }
}

/// Feeds the engine from a watch of this replica's own shard (label selector).
pub async fn watch_own_shard(
    client: Client,
    watch_namespace: Option<String>,
    membership: Arc<Membership>,
    commands: mpsc::Sender<Command>,
    health: Arc<HealthFlags>,
    metrics: FeedMetrics,
    budgets: webchecker_core::namespace_budget::Limits,
) -> Result<(), Error> {
    let ar = ApiResource::erase::<WebChecker>(&());
    let api: Api<DynamicObject> = match &watch_namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &ar),
        None => Api::all_with(client.clone(), &ar),
    };
    let cfg = watcher::Config::default()
        .timeout(crate::kubeio::client::WATCH_TIMEOUT_SECS)
        .labels(&assignment::owned_by(&membership.identity));
    let open = || {
        watcher::watcher(api.clone(), cfg.clone())
            .backoff(crate::kubeio::client::WatchBackoff::default())
            .boxed()
    };
    let mut stream = open();
    let mut reconnects = membership.reconnects();
    let mut present = HashSet::new();
    let mut patterns = crate::intake::compiler::PatternCache::new(budgets.pattern_bytes);
    let (to_resolver, from_feed) = mpsc::channel(crate::intake::resolver::INPUT);
    let resolver = {
        let membership = membership.clone();
        ValueResolver::new(
            crate::intake::secrets::reader(client),
            crate::intake::secrets::TTL,
            Box::new(move |wc: &WebChecker| {
                Assignment::of(&wc.metadata)
                    .held_by(&membership.identity, membership.epoch().as_deref())
            }),
            budgets.value_bytes,
        )
    };
    // Ends when the feed ends (its input closes), so it never outlives it.
    let mut resolver_task = tokio::spawn(resolver.run(from_feed, commands));
    loop {
        let ev = tokio::select! {
            ev = stream.next() => match ev {
                Some(ev) => ev,
                None => break,
            },
            Ok(()) = reconnects.changed() => {
                // List afresh on a new watch (the re-list ends in a Resync,
                // so nothing of the old watch is lost).
                stream = open();
                continue;
            }
            _ = &mut resolver_task => return Err(Error::TaskDied("secret resolver")),
        };
        let step = step_of(ev, &mut present, &membership, &metrics, &health);
        let Some(c) = step else { continue };
        let mut sent = true;
        for c in patterns.attach(c).await {
            sent = sent && to_resolver.send(c).await.is_ok();
        }
        if !sent {
            break;
        }
    }
    resolver_task.abort();
    Err(Error::TaskDied("checker watch"))
}
