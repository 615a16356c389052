//! webchecker-operator: probes HTTP endpoints described by `WebChecker`
//! resources, sharded over several replicas.
//!
//! Module map (see docs/architecture.md):
//! - [`api`]: the CRD types;
//! - [`probe`]: the HTTP prober with phase timings and the forgery guard;
//! - [`scheduler`]: the per-replica engine (timer wheel, worker pool, reducer effects);
//! - [`status`]: the pure status reducer and write policy;
//! - [`writer`]: fenced status writes and drain acknowledgements;
//! - [`membership`]: this replica's Lease and the dispatch/write gates;
//! - [`ring`]: pure assignment logic (rendezvous hashing with bounded loads);
//! - [`shard`]: member view, leader election, the sharder;
//! - [`metrics`], [`server`]: Prometheus metrics and /metrics /healthz /readyz.

pub mod api;
pub mod config;
pub mod error;
pub mod membership;
pub mod metrics;
pub mod probe;
pub mod ring;
pub mod scheduler;
pub mod secrets;
pub mod server;
pub mod shard;
pub mod status;
pub mod writer;

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use kube::api::PostParams;
use kube::core::DynamicObject;
use kube::discovery::ApiResource;
use kube::runtime::WatchStreamExt;
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client};
use tokio::sync::{mpsc, oneshot};
use tracing::{error, info, warn};

use crate::api::{DRAIN_ANNOTATION, EPOCH_ANNOTATION, OWNER_LABEL, WebChecker, object_key};
use crate::config::Config;
use crate::error::Error;
use crate::membership::Membership;
use crate::metrics::Metrics;
use crate::scheduler::{Command, Engine, EngineSettings, Incoming};
use crate::server::Health;
use crate::shard::{LeaderElector, MemberView, Sharder};
use crate::writer::StatusWriter;

