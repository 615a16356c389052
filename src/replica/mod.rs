//! One replica: wires the engine, writer, membership, member view, leader
//! election and feed together, runs until SIGTERM or a vital task dies, and
//! shuts down in the order docs/invariants.md gives: stop probing, release the
//! Leases (the others take over at once), then flush the last status writes
//! (still fenced by resourceVersion, so none lands on a checker that already
//! moved).
//!
//! Start-up is a sequence of named stages (`run`): configuration, clients and
//! the HTTP server; permission checks; what the forgery guard learns from the
//! cluster; joining (the membership Lease); the prober; the tasks.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use kube::runtime::events::Reporter;
use tokio::sync::{mpsc, oneshot};
use tracing::{info, warn};

use crate::ask::asker::Asker;
use crate::ask::choice::Candidate;
use crate::ask::tokens::TokenSource;
use crate::config::Config;
use crate::confirm::review::Reviewer;
use crate::confirm::service::{
    ConfirmMetrics, Desk, Parts as ConfirmParts, Request as ConfirmRequest,
    Service as ConfirmService,
};
use crate::coordination::LeaseNames;
use crate::coordination::membership::{Advert, LeaseAt, Membership, MembershipMetrics};
use crate::coordination::shard::{
    LeaderElector, LeaderGate, MemberView, Peers, ShardMetrics, Sharder,
};
use crate::discovery::route_events;
use crate::engine::metrics::EngineMetrics;
use crate::engine::writer::{STATUS_WRITERS, StatusWriter, WriterMetrics};
use crate::engine::{Command, Engine, EngineSettings};
use crate::error::Error;
use crate::intake::feed::{self, FeedMetrics};
use crate::kubeio::client::Clients;
use crate::kubeio::egress::{self, GuardMetrics};
use crate::kubeio::preflight;
use crate::observe::metrics::{Metrics, WatchMetrics};
use crate::observe::server::{self, HealthFlags};
use crate::observe::{events, listener};
use crate::probe;

mod tasks;

use tasks::Tasks;

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

/// What every later stage uses: who this replica is, its API clients (the
/// engine's and coordination's), metrics and health.
struct Basics {
    identity: String,
    api_url: String,
    api_uri: http::Uri,
    coordination: tokio::runtime::Handle,
    clients: Clients,
    coord_clients: Clients,
    /// The registry and the per-checker series.
    metrics: Arc<Metrics>,
    /// Every watch's failures (the feed's, the guard's, the member view's,
    /// the sharder's, discovery's).
    watch_failures: Arc<WatchMetrics>,
    health: Arc<HealthFlags>,
    advert: Advert,
    /// Asks to confirm a failure, as the HTTP server received them; the
    /// confirmation service takes them when it starts.
    asks: std::sync::Mutex<Option<mpsc::Receiver<ConfirmRequest>>>,
}

/// Runs one replica until SIGTERM/SIGINT (Ok) or until a vital task dies (Err).
pub async fn run(cfg: Config) -> Result<(), Error> {
    cfg.validate()?;
    // Before anything reaches the cluster: a bad bundle is a bad configuration.
    let ca_bundle = read_ca_bundle(&cfg)?;
    let (basics, server_stopped) = connect(&cfg).await?;
    check_permissions(&cfg, &basics).await?;
    // Before joining (a member that cannot probe yet would hold checkers):
    // the addresses the forgery guard learns from the cluster, and the
    // namespaces closed to private networks.
    let cluster = egress::start(
        basics.clients.watches.clone(),
        &basics.api_uri,
        cfg.restricted_namespaces.trim(),
        Arc::new(GuardMetrics::register(
            basics.metrics.registry(),
            basics.watch_failures.clone(),
        )),
    )
    .await?;
    if cfg.allow_loopback {
        warn!(
            "--allow-loopback: probes may reach this pod's loopback (meant for local demos and tests)"
        );
    }
    let names = LeaseNames::new(&cfg.lease_prefix);
    let membership = Membership::new(
        basics.identity.clone(),
        LeaseAt::new(&cfg.namespace, &names.member(&basics.identity)),
        cfg.lease_duration,
        cfg.renew_deadline,
        cfg.retry_period,
        Arc::new(membership_metrics(&basics)),
        basics.advert.clone(),
    );
    membership.join(&basics.clients.leases).await?;
    let prober = prober(&cfg, &basics.identity, cluster, ca_bundle)?;
    let (mut tasks, running) =
        start_tasks(&cfg, &basics, membership.clone(), prober, server_stopped);
    basics.health.alive.store(true, Ordering::Relaxed);

    let outcome = tasks.wait().await;
    basics
        .health
        .alive
        .store(outcome.is_ok(), Ordering::Relaxed);
    basics.health.shutting_down.store(true, Ordering::Relaxed);
    outcome?;
    shut_down(&cfg, &basics, &membership, tasks, running).await;
    Ok(())
}

