//! Prometheus metrics. The catalogue lives in docs/metrics.md.
//!
//! Per-checker series exist only on the replica that owns the checker: the
//! engine calls [`Metrics::forget_checker`] the moment it stops owning one, so a
//! sum across replicas never counts a checker twice.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use prometheus::{
    Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry,
    TextEncoder,
};

use crate::probe::{GrpcFacts, Outcome, Reason, TlsFacts};

mod checkers;
mod exposition;
mod grpc;
mod info;
mod native;
pub use exposition::{Format, negotiate};
pub use info::{CheckerInfo, LabelAllowlist, parse_label_allowlist};

const PROBE_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];
const LAG_BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];
const ASSIGN_BUCKETS: &[f64] = &[
    0.01, 0.05, 0.1, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 30.0,
];

/// Probe reasons in the order of the per-checker counters.
const ALL_REASONS: [Reason; 18] = Reason::ALL;

/// Per-checker series of one owned checker. Kept as plain numbers and rendered
/// straight to the text format: the prometheus crate's label-set maps cost
/// about 6.5 KiB per checker (a heap profile at 1,000 checkers), this costs a
/// few hundred bytes, and rendering needs no intermediate protobuf copies.
#[derive(Clone, Default)]
struct CheckerSeries {
    /// Set by a probe; a checker that was never probed (suspended, invalid)
    /// exports only `webchecker_up`.
    probed: bool,
    up: bool,
    last_success: bool,
    last_code: u16,
    last_success_ts: f64,
    /// Non-cumulative counts per bucket of [`PROBE_BUCKETS`] (+Inf last);
    /// kept also without classic buckets: they add up to the count.
    buckets: [u64; PROBE_BUCKETS.len() + 1],
    /// With `--native-histograms`: the same durations in native buckets.
    native: native::NativeHistogram,
    duration_sum: f64,
    /// Probes per reason, indexed like [`ALL_REASONS`].
    probes: [u64; ALL_REASONS.len()],
    phases: [f64; PHASES.len()],
    cert_expiry: Option<i64>,
    /// The last TLS handshake: version, cipher, the chain (shared with the
    /// prober's cache, so a copy costs a reference count).
    tls: Option<TlsFacts>,
    /// Of the last response: 10, 11 or 20; 0 when none came.
    http_version: u8,
    /// The last gRPC health answer.
    grpc: Option<GrpcFacts>,
    /// `webchecker_checker_info` (shared with the engine's entry).
    info: Option<Arc<CheckerInfo>>,
    /// With spec.locations: each zone's series, in the order of the last round.
    zones: Vec<ZoneSeries>,
    /// With spec.locations: the zones asked for (`webchecker_zones_asked`).
    zones_asked: Option<u32>,
}

/// One zone's series of a checker with spec.locations.
#[derive(Clone, Default)]
struct ZoneSeries {
    zone: Arc<str>,
    /// `None` while its replica gives no probe result.
    last: Option<(bool, f64)>,
    successes: u64,
    failures: u64,
}

pub use webchecker_core::checker::ZoneSample;

const PHASES: [&str; 5] = ["resolve", "connect", "tls", "processing", "transfer"];

type CheckerMap = BTreeMap<Arc<str>, BTreeMap<Arc<str>, CheckerSeries>>;

/// What the per-checker duration histogram carries (docs/metrics.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HistogramOptions {
    /// `--per-checker-histogram`: the histogram at all.
    pub per_checker: bool,
    /// `--native-histograms`: native buckets, exposed in the protobuf format.
    pub native: bool,
    /// `--classic-histograms`: keep the classic buckets beside native ones
    /// (without native ones they are always kept).
    pub keep_classic: bool,
}

impl HistogramOptions {
    pub fn classic(self) -> bool {
        self.keep_classic || !self.native
    }
}

impl Default for HistogramOptions {
    fn default() -> Self {
        HistogramOptions {
            per_checker: true,
            native: false,
            keep_classic: true,
        }
    }
}

pub struct Metrics {
    pub registry: Registry,
    histograms: HistogramOptions,
    /// Checker labels copied to `webchecker_checker_info`.
    label_allowlist: Arc<LabelAllowlist>,
    /// namespace -> name -> series. Locked only for a lookup or a copy, never
    /// while rendering text.
    checkers: Mutex<CheckerMap>,

