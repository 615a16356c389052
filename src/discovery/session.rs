//! Discovery while this replica leads: watches of the Namespaces'
//! metadata and of the generated checkers' metadata (only those labelled as
//! generated), then (once the Namespaces are listed, so that what cannot
//! opt in is known as it comes) of the Ingresses and the Services, and of
//! the HTTPRoutes, GRPCRoutes and Gateways (each kind of route once the
//! Gateway API serves it: looked for every [`GATEWAY_API_LOOK`] until both
//! are), each listed in pages of [`LIST_PAGE`] and resumed with a backoff
//! after an error; a work queue of source objects taken a namespace at a
//! time; at most [`CONCURRENCY`] of them written at once, at most
//! [`NAMESPACE_CONCURRENCY`] of one namespace. No source of a
//! kind is reconciled before its watches, the Namespaces' and the
//! checkers' have listed: a Namespace not listed yet would look as if it
//! had not opted in, and its checkers would be deleted.
//!
//! Memory: each object trimmed as it comes (`trim`), a stub when it cannot
//! opt in (`objects`); each Namespace's annotations of ours and labels;
//! (name, UID, fingerprint) per generated checker; what each source wants
//! against the cap per namespace (`budget`).

use std::collections::BTreeMap;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures::stream::{BoxStream, SelectAll};
use futures::{FutureExt, StreamExt};
use k8s_openapi::api::core::v1::{Namespace, Service};
use k8s_openapi::api::networking::v1::Ingress;
use kube::core::PartialObjectMeta;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tracing::{debug, info, warn};

use super::gateway_api::{self, GRPCRoute, Gateway, HTTPRoute};
use super::metrics::DiscoveryMetrics;
use super::queue::WorkQueue;
use super::trim::Kept;
use super::views::{
    Change, Key, Kind, State, enqueue_all, on_checker, on_gateway, on_grpc_route, on_ingress,
    on_namespace, on_refill, on_route, on_service,
};
use super::writer::{Stopped, Work, Writer};
use super::{
    Defaults, NamespaceInfo, Plan, Problem, SOURCE_LABEL, Source, gateway, grpcroute, httproute,
    ingress, patch, refill, service,
};
use crate::api::WebChecker;
use crate::error::api_code;
use crate::kubeio::client::{CALL_DEADLINE, WATCH_TIMEOUT_SECS, WatchBackoff};
use crate::observe::metrics::WatchMetrics;

/// How often the Gateway API is looked for while it is not installed.
const GATEWAY_API_LOOK: Duration = Duration::from_secs(30);

/// Source objects written at once.
pub const CONCURRENCY: usize = 10;
/// Source objects of one namespace written at once: the others always
/// find a writer.
pub const NAMESPACE_CONCURRENCY: usize = 8;
/// Objects per page of a list (a watch's first list, a re-list, a refill):
/// what is held at once while it is read. An object may have 256 KiB of
/// annotations (the API server's bound), its spec more.
pub const LIST_PAGE: u32 = 10;
/// Every source object is looked at again this often (unchanged ones cost no API
/// call), so that drift nobody was told of (a missed event) heals.
const RESYNC: Duration = Duration::from_secs(300);

pub struct Session {
    pub watches: Client,
    pub watch_namespace: Option<String>,
    pub writer: Arc<Writer>,
    pub watch_failures: Arc<WatchMetrics>,
    pub discovery: Arc<DiscoveryMetrics>,
    pub defaults: Defaults,
    /// Generated checkers per namespace at most.
    pub max_per_namespace: usize,
}

/// The watches, as named in logs and in `webchecker_watch_restarts_total`.
const INGRESSES: &str = "discovery-ingresses";
const NAMESPACES: &str = "discovery-namespaces";
const CHECKERS: &str = "discovery-checkers";
const ROUTES: &str = "discovery-httproutes";
const GRPC_ROUTES: &str = "discovery-grpcroutes";
const GATEWAYS: &str = "discovery-gateways";
const SERVICES: &str = "discovery-services";
/// Not a watch: the lists of one namespace for its stubs.
const REFILLS: &str = "discovery-refills";