/// Membership's families, with this replica's place.
fn membership_metrics(basics: &Basics) -> MembershipMetrics {
    let m = MembershipMetrics::register(basics.metrics.registry());
    let place = [basics.advert.zone.as_str(), basics.advert.node.as_str()];
    m.replica_place.with_label_values(&place).set(1);
    m
}

fn read_ca_bundle(cfg: &Config) -> Result<Option<(PathBuf, probe::Roots)>, Error> {
    let Some(path) = &cfg.ca_bundle else {
        return Ok(None);
    };
    let roots =
        probe::Roots::from_file(path).map_err(|e| Error::Config(format!("--ca-bundle: {e}")))?;
    Ok(Some((path.clone(), roots)))
}

/// Configuration, API clients, metrics and the HTTP server (bound now, so a
/// bad address fails start-up; the receiver completes when it stops).
async fn connect(cfg: &Config) -> Result<(Basics, oneshot::Receiver<()>), Error> {
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
    let metrics = Arc::new(Metrics::with_histograms(
        &identity,
        crate::observe::metrics::HistogramOptions {
            per_checker: cfg.per_checker_histogram,
            native: cfg.native_histograms,
            keep_classic: cfg.classic_histograms,
        },
    ));
    crate::observe::metrics::memory_limit::register(metrics.registry(), cfg.memory_limit);
    let watch_failures = Arc::new(WatchMetrics::register(metrics.registry()));
    let refused = listener::refused_connections(metrics.registry());
    // Tells this process from an earlier or later one at the same address.
    let incarnation = format!("{:032x}", rand::random::<u128>());
    let health = Arc::new(HealthFlags {
        incarnation: incarnation.clone(),
        ..Default::default()
    });
    let (desk, asks) = Desk::new();
    let (addr, server_stopped) = server::spawn(
        cfg.listen,
        metrics.clone(),
        health.clone(),
        refused.with_label_values(&["main"]),
    )?;
    let refused = refused.with_label_values(&["confirm"]);
    let confirm_addr =
        crate::confirm::endpoint::spawn(cfg.confirm_listen, desk, move || refused.inc())?;
    info!(replica = %identity, listen = %addr, confirm_listen = %confirm_addr, "webchecker-operator {} starting", env!("CARGO_PKG_VERSION"));
    let node = cfg.node_name.clone().unwrap_or_default();
    let zone = match &cfg.zone {
        Some(z) => z.clone(),
        None => zone_of(&clients.requests, &node).await,
    };
    info!(zone = %zone, node = %node, "place of this replica (confirmations are asked of another zone first)");
    let advert = Advert {
        address: cfg.advertised(addr),
        confirm_address: cfg.advertised_confirm(confirm_addr),
        incarnation,
        pod_uid: cfg.pod_uid.clone().filter(|u| !u.is_empty()),
        zone,
        node,
    };
    match &advert.address {
        Some(a) => {
            info!(address = %a, "peers look for this process at its advertised address (fast failover)")
        }
        None => info!(
            "no address advertised (--fast-failover=false, or listening on every address without POD_IP): peers judge this replica by its Lease alone"
        ),
    }
    let basics = Basics {
        identity,
        api_url,
        api_uri,
        coordination,
        clients,
        coord_clients,
        metrics,
        watch_failures,
        health,
        advert,
        asks: std::sync::Mutex::new(Some(asks)),
    };
    Ok((basics, server_stopped))
}

