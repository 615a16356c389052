//! What the cluster tells the forgery guard (docs/security.md, "Addresses a
//! checker can reach"): where the API server listens, the Nodes' kubelet
//! ports, and which namespaces are closed to private networks. Each source is
//! a watch that keeps its part of [`ClusterAddresses`] fresh.
//!
//! The API server's address as this operator reaches it (its client
//! configuration) is denied from the start and needs no permission. The
//! `default/kubernetes` Service, its EndpointSlices and the Nodes are
//! optional: without them (no permission, a cluster without Nodes) the
//! operator runs, says so in its log and in `webchecker_address_discovery_up`.
//! The restricted namespaces are not optional: a restriction that is silently
//! not applied is a hole, so the operator does not start probing before it
//! has listed them.

use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use tokio::sync::watch;
use tokio::time::Instant;
use tracing::{debug, info, warn};

use crate::error::Error;
use crate::kubeio::client::{WATCH_TIMEOUT_SECS, WatchBackoff};
use crate::observe::metrics::WatchMetrics;
use crate::observe::metrics::family::{Family, gauge_vec};
use crate::probe::{ClusterAddresses, KUBELET_PORTS};

/// How long start-up waits for each source's first list (or first error).
pub const SYNC_DEADLINE: Duration = Duration::from_secs(30);

/// A source counts as healthy again when its watch went this long without
/// an error (a watch that recovers says nothing; a failing one retries
/// within 3 s, see [`WatchBackoff`]).
const QUIET: Duration = Duration::from_secs(30);

/// The sources, as named in logs and in the `source` label.
const SERVICE: &str = "service";
const ENDPOINTSLICES: &str = "endpointslices";
const NODES: &str = "nodes";
const NAMESPACES: &str = "namespaces";

const ADDRESS_DISCOVERY_UP: Family = (
    "webchecker_address_discovery_up",
    "1 while the forgery guard knows the addresses of this source (the API server's Service and EndpointSlices, Nodes, restricted namespaces); 0 when it was never listed or its watch keeps failing",
);

/// The forgery guard's sources: whether each is known, and its watch's
/// failures.
pub struct GuardMetrics {
    address_discovery_up: prometheus::IntGaugeVec,
    watches: Arc<WatchMetrics>,
}

impl GuardMetrics {
    pub fn register(r: &prometheus::Registry, watches: Arc<WatchMetrics>) -> Self {
        GuardMetrics {
            address_discovery_up: gauge_vec(r, ADDRESS_DISCOVERY_UP, &["source"]),
            watches,
        }
    }
}

