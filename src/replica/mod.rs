//! One replica: wires the engine, writer, membership, member view, leader
//! election and feed together, runs until SIGTERM or a vital task dies, and
//! shuts down in the order docs/invariants.md gives: stop probing, release the Leases
//! (the others take over at once), then flush the last status writes (still
//! fenced by resourceVersion, so none lands on a checker that already moved).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use kube::runtime::events::{Recorder, Reporter};
use tokio::sync::{mpsc, oneshot};
use tracing::{error, info, warn};

use crate::config::Config;
use crate::coordination::membership::{Advert, Membership};
use crate::coordination::shard::{LeaderElector, LeaderGate, MemberView, Peers, Sharder};
use crate::engine::{Command, Engine, EngineSettings};
use crate::error::Error;
use crate::intake::feed;
use crate::kubeio::client::Clients;
use crate::kubeio::writer::StatusWriter;
use crate::kubeio::{egress, preflight};
use crate::observe::events;
use crate::observe::metrics::Metrics;
use crate::observe::server::{self, HealthFlags};
use crate::probe;

/// Turns a finished vital task into the process's error.
fn vital(what: &'static str, r: Result<Result<(), Error>, tokio::task::JoinError>) -> Error {
    let e = match r {
        Ok(Err(e)) => e,
        Ok(Ok(())) => Error::TaskDied(what),
        Err(j) if j.is_panic() => Error::TaskPanicked(what, panic_text(j)),
        Err(_) => Error::TaskDied(what),
    };
    error!(task = what, error = %e, "a vital task stopped; exiting so the pod restarts");
    e
}

fn panic_text(j: tokio::task::JoinError) -> String {
    let p = j.into_panic();
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(no message)".into())
}

/// The runtime of coordination: membership renewals and the pause detector,
/// the member view, peer evidence, leader election and the sharder. It has a
/// thread of its own and API clients of its own (a pooled connection's I/O
/// runs on the runtime that opened it), so probe work that saturates the
/// engine's threads (matching, TLS handshakes, a burst of due probes) never
/// delays a renewal or an assignment: the kernel schedules this mostly idle
/// thread as soon as it wakes.
fn coordination_runtime() -> Result<tokio::runtime::Handle, Error> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("coordination")
        .enable_all()
        .build()
        .map_err(|e| Error::Config(format!("cannot start the coordination runtime: {e}")))?;
    let handle = rt.handle().clone();
    // It lives as long as the process: its tasks are aborted at shutdown, and
    // a runtime may not be dropped from within another one.
    Box::leak(Box::new(rt));
    Ok(handle)
}