/// The zone label of `node`, read once at start (empty when there is no
/// node, no label, or the Node cannot be listed: confirmers are then
/// chosen by node, or at random).
async fn zone_of(client: &kube::Client, node: &str) -> String {
    use k8s_openapi::api::core::v1::Node;
    if node.is_empty() {
        return String::new();
    }
    let api: kube::Api<Node> = kube::Api::all(client.clone());
    let lp = kube::api::ListParams::default().fields(&format!("metadata.name={node}"));
    match tokio::time::timeout(Duration::from_secs(10), api.list(&lp)).await {
        Ok(Ok(list)) => list
            .items
            .first()
            .and_then(|n| n.metadata.labels.as_ref())
            .and_then(|l| l.get(ZONE_LABEL).cloned())
            .unwrap_or_default(),
        Ok(Err(e)) => {
            warn!(node, error = %e, "cannot read this replica's Node: its zone is unknown");
            String::new()
        }
        Err(_) => {
            warn!(
                node,
                "cannot read this replica's Node in time: its zone is unknown"
            );
            String::new()
        }
    }
}

/// The Node label that names its zone.
const ZONE_LABEL: &str = "topology.kubernetes.io/zone";

/// The permissions the replica needs, asked before it joins; an API server
/// that cannot be reached is said so with its address.
async fn check_permissions(cfg: &Config, basics: &Basics) -> Result<(), Error> {
    preflight::preflight(
        &basics.clients.requests,
        &cfg.namespace,
        cfg.watch_namespace.as_deref(),
        !cfg.restricted_namespaces.trim().is_empty(),
    )
    .await
    .map_err(|e| match e {
        Error::Kube(k) if !matches!(k, kube::Error::Api(_)) => Error::Unreachable {
            url: basics.api_url.clone(),
            source: k,
        },
        other => other,
    })
}

/// The prober: the forgery guard's policy, the name resolver, the matching
/// threads and the trusted roots.
fn prober(
    cfg: &Config,
    identity: &str,
    cluster: tokio::sync::watch::Receiver<probe::ClusterAddresses>,
    ca_bundle: Option<(PathBuf, probe::Roots)>,
) -> Result<Arc<probe::Prober>, Error> {
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
        cfg.replica_header.then_some(identity),
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
    Ok(Arc::new(prober))
}

/// What shutdown needs of the running replica besides its tasks.
struct Running {
    commands: mpsc::Sender<Command>,
    writer: Arc<StatusWriter>,
    stop_leader: tokio::sync::watch::Sender<bool>,
    /// The members as this replica sees them, and how many checkers it owns:
    /// whether a handover can start, and when it is done.
    view: Arc<MemberView>,
    held: Arc<std::sync::atomic::AtomicUsize>,
}

/// Spawns the tasks: on the engine's runtime the engine, status writer, Event
/// publisher and feed; on coordination's the member view, the membership
/// Lease, peer evidence and leader election (with the sharder).
fn start_tasks(
    cfg: &Config,
    basics: &Basics,
    membership: Arc<Membership>,
    prober: Arc<probe::Prober>,
    server_stopped: oneshot::Receiver<()>,
) -> (Tasks, Running) {
    let metrics = &basics.metrics;
    let registry = metrics.registry();
    let client = basics.clients.requests.clone();
    let writer = StatusWriter::new(
        membership.clone(),
        WriterMetrics::register(registry),
        STATUS_WRITERS,
    );
    let (cmd_tx, cmd_rx) = mpsc::channel::<Command>(1024);
    let (ev_tx, ev_rx) = events::event_queue(
        events::EVENT_QUEUE,
        Arc::new(events::EventMetrics::register(registry)),
    );
    let view = MemberView::new(cfg.lease_duration);
    let asker = asker(cfg, basics, &view);
    let confirmer_prober = prober.clone();
    let engine_metrics = Arc::new(EngineMetrics::register(registry, &basics.advert.zone));
    let held = engine_metrics.held.clone();
    let engine = Engine::new(
        EngineSettings {
            identity: basics.identity.clone(),
            workers: cfg.workers as usize,
            heartbeat: cfg.heartbeat,
            asker: Some(asker),
            confirm_failures: cfg.confirm_failures,
            diagnoser: diagnoser(cfg, basics, &cmd_tx),
        },
        prober,
        (metrics.clone(), engine_metrics),
        membership.clone(),
        writer.clone(),
        ev_tx,
    );
    let confirm = confirmer(cfg, basics, &view, confirmer_prober, cmd_tx.clone());
    let engine = tokio::spawn(async move {
        engine.run(cmd_rx).await;
        Ok::<(), Error>(())
    });
    let writer_task = tokio::spawn({
        let writer = writer.clone();
        async move {
            writer.run(client).await;
            Ok::<(), Error>(())
        }
    });
    let events = spawn_events(basics, ev_rx);
    let (stop_leader, stop_rx) = tokio::sync::watch::channel(false);
    let coordination = start_coordination(cfg, basics, &membership, &cmd_tx, stop_rx, view.clone());
    let watch = tokio::spawn(feed::watch_own_shard(
        basics.clients.watches.clone(),
        cfg.watch_namespace.clone(),
        membership,
        cmd_tx.clone(),
        basics.health.clone(),
        FeedMetrics {
            watches: basics.watch_failures.clone(),
            labels: cfg.metric_labels_allowlist.clone(),
        },
        webchecker_core::namespace_budget::Limits {
            pattern_bytes: (cfg.namespace_pattern_budget_mib as usize) << 20,
            value_bytes: (cfg.namespace_value_budget_mib as usize) << 20,
        },
    ));
    if cfg.discover_routes {
        start_discovery(cfg, basics, &coordination.leader_gate);
    }
    let (maintenance, dependencies) =
        checker_views(cfg, basics, &cmd_tx, &coordination.leader_gate);
    let tasks = Tasks {
        engine,
        writer: writer_task,
        view: coordination.view,
        lease: coordination.lease,
        leader: coordination.leader,
        watch,
        peers: coordination.peers,
        events,
        maintenance,
        dependencies,
        confirm,
        server_stopped,
    };
    let running = Running {
        commands: cmd_tx,
        writer,
        stop_leader,
        view,
        held,
    };
    (tasks, running)
}