/// Starts the watches and returns once each source was listed or failed once
/// (waiting at most [`SYNC_DEADLINE`]) and the restricted namespaces were
/// listed. `restricted` is the label selector of `--restricted-namespaces`
/// (empty: none); a final refusal (403, a bad selector) fails start-up, other
/// errors are retried for as long as it takes, as joining does.
pub async fn start(
    client: Client,
    cluster_url: &http::Uri,
    restricted: &str,
    metrics: Arc<GuardMetrics>,
) -> Result<watch::Receiver<ClusterAddresses>, Error> {
    let own = own_api_addresses(cluster_url).await;
    info!(addresses = ?own, "the API server as this operator reaches it is denied to probes");
    let (tx, rx) = watch::channel(ClusterAddresses {
        api_endpoints: own.iter().copied().collect(),
        ..Default::default()
    });
    let tx = Arc::new(tx);
    let mut waits = Vec::new();

    let (health, progress) = SourceHealth::new(
        SERVICE,
        &metrics,
        "get, list and watch on Service default/kubernetes: its ClusterIP is reachable by probes until then",
    );
    waits.push((SERVICE, progress));
    let api: Api<Service> = Api::namespaced(client.clone(), "default");
    let cfg = watch_config().fields("metadata.name=kubernetes");
    tokio::spawn(follow(api, cfg, health, service_source(tx.clone())));

    let (health, progress) = SourceHealth::new(
        ENDPOINTSLICES,
        &metrics,
        "list and watch on endpointslices.discovery.k8s.io in namespace default: the API server's endpoints are reachable by probes until then",
    );
    waits.push((ENDPOINTSLICES, progress));
    let api: Api<EndpointSlice> = Api::namespaced(client.clone(), "default");
    let cfg = watch_config().labels("kubernetes.io/service-name=kubernetes");
    tokio::spawn(follow(api, cfg, health, slices_source(tx.clone(), own)));

    let (health, progress) = SourceHealth::new(
        NODES,
        &metrics,
        "list and watch on nodes: kubelet ports other than 10250 and 10255 (a Node's own daemonEndpoints port) are reachable by probes until then",
    );
    waits.push((NODES, progress));
    let api: Api<Node> = Api::all(client.clone());
    tokio::spawn(follow(
        api,
        watch_config(),
        health,
        nodes_source(tx.clone()),
    ));

    let mut namespaces = None;
    if !restricted.is_empty() {
        let (health, progress) = SourceHealth::new(
            NAMESPACES,
            &metrics,
            "list and watch on namespaces: no namespace is restricted until then",
        );
        namespaces = Some(progress);
        let api: Api<Namespace> = Api::all(client);
        let cfg = watch_config().labels(restricted);
        tokio::spawn(follow(api, cfg, health, namespaces_source(tx.clone())));
    }

    let deadline = Instant::now() + SYNC_DEADLINE;
    wait_listed(waits, deadline).await;
    if let Some(progress) = namespaces {
        wait_restricted(progress, deadline, restricted, &rx).await?;
    }
    Ok(rx)
}