    pub owned: IntGauge,
    pub leader: IntGauge,
    pub ring_members: IntGauge,
    pub orphaned_checkers: IntGauge,
    pub handover_window: IntGauge,
    pub handover_duration: Histogram,
    pub schedule_lag: Histogram,
    pub missed_intervals: IntCounter,
    pub inflight: IntGauge,
    pub pool_size: IntGauge,
    pub status_writes: IntCounterVec,
    pub status_write_delay: Histogram,
    pub events: IntCounterVec,
    pub events_dropped: IntCounter,
    pub moves: IntCounterVec,
    pub drains: IntCounter,
    pub assignment_latency: Histogram,
    pub first_probe_delay: Histogram,
    pub lease_renew_failures: IntCounterVec,
    pub lease_renew_duration: Histogram,
    pub self_fences: IntCounterVec,
    pub peer_proofs: IntCounterVec,
    pub api_reachable: IntGauge,
    pub watch_restarts: IntCounterVec,
    pub watch_expired: IntCounterVec,
    pub address_discovery_up: IntGaugeVec,
    /// Owner side: failures that would have turned a checker Ready=False,
    /// by what the confirmer said.
    pub confirmations: IntCounterVec,
    /// Owner side: its failures another replica's probe refuted, by this
    /// replica's zone.
    pub unconfirmed_failures: IntCounterVec,
    /// Confirmer side: asks served, by result.
    pub confirm_requests: IntCounterVec,
    /// Owner side: 1 while it could not get a token to ask with.
    pub confirm_credentials_missing: IntGauge,
    /// Connections closed at once for a listener's limits, by listener.
    pub connections_refused: IntCounterVec,
    /// This replica's place: zone and node; always 1.
    pub replica_place: IntGaugeVec,
}

fn reg<T: prometheus::core::Collector + Clone + 'static>(r: &Registry, c: T) -> T {
    r.register(Box::new(c.clone()))
        .expect("metric names are unique");
    c
}

/// A metric family's name and help.
type Family = (&'static str, &'static str);

const BUILD_INFO: Family = (
    "webchecker_build_info",
    "Build and replica identity; always 1",
);
const OWNED: Family = (
    "webchecker_owned_checkers",
    "Checkers this replica owns and probes",
);
const LEADER: Family = ("webchecker_leader", "1 on the sharder replica");
const RING_MEMBERS: Family = ("webchecker_ring_members", "Live members this replica sees");
const ORPHANED_CHECKERS: Family = (
    "webchecker_orphaned_checkers",
    "Checkers the sharder has seen without a valid, live owner for longer than a lease, or draining for longer than six (leader only)",
);
const HANDOVER_WINDOW: Family = (
    "webchecker_handover_window",
    "Handovers (drains) the sharder lets be in progress at once, sized from its writes' answer times (leader only)",
);
const HANDOVER_DURATION: Family = (
    "webchecker_handover_duration_seconds",
    "From a drain to the old owner's handover, as the sharder's watch sees them (leader only)",
);
const SCHEDULE_LAG: Family = (
    "webchecker_schedule_lag_seconds",
    "Probe start minus due time",
);
const MISSED_INTERVALS: Family = (
    "webchecker_missed_intervals_total",
    "Intervals skipped because the previous probe or the pool was late",
);
const INFLIGHT: Family = ("webchecker_inflight_probes", "Probes running now");
const POOL_SIZE: Family = ("webchecker_worker_pool_size", "Probes in flight at most");
const STATUS_WRITES: Family = ("webchecker_status_writes_total", "Status writes by result");
const EVENTS: Family = ("webchecker_events_total", "Kubernetes Events emitted");
const EVENTS_DROPPED: Family = (
    "webchecker_events_dropped_total",
    "Kubernetes Events not emitted because the queue to the API server was full",
);
const MOVES: Family = (
    "webchecker_moves_total",
    "Assignments written by the sharder, by cause",
);
const DRAINS: Family = (
    "webchecker_drains_total",
    "Drain handshakes this replica completed as the old owner",
);
const ASSIGNMENT_LATENCY: Family = (
    "webchecker_assignment_latency_seconds",
    "Sharder: checker seen unassigned to assignment written",
);
const STATUS_WRITE_DELAY: Family = (
    "webchecker_status_write_delay_seconds",
    "Status writes that landed: from the probe result that changed the status to the API server's answer (how late a change shows in kubectl)",
);
const FIRST_PROBE_DELAY: Family = (
    "webchecker_first_probe_delay_seconds",
    "Owner: a new checker delivered by the watch to its first probe's start",
);
const LEASE_RENEW_DURATION: Family = (
    "webchecker_lease_renew_duration_seconds",
    "Membership Lease renewals that succeeded: from the attempt's start to its answer being acted on",
);
const LEASE_RENEW_FAILURES: Family = (
    "webchecker_lease_renew_failures_total",
    "Failed Lease renewals",
);
const SELF_FENCES: Family = (
    "webchecker_self_fences_total",
    "Times this replica dropped its checkers because it lost its Lease or paused",
);
const PEER_PROOFS: Family = (
    "webchecker_peer_evidence_proofs_total",
    "Members proven gone at once because their address refused connections (result=proven), or whose evidence lied (result=refuted: the member renewed)",
);
const API_REACHABLE: Family = (
    "webchecker_api_reachable",
    "0 while Lease renewals get no answer",
);
const WATCH_RESTARTS: Family = (
    "webchecker_watch_restarts_total",
    "Watch errors and relists",
);
const WATCH_EXPIRED: Family = (
    "webchecker_watch_expired_total",
    "Watches the API server ended with 410 Gone (resourceVersion compacted), followed by a re-list",
);
const ADDRESS_DISCOVERY_UP: Family = (
    "webchecker_address_discovery_up",
    "1 while the forgery guard knows the addresses of this source (the API server's Service and EndpointSlices, Nodes, restricted namespaces); 0 when it was never listed or its watch keeps failing",
);