impl Session {
    /// Runs until a watch stream ends (it does not: the watchers retry).
    pub async fn run(self) {
        let mut streams = self.streams();
        let mut state = State::new(self.max_per_namespace);
        let mut queue: WorkQueue<Key> = WorkQueue::with_group_limit(NAMESPACE_CONCURRENCY);
        let mut work: JoinSet<(Key, bool)> = JoinSet::new();
        let (refilled, mut refills) = tokio::sync::mpsc::channel::<Change>(4);
        let mut listing: JoinSet<()> = JoinSet::new();
        let mut resync = tokio::time::interval_at(Instant::now() + RESYNC, RESYNC);
        let mut look = tokio::time::interval(GATEWAY_API_LOOK);
        let mut gateway_api = GatewayApi::default();
        let mut sources = false;
        self.discovery.watched(ingress::LABEL, false);
        self.discovery.watched(service::LABEL, false);
        self.discovery.watched(httproute::LABEL, false);
        self.discovery.watched(grpcroute::LABEL, false);
        self.discovery.watched(gateway::LABEL, false);
        loop {
            if !sources && state.listed[0] {
                self.source_streams(&mut streams);
                sources = true;
            }
            self.start_refills(&mut state, &refilled, &mut listing);
            self.start_work(&mut state, &mut queue, &mut work);
            let retry = queue.next_retry().map(Instant::from_std);
            tokio::select! {
                change = streams.next() => match change {
                    Some(c) => self.take(c, &mut state, &mut queue),
                    None => return,
                },
                Some(c) = refills.recv() => self.take(c, &mut state, &mut queue),
                Some(done) = work.join_next(), if !work.is_empty() => {
                    // A panic is caught inside the task; a join error means it was aborted.
                    if let Ok((key, ok)) = done {
                        queue.done(key, ok, std::time::Instant::now());
                    }
                }
                Some(_) = listing.join_next(), if !listing.is_empty() => {}
                _ = tokio::time::sleep_until(retry.unwrap_or_else(Instant::now)), if retry.is_some() => {
                    queue.due(std::time::Instant::now());
                }
                _ = look.tick(), if sources && !gateway_api.all_found() => {
                    self.look_for_gateway_api(&mut gateway_api, &mut streams).await;
                }
                _ = resync.tick() => enqueue_all(&state, &mut queue),
            }
        }
    }

    /// Lists again the namespaces (of a kind) whose stubs may now opt in,
    /// each once at a time; the list comes back as a [`Change::Refill`].
    fn start_refills(
        &self,
        state: &mut State,
        to: &tokio::sync::mpsc::Sender<Change>,
        listing: &mut JoinSet<()>,
    ) {
        let wanted = std::mem::take(&mut state.refills.0);
        for (kind, ns) in wanted {
            if state.refills.1.insert((kind, ns.clone())) {
                let (client, to) = (self.watches.clone(), to.clone());
                listing.spawn(async move {
                    let listed = refill::list(client, kind, &ns, LIST_PAGE).await;
                    let _ = to.send(Change::Refill(kind, ns, listed)).await;
                });
            }
        }
    }