/// Waits until each source was listed or failed once, until `deadline`.
async fn wait_listed(waits: Vec<(&'static str, watch::Receiver<Progress>)>, deadline: Instant) {
    for (source, mut progress) in waits {
        // `.is_err()` drops the borrow the wait returns at once: it would
        // hold the source's progress locked.
        let timed_out = tokio::time::timeout_at(
            deadline,
            progress.wait_for(|p| p.listed || p.error.is_some()),
        )
        .await
        .is_err();
        if timed_out {
            warn!(
                source,
                "not listed within {SYNC_DEADLINE:?}; probing starts without it"
            );
        }
    }
}

/// Waits for the restricted namespaces as long as it takes (like joining),
/// unless the answer is final: then start-up fails.
async fn wait_restricted(
    mut progress: watch::Receiver<Progress>,
    deadline: Instant,
    restricted: &str,
    rx: &watch::Receiver<ClusterAddresses>,
) -> Result<(), Error> {
    // Like joining: wait as long as it takes, unless the answer is final.
    let done = |p: &Progress| p.listed || p.refused.is_some();
    let timed_out = tokio::time::timeout_at(deadline, progress.wait_for(done))
        .await
        .is_err();
    if timed_out {
        warn!(
            selector = restricted,
            error = progress.borrow().error.as_deref().unwrap_or("no answer"),
            "the namespaces of --restricted-namespaces are not listed yet; probing waits for them"
        );
        let _ = progress.wait_for(done).await.is_err();
    }
    let p = progress.borrow().clone();
    if !p.listed {
        let why = p.refused.or(p.error).unwrap_or_default();
        return Err(Error::Config(format!(
            "cannot list the namespaces of --restricted-namespaces={restricted:?}: {why}"
        )));
    }
    let n = rx.borrow().restricted_namespaces.len();
    info!(
        selector = restricted,
        namespaces = n,
        "namespaces closed to private networks listed"
    );
    Ok(())
}

fn watch_config() -> watcher::Config {
    watcher::Config::default().timeout(WATCH_TIMEOUT_SECS)
}

/// The API server's addresses from the client configuration: the URL's
/// address, or what its name resolves to now.
async fn own_api_addresses(url: &http::Uri) -> Vec<SocketAddr> {
    let Some(host) = url.host() else {
        return Vec::new();
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let port = url
        .port_u16()
        .unwrap_or(if url.scheme_str() == Some("http") {
            80
        } else {
            443
        });
    if let Ok(ip) = host.parse::<IpAddr>() {
        return vec![SocketAddr::new(ip, port)];
    }
    match tokio::time::timeout(
        Duration::from_secs(5),
        tokio::net::lookup_host((host, port)),
    )
    .await
    {
        Ok(Ok(addrs)) => addrs.collect(),
        Ok(Err(e)) => {
            warn!(host, error = %e, "cannot resolve the API server's name; its Service and EndpointSlices still count");
            Vec::new()
        }
        Err(_) => {
            warn!(
                host,
                "resolving the API server's name timed out; its Service and EndpointSlices still count"
            );
            Vec::new()
        }
    }
}

/// What start-up waits for.
#[derive(Clone, Debug, Default)]
struct Progress {
    listed: bool,
    /// The last error.
    error: Option<String>,
    /// An answer that retrying will not change (403, 400 for a bad selector...).
    refused: Option<String>,
}

/// One source's health: its metric, its log lines and start-up's wait.
struct SourceHealth {
    source: &'static str,
    /// What to grant, and what goes unprotected meanwhile.
    hint: &'static str,
    metrics: Arc<GuardMetrics>,
    progress: watch::Sender<Progress>,
    listed: bool,
    failing: bool,
    last_error: Option<Instant>,
}

impl SourceHealth {
    fn new(
        source: &'static str,
        metrics: &Arc<GuardMetrics>,
        hint: &'static str,
    ) -> (Self, watch::Receiver<Progress>) {
        metrics
            .address_discovery_up
            .with_label_values(&[source])
            .set(0);
        let (progress, rx) = watch::channel(Progress::default());
        let h = SourceHealth {
            source,
            hint,
            metrics: metrics.clone(),
            progress,
            listed: false,
            failing: false,
            last_error: None,
        };
        (h, rx)
    }

    fn set_up(&self, up: bool) {
        self.metrics
            .address_discovery_up
            .with_label_values(&[self.source])
            .set(up as i64);
    }

    /// The watch delivered: the addresses of this source are current.
    fn delivered(&mut self, listed: bool) {
        if listed && !self.listed {
            self.listed = true;
            self.progress.send_modify(|p| p.listed = true);
        }
        if self.failing || listed {
            self.recovered();
        }
    }

    fn recovered(&mut self) {
        if self.failing {
            info!(
                source = self.source,
                "address discovery works again; the forgery guard uses current addresses"
            );
        }
        self.failing = false;
        self.last_error = None;
        self.set_up(self.listed);
    }

    fn failed(&mut self, e: &watcher::Error) {
        self.metrics.watches.failed(self.source, e);
        let code = watch_error_code(e);
        let refused = code.is_some_and(|c| (400..500).contains(&c) && c != 410 && c != 429);
        if !self.failing {
            warn!(
                source = self.source,
                error = %e,
                "address discovery failing; it needs {}",
                self.hint
            );
        } else {
            debug!(source = self.source, error = %e, "address discovery still failing");
        }
        self.failing = true;
        self.last_error = Some(Instant::now());
        self.set_up(false);
        let text = e.to_string();
        self.progress.send_modify(|p| {
            if refused {
                p.refused = Some(text.clone());
            }
            p.error = Some(text);
        });
    }

    /// When a failing watch has been quiet long enough to count as healthy.
    fn quiet_at(&self) -> Option<Instant> {
        self.last_error
            .filter(|_| self.failing && self.listed)
            .map(|t| t + QUIET)
    }
}

fn watch_error_code(e: &watcher::Error) -> Option<u16> {
    use watcher::Error as W;
    match e {
        W::WatchError(s) => Some(s.code),
        W::WatchStartFailed(k) | W::InitialListFailed(k) | W::WatchFailed(k) => {
            crate::error::api_code(k)
        }
        _ => None,
    }
}

/// Runs one watch, handing its events to `source` and its health to `health`.
async fn follow<K>(
    api: Api<K>,
    cfg: watcher::Config,
    mut health: SourceHealth,
    mut source: impl FnMut(Event<K>) + Send,
) where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    let mut stream = watcher::watcher(api, cfg)
        .backoff(WatchBackoff::default())
        .boxed();
    loop {
        let quiet = health.quiet_at();
        let ev = tokio::select! {
            ev = stream.next() => match ev {
                Some(ev) => ev,
                None => return,
            },
            _ = tokio::time::sleep_until(quiet.unwrap_or_else(Instant::now)), if quiet.is_some() => {
                health.recovered();
                continue;
            }
        };
        match ev {
            Ok(ev) => {
                let listed = matches!(ev, Event::InitDone);
                let delivered = !matches!(ev, Event::Init | Event::InitApply(_));
                source(ev);
                if delivered {
                    health.delivered(listed);
                }
            }
            Err(e) => health.failed(&e),
        }
    }
}

/// The ClusterIPs of `default/kubernetes`.
fn service_source(tx: Arc<watch::Sender<ClusterAddresses>>) -> impl FnMut(Event<Service>) + Send {
    let mut listing: Option<HashSet<IpAddr>> = None;
    move |ev| {
        let ips = match ev {
            Event::Init => {
                listing = Some(HashSet::new());
                return;
            }
            Event::InitApply(s) => {
                listing.get_or_insert_default().extend(cluster_ips(&s));
                return;
            }
            Event::InitDone => listing.take().unwrap_or_default(),
            Event::Apply(s) => cluster_ips(&s).collect(),
            Event::Delete(_) => HashSet::new(),
        };
        tx.send_if_modified(|c| replace(&mut c.api_service_ips, ips));
    }
}

fn cluster_ips(s: &Service) -> impl Iterator<Item = IpAddr> + '_ {
    let spec = s.spec.as_ref();
    spec.and_then(|s| s.cluster_ip.as_ref())
        .into_iter()
        .chain(
            spec.and_then(|s| s.cluster_ips.as_ref())
                .into_iter()
                .flatten(),
        )
        .filter_map(|ip| ip.parse().ok())
}