const CONFIRMATIONS: Family = (
    "webchecker_confirmations_total",
    "Failures of this replica's probes that would have turned a checker Ready=False, by what another replica's probe said: confirmed (it failed too), refuted (it succeeded: Ready stays True, Degraded=True), unanswered (no other replica answered: Ready keeps its verdict, Degraded=True), none (no other replica, or confirmFailures: false)",
);
const UNCONFIRMED_FAILURES: Family = (
    "webchecker_unconfirmed_failures_total",
    "Failures of this replica's probes that another replica's probe refuted (the target answered it), by this replica's zone: a sign of trouble on this replica's network path",
);
const CONFIRM_REQUESTS: Family = (
    "webchecker_confirm_requests_total",
    "Asks to confirm a failure or to probe from this zone that this replica served, by result: probed, unauthenticated (not a member's credentials, or not from its address), refused (the asker does not own the checker, it changed, is unknown or cannot be probed here), busy (no share of its namespace's or of the replica's work came free in time), abandoned (the owner stopped waiting before the answer: the work was dropped)",
);
const CONFIRM_CREDENTIALS_MISSING: Family = (
    "webchecker_confirm_credentials_missing",
    "1 while this replica could not get credentials to ask other replicas to confirm its failures and to probe from their zones (its ServiceAccount, its pod or the permission to request them is missing; its log says which): its failures then go unconfirmed; 0 otherwise",
);
const CONNECTIONS_REFUSED: Family = (
    "webchecker_http_connections_refused_total",
    "Connections closed at once because their listener (main: /metrics /healthz /readyz; confirm: asks of other replicas) had its connections in all or from that peer address open",
);
const REPLICA_PLACE: Family = (
    "webchecker_replica_place",
    "Where this replica runs (zone and node, as advertised in its member Lease); always 1",
);

fn gauge(r: &Registry, (name, help): Family) -> IntGauge {
    reg(r, IntGauge::new(name, help).expect("a valid metric"))
}

fn counter(r: &Registry, (name, help): Family) -> IntCounter {
    reg(r, IntCounter::new(name, help).expect("a valid metric"))
}

fn counter_vec(r: &Registry, (name, help): Family, labels: &[&str]) -> IntCounterVec {
    reg(
        r,
        IntCounterVec::new(Opts::new(name, help), labels).expect("a valid metric"),
    )
}

fn gauge_vec(r: &Registry, (name, help): Family, labels: &[&str]) -> IntGaugeVec {
    reg(
        r,
        IntGaugeVec::new(Opts::new(name, help), labels).expect("a valid metric"),
    )
}