/// Checks every permission the operator needs and names all that are missing.
async fn preflight(
    client: &Client,
    lease_namespace: &str,
    watch_namespace: Option<&str>,
) -> Result<(), Error> {
    let checks: &[(&str, &str, &str, Option<&str>, bool)] = &[
        ("test.network.io", "webcheckers", "list", None, false),
        ("test.network.io", "webcheckers", "watch", None, false),
        ("test.network.io", "webcheckers", "get", None, false),
        ("test.network.io", "webcheckers", "patch", None, false),
        (
            "test.network.io",
            "webcheckers",
            "patch",
            Some("status"),
            false,
        ),
        ("events.k8s.io", "events", "create", None, false),
        ("events.k8s.io", "events", "patch", None, false),
        ("coordination.k8s.io", "leases", "get", None, true),
        ("coordination.k8s.io", "leases", "list", None, true),
        ("coordination.k8s.io", "leases", "watch", None, true),
        ("coordination.k8s.io", "leases", "create", None, true),
        ("coordination.k8s.io", "leases", "update", None, true),
        ("coordination.k8s.io", "leases", "delete", None, true),
    ];
    let api: Api<SelfSubjectAccessReview> = Api::all(client.clone());
    let mut missing = Vec::new();
    for (group, resource, verb, sub, in_lease_ns) in checks {
        let namespace = if *in_lease_ns {
            Some(lease_namespace.to_string())
        } else {
            watch_namespace.map(str::to_string)
        };
        let review = SelfSubjectAccessReview {
            spec: SelfSubjectAccessReviewSpec {
                resource_attributes: Some(ResourceAttributes {
                    group: Some(group.to_string()),
                    resource: Some(resource.to_string()),
                    verb: Some(verb.to_string()),
                    subresource: sub.map(str::to_string),
                    namespace: namespace.clone(),
                    ..Default::default()
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        let r = api.create(&PostParams::default(), &review).await?;
        if !r.status.map(|s| s.allowed).unwrap_or(false) {
            let res = match sub {
                Some(s) => format!("{resource}/{s}"),
                None => resource.to_string(),
            };
            let scope = match &namespace {
                Some(ns) => format!("in namespace {ns}"),
                None => "in all namespaces".to_string(),
            };
            missing.push(format!("{verb} {group} {res} {scope}"));
        }
    }
    if missing.is_empty() {
        Ok(())
    } else {
        Err(Error::Forbidden(missing.join("; ")))
    }
}

/// Gives a map's memory back once it holds less than a quarter of its
/// capacity (a shard that shrank: load dropped, checkers moved away); maps
/// otherwise keep their largest capacity for good. Returns whether it shrank.
pub(crate) fn shrink_if_sparse<K: Eq + std::hash::Hash, V>(
    map: &mut std::collections::HashMap<K, V>,
) -> bool {
    let sparse = map.capacity() > 1024 && map.len() < map.capacity() / 4;
    if sparse {
        map.shrink_to_fit();
    }
    sparse
}

fn classify(
    obj: DynamicObject,
    membership: &Membership,
    initial: bool,
) -> (String, Option<Command>) {
    let namespace = obj.metadata.namespace.clone().unwrap_or_default();
    let name = obj.metadata.name.clone().unwrap_or_default();
    let key = object_key(&namespace, &name);
    let ann = obj.metadata.annotations.clone().unwrap_or_default();
    let owner = obj
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(OWNER_LABEL));
    if owner != Some(&membership.identity)
        || ann.get(EPOCH_ANNOTATION).cloned() != membership.epoch()
    {
        // Assigned to an earlier incarnation of this replica: not ours to probe.
        return (key.clone(), Some(Command::Remove { key }));
    }
    let resource_version = obj.metadata.resource_version.clone().unwrap_or_default();
    if ann.contains_key(DRAIN_ANNOTATION) {
        return (
            key.clone(),
            Some(Command::Drain {
                key,
                namespace,
                name,
                resource_version,
            }),
        );
    }
    let generation = obj.metadata.generation;
    let value = serde_json::to_value(&obj).unwrap_or_default();
    let checker = match serde_json::from_value::<WebChecker>(value) {
        // The referenced Secret/ConfigMap values are filled in by the feeder.
        Ok(wc) => Incoming::Valid(Box::new(wc), Default::default()),
        Err(e) => Incoming::Malformed {
            namespace,
            name,
            resource_version,
            generation,
            error: e.to_string().chars().take(200).collect(),
        },
    };
    (key, Some(Command::Upsert { checker, initial }))
}

/// Feeds the engine from a watch of this replica's own shard (label selector).
async fn watch_own_shard(
    client: Client,
    watch_namespace: Option<String>,
    membership: Arc<Membership>,
    commands: mpsc::Sender<Command>,
    health: Arc<Health>,
    metrics: Arc<Metrics>,
) -> Result<(), Error> {
    let ar = ApiResource::erase::<WebChecker>(&());
    let api: Api<DynamicObject> = match &watch_namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &ar),
        None => Api::all_with(client.clone(), &ar),
    };
    let cfg = watcher::Config::default().labels(&format!("{OWNER_LABEL}={}", membership.identity));
    let mut stream = watcher::watcher(api, cfg).default_backoff().boxed();
    let mut present = HashSet::new();
    let mut secrets = crate::secrets::SecretResolver::new(client, crate::secrets::TTL);
    let mut refresh = tokio::time::interval(crate::secrets::REFRESH);
    refresh.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let ev = tokio::select! {
            ev = stream.next() => match ev {
                Some(ev) => ev,
                None => break,
            },
            _ = refresh.tick() => {
                for c in secrets.refresh().await {
                    if commands.send(c).await.is_err() {
                        return Err(Error::TaskDied("checker watch"));
                    }
                }
                continue;
            }
        };
        let cmd = match ev {
            Ok(Event::Init) => {
                present.clear();
                None
            }
            Ok(Event::InitApply(o)) => {
                let (key, cmd) = classify(o, &membership, true);
                if matches!(cmd, Some(Command::Upsert { .. } | Command::Drain { .. })) {
                    present.insert(key);
                }
                cmd
            }
            Ok(Event::InitDone) => {
                health.synced.store(true, Ordering::Relaxed);
                Some(Command::Resync {
                    present: std::mem::take(&mut present),
                })
            }
            Ok(Event::Apply(o)) => classify(o, &membership, false).1,
            Ok(Event::Delete(o)) => Some(Command::Remove {
                key: object_key(
                    o.metadata.namespace.as_deref().unwrap_or_default(),
                    o.metadata.name.as_deref().unwrap_or_default(),
                ),
            }),
            Err(e) => {
                metrics
                    .watch_restarts
                    .with_label_values(&["checkers"])
                    .inc();
                warn!(error = %e, "checker watch failed; retrying (probing goes on)");
                None
            }
        };
        if let Some(c) = cmd
            && commands.send(secrets.attach(c).await).await.is_err()
        {
            break;
        }
    }
    Err(Error::TaskDied("checker watch"))
}