/// The API server's endpoints (address and port) from the EndpointSlices of
/// `default/kubernetes`, plus the operator's own way to it.
fn slices_source(
    tx: Arc<watch::Sender<ClusterAddresses>>,
    own: Vec<SocketAddr>,
) -> impl FnMut(Event<EndpointSlice>) + Send {
    let mut slices: HashMap<String, Vec<SocketAddr>> = HashMap::new();
    let mut listing: Option<HashMap<String, Vec<SocketAddr>>> = None;
    move |ev| {
        match ev {
            Event::Init => {
                listing = Some(HashMap::new());
                return;
            }
            Event::InitApply(s) => {
                listing
                    .get_or_insert_default()
                    .insert(s.name_any(), slice_endpoints(&s));
                return;
            }
            Event::InitDone => slices = listing.take().unwrap_or_default(),
            Event::Apply(s) => {
                slices.insert(s.name_any(), slice_endpoints(&s));
            }
            Event::Delete(s) => {
                slices.remove(&s.name_any());
            }
        }
        let all: HashSet<SocketAddr> = own
            .iter()
            .copied()
            .chain(slices.values().flatten().copied())
            .collect();
        tx.send_if_modified(|c| replace(&mut c.api_endpoints, all));
    }
}

fn slice_endpoints(s: &EndpointSlice) -> Vec<SocketAddr> {
    let ports: Vec<u16> = s
        .ports
        .iter()
        .flatten()
        .filter_map(|p| p.port.and_then(|p| u16::try_from(p).ok()))
        .collect();
    let mut out = Vec::new();
    for e in s.endpoints.iter().flatten() {
        for a in &e.addresses {
            if let Ok(ip) = a.parse::<IpAddr>() {
                out.extend(ports.iter().map(|p| SocketAddr::new(ip, *p)));
            }
        }
    }
    out
}