fn histogram(r: &Registry, (name, help): Family, buckets: Vec<f64>) -> Histogram {
    let opts = HistogramOpts::new(name, help).buckets(buckets);
    reg(r, Histogram::with_opts(opts).expect("a valid metric"))
}

impl Metrics {
    /// Counts a failed watch (`watch`: checkers, leases, sharder), and
    /// separately when the API server said its resourceVersion is gone (410).
    pub fn watch_failed(&self, watch: &str, e: &kube::runtime::watcher::Error) {
        use kube::runtime::watcher::Error as W;
        self.watch_restarts.with_label_values(&[watch]).inc();
        let gone = match e {
            W::WatchError(s) => s.code == 410,
            W::WatchStartFailed(k) | W::InitialListFailed(k) | W::WatchFailed(k) => {
                crate::error::api_code(k) == Some(410)
            }
            _ => false,
        };
        if gone {
            self.watch_expired.with_label_values(&[watch]).inc();
        }
    }

    /// The checker labels `webchecker_checker_info` copies
    /// (`--metric-labels-allowlist`); none by default.
    pub fn with_label_allowlist(mut self, list: LabelAllowlist) -> Self {
        self.label_allowlist = Arc::new(list);
        self
    }

    pub fn new(identity: &str, per_checker_histogram: bool) -> Self {
        Self::with_histograms(
            identity,
            HistogramOptions {
                per_checker: per_checker_histogram,
                ..Default::default()
            },
        )
    }

    pub fn with_histograms(identity: &str, histograms: HistogramOptions) -> Self {
        let r = Registry::new();
        let build = gauge_vec(&r, BUILD_INFO, &["version", "replica"]);
        build
            .with_label_values(&[env!("CARGO_PKG_VERSION"), identity])
            .set(1);
        #[cfg(target_os = "linux")]
        r.register(Box::new(
            prometheus::process_collector::ProcessCollector::for_self(),
        ))
        .expect("process collector registers once");
        let m = Metrics {
            histograms,
            label_allowlist: Arc::default(),
            checkers: Mutex::new(BTreeMap::new()),
            owned: gauge(&r, OWNED),
            leader: gauge(&r, LEADER),
            ring_members: gauge(&r, RING_MEMBERS),
            orphaned_checkers: gauge(&r, ORPHANED_CHECKERS),
            handover_window: gauge(&r, HANDOVER_WINDOW),
            handover_duration: histogram(&r, HANDOVER_DURATION, ASSIGN_BUCKETS.to_vec()),
            schedule_lag: histogram(&r, SCHEDULE_LAG, LAG_BUCKETS.to_vec()),
            missed_intervals: counter(&r, MISSED_INTERVALS),
            inflight: gauge(&r, INFLIGHT),
            pool_size: gauge(&r, POOL_SIZE),
            status_writes: counter_vec(&r, STATUS_WRITES, &["result"]),
            events: counter_vec(&r, EVENTS, &["type", "reason"]),
            events_dropped: counter(&r, EVENTS_DROPPED),
            moves: counter_vec(&r, MOVES, &["cause"]),
            drains: counter(&r, DRAINS),
            assignment_latency: histogram(&r, ASSIGNMENT_LATENCY, ASSIGN_BUCKETS.to_vec()),
            first_probe_delay: histogram(&r, FIRST_PROBE_DELAY, ASSIGN_BUCKETS.to_vec()),
            status_write_delay: histogram(&r, STATUS_WRITE_DELAY, ASSIGN_BUCKETS.to_vec()),
            lease_renew_duration: histogram(
                &r,
                LEASE_RENEW_DURATION,
                vec![0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0],
            ),
            lease_renew_failures: counter_vec(&r, LEASE_RENEW_FAILURES, &["reason"]),
            self_fences: counter_vec(&r, SELF_FENCES, &["reason"]),
            peer_proofs: counter_vec(&r, PEER_PROOFS, &["result"]),
            api_reachable: gauge(&r, API_REACHABLE),
            watch_restarts: counter_vec(&r, WATCH_RESTARTS, &["watch"]),
            watch_expired: counter_vec(&r, WATCH_EXPIRED, &["watch"]),
            address_discovery_up: gauge_vec(&r, ADDRESS_DISCOVERY_UP, &["source"]),
            confirmations: counter_vec(&r, CONFIRMATIONS, &["result"]),
            unconfirmed_failures: counter_vec(&r, UNCONFIRMED_FAILURES, &["zone"]),
            confirm_requests: counter_vec(&r, CONFIRM_REQUESTS, &["result"]),
            confirm_credentials_missing: gauge(&r, CONFIRM_CREDENTIALS_MISSING),
            connections_refused: counter_vec(&r, CONNECTIONS_REFUSED, &["listener"]),
            replica_place: gauge_vec(&r, REPLICA_PLACE, &["zone", "node"]),
            registry: r,
        };
        m.zero_label_sets();
        m.api_reachable.set(1);
        m
    }