type VitalTask = tokio::task::JoinHandle<Result<(), Error>>;

/// The watches that every replica's engine reads beside its own shard:
/// the maintenance windows, and every checker's dependencies and Ready.
fn checker_views(
    cfg: &Config,
    basics: &Basics,
    commands: &mpsc::Sender<Command>,
    leader: &Arc<LeaderGate>,
) -> (VitalTask, VitalTask) {
    let maintenance = crate::maintenance::spawn(crate::maintenance::Maintenance {
        clients: basics.clients.clone(),
        watch_namespace: cfg.watch_namespace.clone(),
        commands: commands.clone(),
        leader: leader.clone(),
        watch_failures: basics.watch_failures.clone(),
    });
    let dependencies = tokio::spawn(crate::dependencies::run(
        basics.clients.clone(),
        cfg.watch_namespace.clone(),
        commands.clone(),
        basics.watch_failures.clone(),
    ));
    (maintenance, dependencies)
}

/// The diagnosis task (crate::diagnosis), with `--diagnosis`.
fn diagnoser(
    cfg: &Config,
    basics: &Basics,
    commands: &mpsc::Sender<Command>,
) -> Option<crate::diagnosis::Diagnoser> {
    let registry = basics.metrics.registry();
    cfg.diagnosis.then(|| {
        crate::diagnosis::spawn(
            basics.clients.requests.clone(),
            commands.clone(),
            Arc::new(crate::diagnosis::metrics::DiagnosisMetrics::register(
                registry,
            )),
        )
    })
}

/// The Event publisher, each Event only where discovery's rule lets it go
/// (`route_events::may_hear`).
fn spawn_events(
    basics: &Basics,
    rx: events::EventReceiver,
) -> tokio::task::JoinHandle<Result<(), Error>> {
    let client = basics.clients.requests.clone();
    let recorder = events::Recorder::new(
        client.clone(),
        Reporter {
            controller: "webchecker-operator".into(),
            instance: Some(basics.identity.clone()),
        },
    );
    tokio::spawn(async move {
        let audience: events::Audience = Arc::new(move |r| {
            let client = client.clone();
            Box::pin(async move { route_events::may_hear(&client, &r).await })
        });
        events::run_events(recorder, rx, audience).await;
        Ok::<(), Error>(())
    })
}

/// Route discovery (crate::discovery), led by the leader. Not vital: it is
/// no task the replica exits for.
fn start_discovery(cfg: &Config, basics: &Basics, leader: &Arc<LeaderGate>) {
    crate::discovery::task::spawn(crate::discovery::task::Discovery {
        clients: basics.clients.clone(),
        watch_namespace: cfg.watch_namespace.clone(),
        leader: leader.clone(),
        registry: basics.metrics.registry().clone(),
        watch_failures: basics.watch_failures.clone(),
        identity: basics.identity.clone(),
        defaults: crate::discovery::Defaults {
            cluster_domain: cfg.cluster_domain.clone(),
            ..Default::default()
        },
        max_per_namespace: cfg.discovery_max_checkers_per_namespace as usize,
    });
}