    /// Whether the Gateway API (`gateway.networking.k8s.io/v1`) serves
    /// HTTPRoutes and GRPCRoutes (each with Gateways): those newly served
    /// are watched from now on; of each that is not, said once. A release
    /// before v1.1 has HTTPRoutes without GRPCRoutes.
    async fn look_for_gateway_api(
        &self,
        api: &mut GatewayApi,
        streams: &mut SelectAll<BoxStream<'static, Change>>,
    ) {
        let group = format!("{}/{}", gateway_api::GROUP, gateway_api::VERSION);
        let call = self.watches.list_api_group_resources(&group);
        let served: Vec<String> = match tokio::time::timeout(CALL_DEADLINE, call).await {
            Ok(Ok(list)) => list.resources.into_iter().map(|r| r.name).collect(),
            Ok(Err(e)) if api_code(&e) == Some(404) => Vec::new(),
            Ok(Err(e)) => {
                debug!(error = %e, "route discovery: cannot look for the Gateway API (looked for again)");
                return;
            }
            Err(_) => return,
        };
        let found =
            |r: &str| served.iter().any(|n| n == "gateways") && served.iter().any(|n| n == r);
        if api.http != Look::Found {
            if found("httproutes") {
                self.gateway_stream(api, streams);
                streams.push(self.watch::<HTTPRoute>(ROUTES, Change::Route));
                self.discovery.watched(httproute::LABEL, true);
                info!("route discovery: the Gateway API is installed; HTTPRoutes are watched");
                api.http = Look::Found;
            } else if api.http == Look::NotYet {
                info!(
                    "route discovery: no HTTPRoutes (the Gateway API's CRDs, {group} httproutes and gateways, are not installed); looked for again every {GATEWAY_API_LOOK:?}"
                );
                api.http = Look::Absent;
            }
        }
        if api.grpc != Look::Found {
            if found("grpcroutes") {
                self.gateway_stream(api, streams);
                streams.push(self.watch::<GRPCRoute>(GRPC_ROUTES, Change::GrpcRoute));
                self.discovery.watched(grpcroute::LABEL, true);
                info!("route discovery: GRPCRoutes are watched");
                api.grpc = Look::Found;
            } else if api.grpc == Look::NotYet {
                info!(
                    "route discovery: no GRPCRoutes (the Gateway API's CRDs, {group} grpcroutes and gateways, are not installed); looked for again every {GATEWAY_API_LOOK:?}"
                );
                api.grpc = Look::Absent;
            }
        }
    }