    /// Pre-creates label sets so dashboards and alerts see zeros, not absence.
    fn zero_label_sets(&self) {
        for res in ["ok", "conflict", "error", "fenced", "refused"] {
            self.status_writes.with_label_values(&[res]);
        }
        for cause in ["new", "rebalance", "dead", "departed"] {
            self.moves.with_label_values(&[cause]);
        }
        for reason in ["unreachable", "lost", "rejected"] {
            self.lease_renew_failures.with_label_values(&[reason]);
        }
        for watch in ["checkers", "leases", "sharder"] {
            self.watch_restarts.with_label_values(&[watch]);
            self.watch_expired.with_label_values(&[watch]);
        }
        for reason in ["lost", "paused"] {
            self.self_fences.with_label_values(&[reason]);
        }
        for result in ["proven", "refuted"] {
            self.peer_proofs.with_label_values(&[result]);
        }
        for result in ["confirmed", "refuted", "unanswered", "none"] {
            self.confirmations.with_label_values(&[result]);
        }
        for result in ["probed", "unauthenticated", "refused", "busy", "abandoned"] {
            self.confirm_requests.with_label_values(&[result]);
        }
        for listener in ["main", "confirm"] {
            self.connections_refused.with_label_values(&[listener]);
        }
    }

    fn with_checker(&self, namespace: &str, name: &str, f: impl FnOnce(&mut CheckerSeries)) {
        let mut map = self.checkers.lock().unwrap_or_else(|e| e.into_inner());
        let names = match map.get_mut(namespace) {
            Some(names) => names,
            None => map.entry(Arc::from(namespace)).or_default(),
        };
        match names.get_mut(name) {
            Some(series) => f(series),
            None => f(names.entry(Arc::from(name)).or_default()),
        }
    }

    /// The info series of a checker, from its spec and labels.
    pub fn checker_info(&self, wc: &crate::api::WebChecker) -> Arc<CheckerInfo> {
        Arc::new(CheckerInfo::new(
            &wc.spec.host,
            &wc.spec.path,
            wc.metadata.labels.as_ref(),
            &self.label_allowlist,
        ))
    }

    /// A changed info series (labels or URL) of a checker that has series;
    /// one that has none gets it with its first series.
    pub fn refresh_info(&self, namespace: &str, name: &str, info: &Arc<CheckerInfo>) {
        let mut map = self.checkers.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(c) = map.get_mut(namespace).and_then(|n| n.get_mut(name)) {
            c.info = Some(info.clone());
        }
    }