/// The kubelet ports Nodes report beyond the defaults, denied on every
/// address (a kubelet listens on interfaces its Node does not list).
fn nodes_source(tx: Arc<watch::Sender<ClusterAddresses>>) -> impl FnMut(Event<Node>) + Send {
    let mut nodes: HashMap<String, Option<u16>> = HashMap::new();
    let mut listing: Option<HashMap<String, Option<u16>>> = None;
    move |ev| {
        let changed = match ev {
            Event::Init => {
                listing = Some(HashMap::new());
                false
            }
            Event::InitApply(n) => {
                listing
                    .get_or_insert_default()
                    .insert(n.name_any(), kubelet_port(&n));
                false
            }
            Event::InitDone => {
                nodes = listing.take().unwrap_or_default();
                true
            }
            // Nodes report their status often; rebuild only on a change.
            Event::Apply(n) => {
                let p = kubelet_port(&n);
                nodes.insert(n.name_any(), p) != Some(p)
            }
            Event::Delete(n) => nodes.remove(&n.name_any()).is_some(),
        };
        if changed {
            let ports: HashSet<u16> = nodes.values().flatten().copied().collect();
            tx.send_if_modified(|c| replace(&mut c.kubelet_ports, ports));
        }
    }
}

/// A Node's own kubelet port, when it is not one of the defaults.
fn kubelet_port(n: &Node) -> Option<u16> {
    n.status
        .as_ref()
        .and_then(|s| s.daemon_endpoints.as_ref())
        .and_then(|d| d.kubelet_endpoint.as_ref())
        .and_then(|k| u16::try_from(k.port).ok())
        .filter(|p| *p != 0 && !KUBELET_PORTS.contains(p))
}

/// The namespaces matching `--restricted-namespaces` (the watch's label
/// selector: a namespace whose label changes so that it no longer matches
/// comes as a deletion).
fn namespaces_source(
    tx: Arc<watch::Sender<ClusterAddresses>>,
) -> impl FnMut(Event<Namespace>) + Send {
    let mut listing: Option<HashSet<String>> = None;
    move |ev| match ev {
        Event::Init => listing = Some(HashSet::new()),
        Event::InitApply(n) => {
            listing.get_or_insert_default().insert(n.name_any());
        }
        Event::InitDone => {
            let all = listing.take().unwrap_or_default();
            tx.send_if_modified(|c| replace(&mut c.restricted_namespaces, all));
        }
        Event::Apply(n) => {
            let name = n.name_any();
            info!(namespace = %name, "namespace closed to private networks");
            tx.send_if_modified(|c| c.restricted_namespaces.insert(name));
        }
        Event::Delete(n) => {
            let name = n.name_any();
            info!(namespace = %name, "namespace no longer closed to private networks");
            tx.send_if_modified(|c| c.restricted_namespaces.remove(&name));
        }
    }
}