/// Runs one replica until SIGTERM/SIGINT (Ok) or until a vital task dies (Err).
pub async fn run(cfg: Config) -> Result<(), Error> {
    cfg.validate()?;
    let identity = cfg.identity();
    let kube_config = kube::Config::infer()
        .await
        .map_err(|e| Error::KubeConfig(e.to_string()))?;
    let api_url = kube_config.cluster_url.to_string();
    let client = Client::try_from(kube_config).map_err(|e| Error::KubeConfig(e.to_string()))?;
    let metrics = Arc::new(Metrics::new(&identity, cfg.per_checker_histogram));
    let health = Arc::new(Health::default());
    let addr = server::spawn(cfg.listen, metrics.clone(), health.clone())?;
    info!(replica = %identity, listen = %addr, "webchecker-operator {} starting", env!("CARGO_PKG_VERSION"));

    preflight(&client, &cfg.namespace, cfg.watch_namespace.as_deref())
        .await
        .map_err(|e| match e {
            Error::Kube(k) if !matches!(k, kube::Error::Api(_)) => Error::KubeConfig(format!(
                "cannot reach the Kubernetes API server at {api_url}: {k}"
            )),
            other => other,
        })?;

    let membership = Membership::new(
        identity.clone(),
        cfg.namespace.clone(),
        cfg.lease_duration,
        cfg.renew_deadline,
        cfg.retry_period,
        metrics.clone(),
    );
    membership.join(&client).await?;

    let policy = probe::AddressPolicy {
        deny: cfg.deny_cidrs.0.clone(),
        allow: cfg.allow_cidrs.0.clone(),
    };
    let prober = Arc::new(probe::Prober::new(
        cfg.replica_header.then_some(identity.as_str()),
        policy,
        cfg.max_body_bytes,
    ));
    // Few concurrent status writes: they are never urgent, and the API server's
    // capacity is better spent on assignments (new checkers, failover).
    let writer = StatusWriter::new(membership.clone(), metrics.clone(), 4);
    let (cmd_tx, cmd_rx) = mpsc::channel::<Command>(1024);
    let (ev_tx, ev_rx) = mpsc::channel(1024);
    let engine = Engine::new(
        EngineSettings {
            identity: identity.clone(),
            workers: cfg.workers as usize,
            heartbeat: cfg.heartbeat,
        },
        prober,
        metrics.clone(),
        membership.clone(),
        writer.clone(),
        ev_tx,
    );
    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: "webchecker-operator".into(),
            instance: Some(identity.clone()),
        },
    );
    let view = MemberView::new(cfg.lease_duration);
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);

    let mut engine_task = tokio::spawn(engine.run(cmd_rx));
    let mut writer_task = tokio::spawn(writer.clone().run(client.clone()));
    tokio::spawn(scheduler::run_events(recorder, ev_rx));
    let mut view_task = tokio::spawn(view.clone().run(
        client.clone(),
        cfg.namespace.clone(),
        metrics.clone(),
    ));
    let fence_tx = cmd_tx.clone();
    let mut lease_task = tokio::spawn(membership.clone().run(client.clone(), move || {
        let tx = fence_tx.clone();
        async move {
            let (done, wait) = oneshot::channel();
            if tx.send(Command::Fence { done }).await.is_ok() {
                let _ = wait.await;
            }
        }
    }));
    let elector = LeaderElector {
        identity: identity.clone(),
        namespace: cfg.namespace.clone(),
        lease_duration: cfg.lease_duration,
        renew_deadline: cfg.renew_deadline,
        retry_period: cfg.retry_period,
        metrics: metrics.clone(),
    };
    let sharder_client = client.clone();
    let sharder_view = view.clone();
    let sharder_metrics = metrics.clone();
    let watch_ns = cfg.watch_namespace.clone();
    let lease_ns = cfg.namespace.clone();
    let mut leader_task = tokio::spawn(elector.run(client.clone(), stop_rx, move || {
        Sharder {
            client: sharder_client.clone(),
            watch_namespace: watch_ns.clone(),
            lease_namespace: lease_ns.clone(),
            view: sharder_view.clone(),
            metrics: sharder_metrics.clone(),
            write_limit: Arc::new(tokio::sync::Semaphore::new(64)),
        }
        .run()
    }));
    let mut watch_task = tokio::spawn(watch_own_shard(
        client.clone(),
        cfg.watch_namespace.clone(),
        membership.clone(),
        cmd_tx.clone(),
        health.clone(),
        metrics.clone(),
    ));
    health.alive.store(true, Ordering::Relaxed);

    let died = |what: &'static str| {
        error!(
            task = what,
            "a vital task stopped; exiting so the pod restarts"
        );
        Error::TaskDied(what)
    };
    let outcome: Result<(), Error> = tokio::select! {
        _ = shutdown_signal() => Ok(()),
        r = &mut engine_task => { let _ = r; Err(died("engine")) }
        r = &mut writer_task => { let _ = r; Err(died("status writer")) }
        r = &mut view_task => Err(match r { Ok(Err(e)) => e, _ => died("membership view") }),
        r = &mut lease_task => Err(match r { Ok(Err(e)) => e, _ => died("membership lease") }),
        r = &mut leader_task => Err(match r { Ok(Err(e)) => e, _ => died("leader election") }),
        r = &mut watch_task => Err(match r { Ok(Err(e)) => e, _ => died("checker watch") }),
    };
    health.alive.store(outcome.is_ok(), Ordering::Relaxed);
    health.shutting_down.store(true, Ordering::Relaxed);
    outcome?;

    // Graceful shutdown: stop probing, flush status, hand everything over.
    let deadline = Instant::now() + cfg.shutdown_timeout;
    info!(replica = %identity, "shutting down: stopping probes");
    watch_task.abort();
    let (done, wait) = oneshot::channel();
    if cmd_tx.send(Command::Shutdown { done }).await.is_ok() {
        let _ =
            tokio::time::timeout(deadline.saturating_duration_since(Instant::now()), wait).await;
    }
    writer
        .flush(
            deadline
                .saturating_duration_since(Instant::now())
                .min(Duration::from_secs(10)),
        )
        .await;
    lease_task.abort();
    let _ = stop_tx.send(true);
    let _ = tokio::time::timeout(Duration::from_secs(3), leader_task).await;
    membership.release(&client).await;
    info!(replica = %identity, "stopped");
    Ok(())
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("SIGTERM handler");
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    #[test]
    fn a_map_shrinks_only_once_mostly_empty() {
        let mut m: HashMap<u32, u32> = (0..4000).map(|i| (i, i)).collect();
        let full = m.capacity();
        m.retain(|k, _| *k < 2000);
        assert!(!super::shrink_if_sparse(&mut m), "half full stays");
        assert!(
            m.capacity() * 2 > full,
            "capacity {} of {full}",
            m.capacity()
        );
        m.retain(|k, _| *k < 10);
        assert!(super::shrink_if_sparse(&mut m));
        assert!(m.capacity() < 100, "capacity {}", m.capacity());
        let mut small: HashMap<u32, u32> = (0..100)
            .collect::<Vec<_>>()
            .into_iter()
            .map(|i| (i, i))
            .collect();
        small.clear();
        assert!(
            !super::shrink_if_sparse(&mut small),
            "small maps are left alone"
        );
    }
}