/// The service that answers other replicas' asks (crate::confirm), its
/// probes on the engine's worker pool; its task, once started.
fn confirmer(
    cfg: &Config,
    basics: &Basics,
    view: &Arc<MemberView>,
    prober: Arc<probe::Prober>,
    engine: mpsc::Sender<Command>,
) -> Option<tokio::task::JoinHandle<Result<(), Error>>> {
    let client = &basics.clients.requests;
    let asks = basics
        .asks
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .take()?;
    let service = ConfirmService::new(ConfirmParts {
        client: client.clone(),
        reviewer: Reviewer::new(
            client.clone(),
            &cfg.namespace,
            &cfg.service_account,
            cfg.confirm_allow_unbound_tokens,
        ),
        prober,
        metrics: ConfirmMetrics::register(basics.metrics.registry()),
        view: view.clone(),
        engine,
        workers: cfg.workers as usize,
        budgets: webchecker_core::namespace_budget::Limits {
            pattern_bytes: (cfg.namespace_pattern_budget_mib as usize) << 20,
            value_bytes: (cfg.namespace_value_budget_mib as usize) << 20,
        },
    });
    Some(tokio::spawn(async move {
        service.run(asks).await;
        Ok::<(), Error>(())
    }))
}

/// This replica's asker: confirmations (unless `--confirm-failures=false`)
/// and the zones' probes of `spec.locations`.
fn asker(cfg: &Config, basics: &Basics, view: &Arc<MemberView>) -> Arc<Asker> {
    let me = Candidate {
        identity: basics.identity.clone(),
        address: String::new(),
        zone: basics.advert.zone.clone(),
        node: basics.advert.node.clone(),
    };
    let pod = basics
        .advert
        .pod_uid
        .clone()
        .map(|uid| (basics.identity.clone(), uid));
    let tokens = TokenSource::new(
        basics.clients.requests.clone(),
        &cfg.namespace,
        &cfg.service_account,
        pod,
        crate::ask::tokens::credentials_missing(basics.metrics.registry()),
    );
    let asker = Asker::new(me, view.clone(), tokens);
    // Zones' probes make a token when a checker asks for them; with
    // confirmations on, every failure may need one. Not joined: it ends
    // after its first token, and without it the first ask makes one.
    if cfg.confirm_failures {
        tokio::spawn({
            let asker = asker.clone();
            async move { asker.warm().await }
        });
    }
    asker
}

struct CoordinationTasks {
    view: tokio::task::JoinHandle<Result<(), Error>>,
    lease: tokio::task::JoinHandle<Result<(), Error>>,
    peers: tokio::task::JoinHandle<Result<(), Error>>,
    leader: tokio::task::JoinHandle<Result<(), Error>>,
    /// Whether this replica leads (route discovery writes only then).
    leader_gate: Arc<LeaderGate>,
}