/// Replaces `slot` with `new`; true when that changed it.
fn replace<T: PartialEq>(slot: &mut T, new: T) -> bool {
    if *slot == new {
        false
    } else {
        *slot = new;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        DaemonEndpoint, NodeAddress, NodeDaemonEndpoints, NodeStatus, ServiceSpec,
    };
    use k8s_openapi::api::discovery::v1::{Endpoint, EndpointPort};
    use kube::api::ObjectMeta;

    fn meta(name: &str) -> ObjectMeta {
        ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        }
    }

    fn node(name: &str, addrs: &[&str], port: i32) -> Node {
        Node {
            metadata: meta(name),
            status: Some(NodeStatus {
                addresses: Some(
                    addrs
                        .iter()
                        .map(|a| NodeAddress {
                            address: a.to_string(),
                            type_: "InternalIP".into(),
                        })
                        .collect(),
                ),
                daemon_endpoints: Some(NodeDaemonEndpoints {
                    kubelet_endpoint: Some(DaemonEndpoint { port }),
                }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn nodes_become_kubelet_ports() {
        let (tx, rx) = watch::channel(ClusterAddresses::default());
        let mut src = nodes_source(Arc::new(tx));
        let ports = |rx: &watch::Receiver<ClusterAddresses>| {
            let mut p: Vec<u16> = rx.borrow().kubelet_ports.iter().copied().collect();
            p.sort_unstable();
            p
        };
        src(Event::Init);
        src(Event::InitApply(node("a", &["10.0.0.5", "node-a"], 31000)));
        assert!(ports(&rx).is_empty(), "nothing before InitDone");
        src(Event::InitDone);
        assert_eq!(ports(&rx), vec![31000]);
        // The defaults are always denied (crate::probe::policy); not repeated.
        src(Event::Apply(node("b", &["10.0.0.6"], 10250)));
        src(Event::Apply(node("c", &["10.0.0.7"], 32000)));
        assert_eq!(ports(&rx), vec![31000, 32000]);
        src(Event::Delete(node("a", &[], 0)));
        assert_eq!(ports(&rx), vec![32000]);
        // A re-list replaces everything.
        src(Event::Init);
        src(Event::InitDone);
        assert!(ports(&rx).is_empty());
    }

    #[test]
    fn service_and_slices_become_api_addresses() {
        let (tx, rx) = watch::channel(ClusterAddresses::default());
        let tx = Arc::new(tx);
        let own: SocketAddr = "127.0.0.1:6443".parse().unwrap();
        let mut svc = service_source(tx.clone());
        let mut slices = slices_source(tx, vec![own]);
        svc(Event::Apply(Service {
            metadata: meta("kubernetes"),
            spec: Some(ServiceSpec {
                cluster_ip: Some("10.96.0.1".into()),
                cluster_ips: Some(vec!["10.96.0.1".into(), "fd00::1".into()]),
                ..Default::default()
            }),
            ..Default::default()
        }));
        assert_eq!(rx.borrow().api_service_ips.len(), 2);
        slices(Event::Apply(EndpointSlice {
            metadata: meta("kubernetes"),
            address_type: "IPv4".into(),
            endpoints: vec![Endpoint {
                addresses: vec!["192.0.2.10".into(), "192.0.2.11".into()],
                ..Default::default()
            }]
            .into(),
            ports: Some(vec![EndpointPort {
                port: Some(6443),
                ..Default::default()
            }]),
        }));
        let want: HashSet<SocketAddr> = ["127.0.0.1:6443", "192.0.2.10:6443", "192.0.2.11:6443"]
            .iter()
            .map(|a| a.parse().unwrap())
            .collect();
        assert_eq!(rx.borrow().api_endpoints, want);
        slices(Event::Delete(EndpointSlice {
            metadata: meta("kubernetes"),
            ..Default::default()
        }));
        assert_eq!(rx.borrow().api_endpoints, HashSet::from([own]));
        svc(Event::Delete(Service::default()));
        assert!(rx.borrow().api_service_ips.is_empty());
    }

    #[test]
    fn restricted_namespaces_follow_the_watch() {
        let (tx, rx) = watch::channel(ClusterAddresses::default());
        let mut src = namespaces_source(Arc::new(tx));
        let ns = |n: &str| Namespace {
            metadata: meta(n),
            ..Default::default()
        };
        src(Event::Init);
        src(Event::InitApply(ns("a")));
        src(Event::InitDone);
        src(Event::Apply(ns("b")));
        src(Event::Delete(ns("a")));
        assert_eq!(
            rx.borrow().restricted_namespaces,
            HashSet::from(["b".to_string()])
        );
    }
}