    /// The watches that come first: the Namespaces' and the generated
    /// checkers' metadata (a malformed checker cannot stall the watch; a
    /// Namespace's annotations and labels are all it needs).
    fn streams(&self) -> SelectAll<BoxStream<'static, Change>> {
        type Checkers = Api<PartialObjectMeta<WebChecker>>;
        let checkers: Checkers = match &self.watch_namespace {
            Some(ns) => Api::namespaced(self.watches.clone(), ns),
            None => Api::all(self.watches.clone()),
        };
        // Only the watched Namespace, by name, when there is one.
        let ns_cfg = match &self.watch_namespace {
            Some(ns) => config().fields(&format!("metadata.name={ns}")),
            None => config(),
        };
        let namespaces: Api<PartialObjectMeta<Namespace>> = Api::all(self.watches.clone());
        let generated = config().labels(&format!(
            "{SOURCE_LABEL} in ({},{},{},{},{})",
            ingress::LABEL,
            httproute::LABEL,
            grpcroute::LABEL,
            service::LABEL,
            gateway::LABEL
        ));
        let mut all = SelectAll::new();
        all.push(
            watcher::watcher(namespaces, ns_cfg)
                .backoff(WatchBackoff::default())
                .map(tagged(NAMESPACES, Change::Namespace))
                .boxed(),
        );
        all.push(
            watcher::watcher(checkers, generated)
                .backoff(WatchBackoff::default())
                .map(tagged(CHECKERS, Change::Checker))
                .boxed(),
        );
        all
    }

    /// The Ingresses and the Services (of the watched scope), once the
    /// Namespaces are listed.
    fn source_streams(&self, all: &mut SelectAll<BoxStream<'static, Change>>) {
        all.push(self.watch::<Ingress>(INGRESSES, Change::Ingress));
        all.push(self.watch::<Service>(SERVICES, |ev| Change::Service(Box::new(ev))));
        self.discovery.watched(ingress::LABEL, true);
        self.discovery.watched(service::LABEL, true);
    }

    /// Adds the watch of the Gateways, once.
    fn gateway_stream(
        &self,
        api: &mut GatewayApi,
        all: &mut SelectAll<BoxStream<'static, Change>>,
    ) {
        if !api.gateways {
            all.push(self.watch::<Gateway>(GATEWAYS, Change::Gateway));
            self.discovery.watched(gateway::LABEL, true);
            api.gateways = true;
        }
    }

    /// A watch of the objects of kind `K` (of the watched scope), named
    /// `name`, each trimmed to what a plan reads as it arrives.
    fn watch<K>(&self, name: &'static str, f: fn(Event<K>) -> Change) -> BoxStream<'static, Change>
    where
        K: Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>
            + Kept
            + Clone
            + DeserializeOwned
            + std::fmt::Debug
            + Send
            + 'static,
    {
        let api: Api<K> = match &self.watch_namespace {
            Some(ns) => Api::namespaced(self.watches.clone(), ns),
            None => Api::all(self.watches.clone()),
        };
        watcher::watcher(api, config())
            .backoff(WatchBackoff::default())
            .map(|r| r.map(|ev| ev.modify(Kept::trim)))
            .map(tagged(name, f))
            .boxed()
    }

    /// Hands queued sources to writers, up to [`CONCURRENCY`] at once; a
    /// source of a kind not ready yet is dropped (all are queued again when
    /// it is).
    fn start_work(
        &self,
        state: &mut State,
        queue: &mut WorkQueue<Key>,
        work: &mut JoinSet<(Key, bool)>,
    ) {
        while queue.working() < CONCURRENCY {
            let Some(key) = queue.pop() else { return };
            let w = if state.ready(key.0) {
                self.work_for(state, queue, &key)
            } else {
                None
            };
            let Some(w) = w else {
                queue.done(key, true, std::time::Instant::now());
                continue;
            };
            let writer = self.writer.clone();
            work.spawn(async move {
                let run = AssertUnwindSafe(writer.run(w)).catch_unwind().await;
                let ok = match run {
                    Ok(Ok(())) => true,
                    Ok(Err(Stopped::NotLeading)) => false,
                    Ok(Err(Stopped::Failed(why))) => {
                        debug!(kind = ?key.0, namespace = %key.1, name = %key.2, why, "route retried later");
                        false
                    }
                    Err(_) => {
                        warn!(kind = ?key.0, namespace = %key.1, name = %key.2, "writing the checkers of a route panicked (retried)");
                        false
                    }
                };
                (key, ok)
            });
        }
    }

    /// What source `key` wants and who owns it; None when it is gone.
    fn plan_of(&self, state: &State, key: &Key) -> Option<Planned> {
        let (kind, ns, name) = key;
        let at = (ns.clone(), name.clone());
        let empty = NamespaceInfo::default();
        let namespace = state.namespaces.get(ns).unwrap_or(&empty);
        let gateways = |ns: &str, name: &str| {
            let at = (ns.to_string(), name.to_string());
            state.gateways.map.get(&at).map(|g| g.as_ref())
        };
        let d = &self.defaults;
        let (plan, source, meta) = match kind {
            Kind::Ingress => {
                let o = state.ingresses.map.get(&at)?;
                let plan = ingress::plan(o, namespace, d);
                (plan, ingress::source(o), &o.metadata)
            }
            Kind::HttpRoute => {
                let o = state.routes.map.get(&at)?;
                let plan = httproute::plan(o, namespace, d, gateways);
                (plan, httproute::source(o), &o.metadata)
            }
            Kind::GrpcRoute => {
                let o = state.grpc_routes.map.get(&at)?;
                let plan = grpcroute::plan(o, namespace, d, gateways);
                (plan, grpcroute::source(o), &o.metadata)
            }
            Kind::Service => {
                let o = state.services.map.get(&at)?;
                let plan = service::plan(o, namespace, d);
                (plan, service::source(o), &o.metadata)
            }
            Kind::Gateway => {
                let o = state.gateways.map.get(&at)?;
                let plan = gateway::plan(o, namespace, d);
                (plan, gateway::source(o), &o.metadata)
            }
        };
        Some(Planned {
            plan,
            source,
            age: meta
                .creation_timestamp
                .as_ref()
                .map_or(0, |t| t.0.as_second()),
            deleting: meta.deletion_timestamp.is_some(),
        })
    }

    /// What the source `key` needs written; None when nothing. A stub that
    /// may opt in now waits for its namespace's refill; a source being
    /// deleted generates nothing (its checkers go with it).
    fn work_for(&self, state: &mut State, queue: &mut WorkQueue<Key>, key: &Key) -> Option<Work> {
        if state.stub_that_may_opt_in(key) {
            state.refills.0.insert((key.0, key.1.clone()));
            return None;
        }
        let Planned {
            mut plan,
            source,
            age,
            deleting,
        } = self.plan_of(state, key)?;
        if deleting {
            debug!(kind = ?key.0, namespace = %key.1, name = %key.2, "being deleted: nothing generated for it");
            return None;
        }
        self.fit(state, queue, key, age, &mut plan);
        for (what, why) in &plan.skipped {
            debug!(kind = ?key.0, namespace = %key.1, name = %key.2, rule = %what, reason = ?why, "rule without a checker");
        }
        let none = BTreeMap::new();
        let existing = state.generated.get(&source.uid).unwrap_or(&none);
        let apply: Vec<_> = plan
            .checkers
            .iter()
            .filter(|d| {
                existing.get(&d.name).map(|g| g.fingerprint.as_str())
                    != Some(patch::fingerprint(d, &source).as_str())
            })
            .map(|d| (d.clone(), existing.get(&d.name).map(|g| g.uid.clone())))
            .collect();
        let delete: Vec<(String, String)> = existing
            .iter()
            .filter(|(name, _)| !plan.checkers.iter().any(|d| &d.name == *name))
            .map(|(name, g)| (name.clone(), g.uid.clone()))
            .collect();
        let problems = match state.said.get(&source.uid) {
            Some(p) if *p == plan.problems => Vec::new(),
            _ => plan.problems.clone(),
        };
        state.said.insert(source.uid.clone(), plan.problems);
        state.want(key, plan.checkers.len());
        self.discovery.generated.set(state.wanted_total as i64);
        if apply.is_empty() && delete.is_empty() && problems.is_empty() {
            return None;
        }
        Some(Work {
            source,
            apply,
            delete,
            problems,
        })
    }

    /// Holds `plan` (of source `key`, created at `age`) to the cap of
    /// generated checkers per namespace: the namespace's older sources
    /// first (`budget`); a source that does not fit gets none, and a
    /// `TooManyCheckers` Warning. Sources whose fit this changes have work.
    fn fit(
        &self,
        state: &mut State,
        queue: &mut WorkQueue<Key>,
        key: &Key,
        age: i64,
        plan: &mut Plan,
    ) {
        self.learn(state, queue, &key.1);
        let wants = plan.checkers.len();
        for other in state.budget.set(key, &key.1, age, wants) {
            queue.push(other);
        }
        if state.budget.fits(key) {
            return;
        }
        let cap = state.budget.cap();
        plan.problems.push(Problem {
            reason: ingress::TOO_MANY,
            subject: "namespace".into(),
            message: format!(
                "the older routes and Services of this namespace already have their share of the {cap} checkers generated per namespace at most (the operator's --discovery-max-checkers-per-namespace): the {wants} of this {} are not made; opt older ones out, or ask the cluster admin for a larger cap",
                key.0.name()
            ),
        });
        plan.checkers.clear();
    }

    /// Learns what every source of namespace `ns` not counted yet wants, so
    /// that older sources count before a younger one is served (a new
    /// leader would else make checkers it then deletes). Once all are
    /// counted this costs nothing.
    fn learn(&self, state: &mut State, queue: &mut WorkQueue<Key>, ns: &str) {
        if state.budget.count_in(ns) >= state.count_in(ns) {
            return;
        }
        for k in state.keys_in(Some(ns)) {
            let plannable = state.ready(k.0) && !state.stub_that_may_opt_in(&k);
            if state.budget.knows(&k) || !plannable {
                continue;
            }
            let Some(p) = self.plan_of(state, &k) else {
                continue;
            };
            let wants = if p.deleting { 0 } else { p.plan.checkers.len() };
            for other in state.budget.set(&k, ns, p.age, wants) {
                queue.push(other);
            }
        }
    }

    fn take(&self, change: Change, state: &mut State, queue: &mut WorkQueue<Key>) {
        let was = [
            state.ready(Kind::Ingress),
            state.ready(Kind::HttpRoute),
            state.ready(Kind::Service),
            state.ready(Kind::GrpcRoute),
        ];
        let watch = match &change {
            Change::Ingress(_) => INGRESSES,
            Change::Route(_) => ROUTES,
            Change::GrpcRoute(_) => GRPC_ROUTES,
            Change::Gateway(_) => GATEWAYS,
            Change::Service(_) => SERVICES,
            Change::Namespace(_) => NAMESPACES,
            Change::Checker(_) => CHECKERS,
            Change::Refill(..) => REFILLS,
            Change::Failed(w, _) => w,
        };
        match change {
            Change::Ingress(ev) => on_ingress(ev, state, queue),
            Change::Route(ev) => on_route(ev, state, queue),
            Change::GrpcRoute(ev) => on_grpc_route(ev, state, queue),
            Change::Gateway(ev) => on_gateway(ev, state, queue),
            Change::Service(ev) => on_service(*ev, state, queue),
            Change::Namespace(ev) => on_namespace(ev, state, queue),
            Change::Checker(ev) => on_checker(ev, state, queue),
            Change::Refill(kind, ns, listed) => on_refill(kind, ns, listed, state, queue),
            Change::Failed(watch, e) => {
                self.watch_failures.failed(watch, &e);
                // Once per run of failures: a refused watch retries every 2 s.
                if state.failing.contains(&watch) {
                    debug!(watch, error = %e, "route discovery: watch still failing");
                } else {
                    state.failing.push(watch);
                    warn!(watch, error = %e, "route discovery: watch failed (resumed with a backoff); it needs list and watch on ingresses, httproutes, grpcroutes, gateways, services, namespaces and webcheckers");
                }
                return;
            }
        }
        if let Some(i) = state.failing.iter().position(|w| *w == watch) {
            state.failing.swap_remove(i);
            info!(watch, "route discovery: watch works again");
        }
        self.discovery.generated.set(state.wanted_total as i64);
        if state.ready(Kind::Ingress) && !was[0] {
            info!(
                ingresses = state.ingresses.map.len(),
                "route discovery: Ingresses, Namespaces and generated checkers listed"
            );
            self.discovery.active.set(1);
            enqueue_all(state, queue);
        }
        if state.ready(Kind::Service) && !was[2] {
            info!(
                services = state.services.map.len(),
                "route discovery: Services listed"
            );
            enqueue_all(state, queue);
        }
        if state.ready(Kind::HttpRoute) && !was[1] {
            info!(
                httproutes = state.routes.map.len(),
                gateways = state.gateways.map.len(),
                "route discovery: HTTPRoutes and Gateways listed"
            );
            enqueue_all(state, queue);
        }
        if state.ready(Kind::GrpcRoute) && !was[3] {
            info!(
                grpcroutes = state.grpc_routes.map.len(),
                gateways = state.gateways.map.len(),
                "route discovery: GRPCRoutes and Gateways listed"
            );
            enqueue_all(state, queue);
        }
    }
}

