//! Prometheus metrics. The catalogue lives in docs/metrics.md.
//!
//! Each component declares and registers its own families on the replica's
//! registry ([`family`]); this module holds the registry and the per-checker
//! series, which are kept as plain numbers and rendered by hand.
//!
//! Per-checker series exist only on the replica that owns the checker: the
//! engine calls [`Metrics::forget_checker`] the moment it stops owning one, so a
//! sum across replicas never counts a checker twice.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use prometheus::{Registry, TextEncoder};

use crate::probe::{GrpcFacts, Outcome, Reason, TlsFacts};

mod checkers;
mod exposition;
pub mod family;
mod grpc;
mod info;
pub mod memory_limit;
mod native;
mod slo;
mod watches;
pub use exposition::{Format, negotiate};
pub use family::Family;
pub use info::{CheckerInfo, LabelAllowlist, parse_label_allowlist};
pub use watches::WatchMetrics;

const PROBE_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
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
    /// While Ready is False: since when (Unix seconds).
    down_since: Option<i64>,
    /// The maintenance window that covers it, and when that closes.
    window: Option<(Arc<str>, i64)>,
    /// Ready is False because a dependency is down (spec.dependsOn).
    dependency_down: bool,
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
    /// With spec.slo: its objective and counts.
    slo: slo::SloSeries,
}

impl CheckerSeries {
    fn stand(&mut self, s: Standing) {
        self.up = s.ready;
        self.down_since = s.down_since;
        self.window = s.window;
        self.dependency_down = s.dependency_down;
    }
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
pub use webchecker_core::table::Standing;

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

/// The replica's registry, where each component registers its own families
/// (`family`), and the per-checker series the engine records, rendered
/// together at each scrape.
pub struct Metrics {
    registry: Registry,
    histograms: HistogramOptions,
    /// namespace -> name -> series. Locked only for a lookup or a copy, never
    /// while rendering text.
    checkers: Mutex<CheckerMap>,
}

const BUILD_INFO: Family = (
    "webchecker_build_info",
    "Build and replica identity; always 1",
);

impl Metrics {
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
        family::gauge_vec(&r, BUILD_INFO, &["version", "replica"])
            .with_label_values(&[env!("CARGO_PKG_VERSION"), identity])
            .set(1);
        #[cfg(target_os = "linux")]
        r.register(Box::new(
            prometheus::process_collector::ProcessCollector::for_self(),
        ))
        .expect("process collector registers once");
        Metrics {
            registry: r,
            histograms,
            checkers: Mutex::new(BTreeMap::new()),
        }
    }

    /// Where a component registers its families.
    pub fn registry(&self) -> &Registry {
        &self.registry
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
        standing: impl Into<Standing>,
    ) {
        let standing = standing.into();
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
            c.stand(standing);
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
    pub fn set_up(
        &self,
        namespace: &str,
        name: &str,
        info: &Arc<CheckerInfo>,
        standing: impl Into<Standing>,
    ) {
        let standing = standing.into();
        self.with_checker(namespace, name, |c| {
            c.info = Some(info.clone());
            c.stand(standing);
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

    /// What a step counted against spec.slo.
    pub fn record_slo(
        &self,
        namespace: &str,
        name: &str,
        target: crate::probe::SloTarget,
        counted: webchecker_core::status::Counted,
    ) {
        self.with_checker(namespace, name, |c| slo::record(c, target, counted));
    }

    /// Drops the SLO series of a checker whose spec.slo was removed.
    pub fn forget_slo(&self, namespace: &str, name: &str) {
        let mut map = self.checkers.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(c) = map.get_mut(namespace).and_then(|n| n.get_mut(name)) {
            c.slo = Default::default();
        }
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