/// The coordination tasks, on their own runtime. Losing the Lease fences the
/// engine (every checker dropped at once) before renewals start again.
fn start_coordination(
    cfg: &Config,
    basics: &Basics,
    membership: &Arc<Membership>,
    commands: &mpsc::Sender<Command>,
    stop_leader: tokio::sync::watch::Receiver<bool>,
    view: Arc<MemberView>,
) -> CoordinationTasks {
    let (coordination, clients) = (&basics.coordination, &basics.coord_clients);
    let metrics = Arc::new(ShardMetrics::register(basics.metrics.registry()));
    let names = LeaseNames::new(&cfg.lease_prefix);
    let view_task = coordination.spawn(view.clone().run(
        clients.watches.clone(),
        cfg.namespace.clone(),
        names.clone(),
        (metrics.clone(), basics.watch_failures.clone()),
    ));
    let fence_tx = commands.clone();
    let lease = coordination.spawn(membership.clone().run(clients.leases.clone(), move || {
        let tx = fence_tx.clone();
        async move {
            let (done, wait) = oneshot::channel();
            if tx.send(Command::Fence { done }).await.is_ok() {
                let _ = wait.await;
            }
        }
    }));
    let peers = Peers::new(&basics.identity, cfg.fast_failover);
    let peers_task = coordination.spawn(peers.clone().run(view.clone()));
    let leader_gate = LeaderGate::new(cfg.renew_deadline);
    let gate = leader_gate.clone();
    let elector = LeaderElector {
        identity: basics.identity.clone(),
        namespace: cfg.namespace.clone(),
        lease: names.leader(),
        lease_duration: cfg.lease_duration,
        retry_period: cfg.retry_period,
        metrics: metrics.clone(),
        renew_failures: membership.renew_failures(),
        gate: leader_gate.clone(),
        view: view.clone(),
        peers: peers.clone(),
    };
    // A new sharder, with a write limit of its own, each time this replica
    // becomes leader.
    let sharder = Sharder {
        clients: clients.clone(),
        identity: basics.identity.clone(),
        lease_names: names,
        watch_namespace: cfg.watch_namespace.clone(),
        lease_namespace: cfg.namespace.clone(),
        view,
        membership: membership.clone(),
        leader: leader_gate,
        peers,
        metrics,
        watches: basics.watch_failures.clone(),
        retry_period: cfg.retry_period,
    };
    let leader = coordination.spawn(elector.run(clients.leases.clone(), stop_leader, move || {
        sharder.clone().run()
    }));
    CoordinationTasks {
        view: view_task,
        lease,
        peers: peers_task,
        leader,
        leader_gate: gate,
    }
}

/// Tells the sharder (through the membership Lease) that this replica is
/// leaving, and keeps probing while it drains our checkers to the others
/// one by one: each new owner takes over at the checker's next due time.
/// Returns when we own nothing, or after `budget`. Nothing to wait for
/// when no other member can take them.
async fn hand_over(identity: &str, membership: &Membership, running: &Running, budget: Duration) {
    let leaving = running.view.leaving();
    let others = running.view.members().is_some_and(|m| {
        m.keys()
            .any(|id| id.as_str() != identity && !leaving.contains(id))
    });
    if !others || running.held.load(Ordering::Relaxed) == 0 {
        return;
    }
    let t0 = Instant::now();
    info!(replica = %identity, held = running.held.load(Ordering::Relaxed), "shutting down: handing checkers over");
    membership.leave();
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    while running.held.load(Ordering::Relaxed) > 0 && t0.elapsed() < budget {
        tick.tick().await;
    }
    match running.held.load(Ordering::Relaxed) {
        0 => info!(replica = %identity, took = ?t0.elapsed(), "every checker handed over"),
        left => {
            warn!(replica = %identity, left, "handover not done in time: the rest move when the membership Lease is released")
        }
    }
}

/// The shutdown order, within `--shutdown-timeout`: hand every checker over
/// while still probing it (at most half the budget); stop probing (the
/// feed, then the engine waits for probes in flight); release (the Lease
/// renewals and leader election stop, the membership Lease is released, so
/// the others start probing what is left at once); then flush what we last
/// saw, each write fenced by resourceVersion.
async fn shut_down(
    cfg: &Config,
    basics: &Basics,
    membership: &Membership,
    tasks: Tasks,
    running: Running,
) {
    let deadline = Instant::now() + cfg.shutdown_timeout;
    let left = || deadline.saturating_duration_since(Instant::now());
    let identity = &basics.identity;
    hand_over(identity, membership, &running, cfg.shutdown_timeout / 2).await;
    info!(replica = %identity, "shutting down: stopping probes");
    tasks.watch.abort();
    tasks.maintenance.abort();
    tasks.dependencies.abort();
    let (done, wait) = oneshot::channel();
    if running
        .commands
        .send(Command::Shutdown { done })
        .await
        .is_ok()
    {
        let _ = tokio::time::timeout(left(), wait).await;
    }
    tasks.lease.abort();
    let _ = running.stop_leader.send(true);
    let _ = tokio::time::timeout(left().min(Duration::from_secs(3)), tasks.leader).await;
    running.writer.allow_final_flush();
    membership.release(&basics.clients.leases).await;
    if !running
        .writer
        .flush(left().min(Duration::from_secs(10)))
        .await
    {
        warn!(replica = %identity, "stopping with status writes unwritten (the API server did not take them in time)");
    }
    info!(replica = %identity, "stopped");
}