/// What one source wants, who owns its checkers, when it was made (seconds)
/// and whether it is being deleted.
struct Planned {
    plan: Plan,
    source: Source,
    age: i64,
    deleting: bool,
}

/// A watch's configuration: the call's timeout, lists in pages of [`LIST_PAGE`].
fn config() -> watcher::Config {
    watcher::Config::default()
        .timeout(WATCH_TIMEOUT_SECS)
        .page_size(LIST_PAGE)
}

/// Where the look for a kind of the Gateway API's routes stands.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
enum Look {
    #[default]
    NotYet,
    Absent,
    Found,
}

/// The Gateway API's routes looked for, and whether the Gateways are watched.
#[derive(Debug, Default)]
struct GatewayApi {
    http: Look,
    grpc: Look,
    gateways: bool,
}

impl GatewayApi {
    fn all_found(&self) -> bool {
        self.http == Look::Found && self.grpc == Look::Found
    }
}

/// Maps a watch's items to [`Change`]s, its errors named by `watch`.
fn tagged<T>(
    watch: &'static str,
    f: fn(Event<T>) -> Change,
) -> impl FnMut(Result<Event<T>, watcher::Error>) -> Change {
    move |r| match r {
        Ok(ev) => f(ev),
        Err(e) => Change::Failed(watch, e),
    }
}