    pub fn record_probe(
        &self,
        namespace: &str,
        name: &str,
        info: &Arc<CheckerInfo>,
        o: &Outcome,
        ready: bool,
    ) {
        // Exported from the first probe on, 0 until this owner saw a success
        // (docs/metrics.md).
        let now = if o.success() {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs_f64())
                .unwrap_or(0.0)
        } else {
            0.0
        };
        let seconds = o.duration.as_secs_f64();
        let reason = o.reason.index();
        let histogram = self.histograms.per_checker;
        let native = histogram && self.histograms.native;
        self.with_checker(namespace, name, |c| {
            c.info = Some(info.clone());
            c.probed = true;
            c.up = ready;
            c.last_success = o.success();
            c.last_code = o.status_code.unwrap_or(0);
            if o.success() {
                c.last_success_ts = now;
            }
            if histogram {
                let b = PROBE_BUCKETS
                    .iter()
                    .position(|ub| seconds <= *ub)
                    .unwrap_or(PROBE_BUCKETS.len());
                c.buckets[b] += 1;
                c.duration_sum += seconds;
            }
            if native {
                c.native.observe(seconds);
            }
            c.probes[reason] += 1;
            for (i, (_, d)) in o.phases.named().iter().enumerate() {
                c.phases[i] = d.as_secs_f64();
            }
            if let Some(t) = o.cert_not_after {
                c.cert_expiry = Some(t);
            }
            if let Some(t) = &o.tls {
                c.tls = Some(t.clone());
            }
            c.http_version = match o.http_version {
                Some(http::Version::HTTP_10) => 10,
                Some(http::Version::HTTP_11) => 11,
                Some(http::Version::HTTP_2) => 20,
                _ => 0,
            };
            c.grpc = o.grpc;
        });
    }

    /// Sets the up gauge without a probe (for example a suspended or invalid checker).
    pub fn set_up(&self, namespace: &str, name: &str, info: &Arc<CheckerInfo>, ready: bool) {
        self.with_checker(namespace, name, |c| {
            c.info = Some(info.clone());
            c.up = ready;
        });
    }

    /// A round of a checker with spec.locations (`asked` zones asked for):
    /// the zones of `results` replace the earlier ones (a zone no longer
    /// asked loses its series), each counting its probe.
    pub fn record_zones(&self, namespace: &str, name: &str, asked: u32, results: &[ZoneSample]) {
        self.with_checker(namespace, name, |c| {
            c.zones_asked = (asked > 0).then_some(asked);
            let mut old = std::mem::take(&mut c.zones);
            for r in results {
                let mut z = match old.iter().position(|z| *z.zone == *r.zone) {
                    Some(i) => old.swap_remove(i),
                    None => ZoneSeries {
                        zone: r.zone.as_str().into(),
                        ..Default::default()
                    },
                };
                z.last = r.result.map(|(ok, ms)| (ok, ms as f64 / 1000.0));
                match r.result {
                    Some((true, _)) => z.successes += 1,
                    Some((false, _)) => z.failures += 1,
                    None => {}
                }
                c.zones.push(z);
            }
        });
    }

    /// Drops every series of a checker this replica no longer owns.
    pub fn forget_checker(&self, namespace: &str, name: &str) {
        let mut map = self.checkers.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(names) = map.get_mut(namespace) {
            names.remove(name);
            if names.is_empty() {
                map.remove(namespace);
            }
        }
    }

    /// Copies the per-checker series under the lock (cheap: two reference
    /// counts and a few hundred bytes per checker) to format them without
    /// it, so probes never wait on a scrape.
    fn snapshot(&self) -> Vec<(Arc<str>, Arc<str>, CheckerSeries)> {
        let map = self.checkers.lock().unwrap_or_else(|e| e.into_inner());
        map.iter()
            .flat_map(|(ns, names)| {
                names
                    .iter()
                    .map(move |(name, c)| (ns.clone(), name.clone(), c.clone()))
            })
            .collect()
    }

    /// The text exposition format: the registry's metrics, then the per-checker
    /// families.
    pub fn render(&self) -> String {
        let families = self.registry.gather();
        let snapshot = self.snapshot();
        let mut out = String::with_capacity(16 * 1024 + snapshot.len() * 2048);
        let _ = TextEncoder::new().encode_utf8(&families, &mut out);
        checkers::render_checkers(
            &mut exposition::TextSink::new(&mut out),
            &snapshot,
            self.histograms,
        );
        out
    }

    /// The delimited protobuf format: the registry's families (the
    /// prometheus crate's encoder), then the per-checker ones, native
    /// histogram buckets included.
    pub fn render_protobuf(&self) -> Vec<u8> {
        let families = self.registry.gather();
        let snapshot = self.snapshot();
        let mut out = Vec::with_capacity(8 * 1024 + snapshot.len() * 1024);
        // One family at a time: the encoder refuses a whole slice for one
        // family it finds invalid (none should be), the others still go out.
        let encoder = prometheus::ProtobufEncoder::new();
        for family in &families {
            let _ = prometheus::Encoder::encode(&encoder, std::slice::from_ref(family), &mut out);
        }
        let mut sink = exposition::ProtoSink::new(out);
        checkers::render_checkers(&mut sink, &snapshot, self.histograms);
        sink.finish()
    }

    pub fn encode(&self, format: Format) -> Vec<u8> {
        match format {
            Format::Text => self.render().into_bytes(),
            Format::Protobuf => self.render_protobuf(),
        }
    }
}

type Snapshot = [(Arc<str>, Arc<str>, CheckerSeries)];

#[cfg(test)]
mod tests;