/// Runs one replica until SIGTERM/SIGINT (Ok) or until a vital task dies (Err).
pub async fn run(cfg: Config) -> Result<(), Error> {
    cfg.validate()?;
    // Before anything reaches the cluster: a bad bundle is a bad configuration.
    let ca_bundle = match &cfg.ca_bundle {
        Some(path) => {
            let roots = probe::Roots::from_file(path)
                .map_err(|e| Error::Config(format!("--ca-bundle: {e}")))?;
            Some((path, roots))
        }
        None => None,
    };
    let identity = cfg.identity();
    let kube_config = kube::Config::infer().await.map_err(Error::InferConfig)?;
    let api_url = kube_config.cluster_url.to_string();
    let api_uri = kube_config.cluster_url.clone();
    let coordination = coordination_runtime()?;
    let coord_clients = {
        let _on = coordination.enter();
        Clients::new(kube_config.clone())?
    };
    let clients = Clients::new(kube_config)?;
    let client = clients.requests.clone();
    let metrics = Arc::new(Metrics::new(&identity, cfg.per_checker_histogram));
    // Tells this process from an earlier or later one at the same address.
    let incarnation = format!("{:032x}", rand::random::<u128>());
    let health = Arc::new(HealthFlags {
        incarnation: incarnation.clone(),
        ..Default::default()
    });
    let (addr, mut server_stopped) = server::spawn(cfg.listen, metrics.clone(), health.clone())?;
    info!(replica = %identity, listen = %addr, "webchecker-operator {} starting", env!("CARGO_PKG_VERSION"));
    let advert = Advert {
        address: cfg.advertised(addr),
        incarnation,
        pod_uid: cfg.pod_uid.clone().filter(|u| !u.is_empty()),
    };
    match &advert.address {
        Some(a) => {
            info!(address = %a, "peers look for this process at its advertised address (fast failover)")
        }
        None => info!(
            "no address advertised (--fast-failover=false, or listening on every address without POD_IP): peers judge this replica by its Lease alone"
        ),
    }

    let restricted = cfg.restricted_namespaces.trim();
    preflight::preflight(
        &client,
        &cfg.namespace,
        cfg.watch_namespace.as_deref(),
        !restricted.is_empty(),
    )
    .await
    .map_err(|e| match e {
        Error::Kube(k) if !matches!(k, kube::Error::Api(_)) => Error::Unreachable {
            url: api_url.clone(),
            source: k,
        },
        other => other,
    })?;

    // Before joining (a member that cannot probe yet would hold checkers):
    // the addresses the forgery guard learns from the cluster, and the
    // namespaces closed to private networks.
    let cluster = egress::start(
        clients.watches.clone(),
        &api_uri,
        restricted,
        metrics.clone(),
    )
    .await?;
    if cfg.allow_loopback {
        warn!(
            "--allow-loopback: probes may reach this pod's loopback (meant for local demos and tests)"
        );
    }

    let membership = Membership::new(
        identity.clone(),
        cfg.namespace.clone(),
        cfg.lease_duration,
        cfg.renew_deadline,
        cfg.retry_period,
        metrics.clone(),
        advert,
    );
    membership.join(&clients.leases).await?;

    let policy = probe::AddressPolicy {
        deny: cfg.deny_cidrs.0.clone(),
        allow: cfg.allow_cidrs.0.clone(),
        allow_loopback: cfg.allow_loopback,
        private: cfg.private_cidrs.0.clone(),
        check_proxied_targets: cfg.check_proxied_targets,
        cluster,
    };
    let (resolver, warnings) = probe::Resolver::from_files(&cfg.resolv_conf, &cfg.hosts_file)
        .map_err(|e| Error::Config(e.to_string()))?;
    for w in warnings {
        warn!("resolver: {w}");
    }
    info!("resolver: {}", resolver.describe());
    let mut prober = probe::Prober::new(
        cfg.replica_header.then_some(identity.as_str()),
        policy,
        cfg.max_body_bytes,
    );
    prober.resolver = Arc::new(resolver);
    prober.matcher = Arc::new(probe::Matcher::new(cfg.match_threads as usize));
    if let Some((path, roots)) = ca_bundle {
        info!(
            "--ca-bundle: {} certificate(s) of {} trusted in addition to the built-in roots",
            roots.extra(),
            path.display()
        );
        prober.set_roots(roots);
    }
    let prober = Arc::new(prober);
    // Few concurrent status writes: they are never urgent, and the API server's
    // capacity is better spent on assignments (new checkers, failover).
    let writer = StatusWriter::new(membership.clone(), metrics.clone(), 4);
    let (cmd_tx, cmd_rx) = mpsc::channel::<Command>(1024);
    let (ev_tx, ev_rx) = events::event_queue(events::EVENT_QUEUE);
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

    let mut engine_task = tokio::spawn(async move {
        engine.run(cmd_rx).await;
        Ok::<(), Error>(())
    });
    let mut writer_task = tokio::spawn({
        let (writer, client) = (writer.clone(), client.clone());
        async move {
            writer.run(client).await;
            Ok::<(), Error>(())
        }
    });
    tokio::spawn(events::run_events(recorder, ev_rx, metrics.clone()));
    let mut view_task = coordination.spawn(view.clone().run(
        coord_clients.watches.clone(),
        cfg.namespace.clone(),
        metrics.clone(),
    ));
    let fence_tx = cmd_tx.clone();
    let mut lease_task = coordination.spawn(membership.clone().run(
        coord_clients.leases.clone(),
        move || {
            let tx = fence_tx.clone();
            async move {
                let (done, wait) = oneshot::channel();
                if tx.send(Command::Fence { done }).await.is_ok() {
                    let _ = wait.await;
                }
            }
        },
    ));
    let peers = Peers::new(&identity, cfg.fast_failover);
    let mut peers_task = coordination.spawn(peers.clone().run(view.clone()));
    let leader_gate = LeaderGate::new(cfg.renew_deadline);
    let elector = LeaderElector {
        identity: identity.clone(),
        namespace: cfg.namespace.clone(),
        lease_duration: cfg.lease_duration,
        retry_period: cfg.retry_period,
        metrics: metrics.clone(),
        gate: leader_gate.clone(),
        view: view.clone(),
        peers: peers.clone(),
    };
    let sharder = {
        let (clients, view, membership, metrics, peers) = (
            coord_clients.clone(),
            view.clone(),
            membership.clone(),
            metrics.clone(),
            peers.clone(),
        );
        let (identity, watch_ns, lease_ns, retry) = (
            identity.clone(),
            cfg.watch_namespace.clone(),
            cfg.namespace.clone(),
            cfg.retry_period,
        );
        move || {
            Sharder {
                clients: clients.clone(),
                identity: identity.clone(),
                watch_namespace: watch_ns.clone(),
                lease_namespace: lease_ns.clone(),
                view: view.clone(),
                membership: membership.clone(),
                leader: leader_gate.clone(),
                peers: peers.clone(),
                metrics: metrics.clone(),
                retry_period: retry,
                write_limit: Arc::new(tokio::sync::Semaphore::new(64)),
            }
            .run()
        }
    };
    let mut leader_task =
        coordination.spawn(elector.run(coord_clients.leases.clone(), stop_rx, sharder));
    let mut watch_task = tokio::spawn(feed::watch_own_shard(
        clients.watches.clone(),
        cfg.watch_namespace.clone(),
        membership.clone(),
        cmd_tx.clone(),
        health.clone(),
        metrics.clone(),
        crate::intake::budget::Limits {
            pattern_bytes: (cfg.namespace_pattern_budget_mib as usize) << 20,
            value_bytes: (cfg.namespace_value_budget_mib as usize) << 20,
        },
    ));
    health.alive.store(true, Ordering::Relaxed);

    let outcome: Result<(), Error> = tokio::select! {
        _ = shutdown_signal() => Ok(()),
        r = &mut engine_task => Err(vital("engine", r)),
        r = &mut writer_task => Err(vital("status writer", r)),
        r = &mut view_task => Err(vital("membership view", r)),
        r = &mut lease_task => Err(vital("membership lease", r)),
        r = &mut leader_task => Err(vital("leader election", r)),
        r = &mut watch_task => Err(vital("checker watch", r)),
        r = &mut peers_task => Err(vital("peer evidence", r)),
        _ = &mut server_stopped => Err(vital("http server", Ok(Ok(())))),
    };
    health.alive.store(outcome.is_ok(), Ordering::Relaxed);
    health.shutting_down.store(true, Ordering::Relaxed);
    outcome?;

    let deadline = Instant::now() + cfg.shutdown_timeout;
    let left = || deadline.saturating_duration_since(Instant::now());
    info!(replica = %identity, "shutting down: stopping probes");
    watch_task.abort();
    let (done, wait) = oneshot::channel();
    if cmd_tx.send(Command::Shutdown { done }).await.is_ok() {
        let _ = tokio::time::timeout(left(), wait).await;
    }
    // Hand over first: the others start probing our checkers at once...
    lease_task.abort();
    let _ = stop_tx.send(true);
    let _ = tokio::time::timeout(left().min(Duration::from_secs(3)), leader_task).await;
    writer.allow_final_flush();
    membership.release(&clients.leases).await;
    // ...then flush what we last saw; each write is fenced by resourceVersion.
    if !writer.flush(left().min(Duration::from_secs(10))).await {
        warn!(replica = %identity, "stopping with status writes unwritten (the API server did not take them in time)");
    }
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
