//! Prometheus metrics. The catalogue lives in docs/metrics.md.
//!
//! Per-checker series exist only on the replica that owns the checker: the
//! engine calls [`Metrics::forget_checker`] the moment it stops owning one, so a
//! sum across replicas never counts a checker twice.

use prometheus::{
    Encoder, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge,
    IntGaugeVec, Opts, Registry, TextEncoder,
};

use crate::probe::{Outcome, Reason};

const PROBE_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];
const LAG_BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];
const ASSIGN_BUCKETS: &[f64] = &[0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0];

const ALL_REASONS: &[Reason] = &[
    Reason::ProbeSucceeded,
    Reason::DnsError,
    Reason::ConnectError,
    Reason::TlsError,
    Reason::CertificateInvalid,
    Reason::Timeout,
    Reason::UnexpectedStatus,
    Reason::BodyMismatch,
    Reason::SlowResponse,
    Reason::Forbidden,
    Reason::ProtocolError,
    Reason::InvalidSpec,
];

pub struct Metrics {
    pub registry: Registry,
    per_checker_histogram: bool,
    probe_duration: HistogramVec,
    probes: IntCounterVec,
    up: IntGaugeVec,
    last_success: IntGaugeVec,
    last_code: IntGaugeVec,
    last_success_ts: prometheus::GaugeVec,
    phase: prometheus::GaugeVec,
    cert_expiry: IntGaugeVec,

    pub owned: IntGauge,
    pub leader: IntGauge,
    pub ring_members: IntGauge,
    pub schedule_lag: Histogram,
    pub missed_intervals: IntCounter,
    pub inflight: IntGauge,
    pub pool_size: IntGauge,
    pub status_writes: IntCounterVec,
    pub events: IntCounterVec,
    pub moves: IntCounterVec,
    pub drains: IntCounter,
    pub assignment_latency: Histogram,
    pub lease_renew_failures: IntCounterVec,
    pub self_fences: IntCounterVec,
    pub api_reachable: IntGauge,
    pub watch_restarts: IntCounterVec,
}

fn reg<T: prometheus::core::Collector + Clone + 'static>(r: &Registry, c: T) -> T {
    r.register(Box::new(c.clone()))
        .expect("metric names are unique");
    c
}

impl Metrics {
    pub fn new(identity: &str, per_checker_histogram: bool) -> Self {
        let r = Registry::new();
        let ck = &["namespace", "name"];
        let build = reg(
            &r,
            IntGaugeVec::new(
                Opts::new(
                    "webchecker_build_info",
                    "Build and replica identity; always 1",
                ),
                &["version", "replica"],
            )
            .unwrap(),
        );
        build
            .with_label_values(&[env!("CARGO_PKG_VERSION"), identity])
            .set(1);
        #[cfg(target_os = "linux")]
        r.register(Box::new(
            prometheus::process_collector::ProcessCollector::for_self(),
        ))
        .expect("process collector registers once");
        let m = Metrics {
            per_checker_histogram,
            probe_duration: reg(
                &r,
                HistogramVec::new(
                    HistogramOpts::new("webchecker_probe_duration_seconds", "Whole probe duration")
                        .buckets(PROBE_BUCKETS.to_vec()),
                    ck,
                )
                .unwrap(),
            ),
            probes: reg(
                &r,
                IntCounterVec::new(
                    Opts::new("webchecker_probes_total", "Probes done, by result and reason"),
                    &["namespace", "name", "result", "reason"],
                )
                .unwrap(),
            ),
            up: reg(
                &r,
                IntGaugeVec::new(Opts::new("webchecker_up", "1 when the Ready condition is True"), ck).unwrap(),
            ),
            last_success: reg(
                &r,
                IntGaugeVec::new(
                    Opts::new("webchecker_last_probe_success", "1 when the last probe succeeded"),
                    ck,
                )
                .unwrap(),
            ),
            last_code: reg(
                &r,
                IntGaugeVec::new(
                    Opts::new("webchecker_last_status_code", "HTTP status code of the last probe, 0 when none"),
                    ck,
                )
                .unwrap(),
            ),
            last_success_ts: reg(
                &r,
                prometheus::GaugeVec::new(
                    Opts::new(
                        "webchecker_last_success_timestamp_seconds",
                        "Unix time of the last successful probe",
                    ),
                    ck,
                )
                .unwrap(),
            ),
            phase: reg(
                &r,
                prometheus::GaugeVec::new(
                    Opts::new("webchecker_probe_phase_duration_seconds", "Phase durations of the last probe"),
                    &["namespace", "name", "phase"],
                )
                .unwrap(),
            ),
            cert_expiry: reg(
                &r,
                IntGaugeVec::new(
                    Opts::new(
                        "webchecker_certificate_expiry_timestamp_seconds",
                        "notAfter of the server's leaf certificate",
                    ),
                    ck,
                )
                .unwrap(),
            ),
            owned: reg(
                &r,
                IntGauge::new("webchecker_owned_checkers", "Checkers this replica owns and probes").unwrap(),
            ),
            leader: reg(&r, IntGauge::new("webchecker_leader", "1 on the sharder replica").unwrap()),
            ring_members: reg(
                &r,
                IntGauge::new("webchecker_ring_members", "Live members this replica sees").unwrap(),
            ),
            schedule_lag: reg(
                &r,
                Histogram::with_opts(
                    HistogramOpts::new("webchecker_schedule_lag_seconds", "Probe start minus due time")
                        .buckets(LAG_BUCKETS.to_vec()),
                )
                .unwrap(),
            ),
            missed_intervals: reg(
                &r,
                IntCounter::new(
                    "webchecker_missed_intervals_total",
                    "Intervals skipped because the previous probe or the pool was late",
                )
                .unwrap(),
            ),
            inflight: reg(&r, IntGauge::new("webchecker_inflight_probes", "Probes running now").unwrap()),
            pool_size: reg(
                &r,
                IntGauge::new("webchecker_worker_pool_size", "Probes in flight at most").unwrap(),
            ),
            status_writes: reg(
                &r,
                IntCounterVec::new(
                    Opts::new("webchecker_status_writes_total", "Status writes by result"),
                    &["result"],
                )
                .unwrap(),
            ),
            events: reg(
                &r,
                IntCounterVec::new(
                    Opts::new("webchecker_events_total", "Kubernetes Events emitted"),
                    &["type", "reason"],
                )
                .unwrap(),
            ),
            moves: reg(
                &r,
                IntCounterVec::new(
                    Opts::new("webchecker_moves_total", "Assignments written by the sharder, by cause"),
                    &["cause"],
                )
                .unwrap(),
            ),
            drains: reg(
                &r,
                IntCounter::new(
                    "webchecker_drains_total",
                    "Drain handshakes this replica completed as the old owner",
                )
                .unwrap(),
            ),
            assignment_latency: reg(
                &r,
                Histogram::with_opts(
                    HistogramOpts::new(
                        "webchecker_assignment_latency_seconds",
                        "Sharder: checker seen unassigned to assignment written",
                    )
                    .buckets(ASSIGN_BUCKETS.to_vec()),
                )
                .unwrap(),
            ),
            lease_renew_failures: reg(
                &r,
                IntCounterVec::new(
                    Opts::new("webchecker_lease_renew_failures_total", "Failed Lease renewals"),
                    &["reason"],
                )
                .unwrap(),
            ),
            self_fences: reg(
                &r,
                IntCounterVec::new(
                    Opts::new(
                        "webchecker_self_fences_total",
                        "Times this replica dropped its checkers because it lost its Lease or paused",
                    ),
                    &["reason"],
                )
                .unwrap(),
            ),
            api_reachable: reg(
                &r,
                IntGauge::new("webchecker_api_reachable", "0 while Lease renewals get no answer").unwrap(),
            ),
            watch_restarts: reg(
                &r,
                IntCounterVec::new(
                    Opts::new("webchecker_watch_restarts_total", "Watch errors and relists"),
                    &["watch"],
                )
                .unwrap(),
            ),
            registry: r,
        };
        // Pre-create label sets so dashboards and alerts see zeros, not absence.
        for res in ["ok", "conflict", "error", "fenced"] {
            m.status_writes.with_label_values(&[res]);
        }
        for cause in ["new", "rebalance", "dead", "departed"] {
            m.moves.with_label_values(&[cause]);
        }
        for reason in ["unreachable", "lost"] {
            m.lease_renew_failures.with_label_values(&[reason]);
        }
        for watch in ["checkers", "leases", "sharder"] {
            m.watch_restarts.with_label_values(&[watch]);
        }
        for reason in ["lost", "paused"] {
            m.self_fences.with_label_values(&[reason]);
        }
        m.api_reachable.set(1);
        m
    }

    pub fn record_probe(&self, namespace: &str, name: &str, o: &Outcome, ready: bool) {
        let l = &[namespace, name];
        if self.per_checker_histogram {
            self.probe_duration
                .with_label_values(l)
                .observe(o.duration.as_secs_f64());
        }
        let result = if o.success() { "success" } else { "failure" };
        self.probes
            .with_label_values(&[namespace, name, result, o.reason.as_str()])
            .inc();
        self.up.with_label_values(l).set(ready as i64);
        self.last_success
            .with_label_values(l)
            .set(o.success() as i64);
        self.last_code
            .with_label_values(l)
            .set(o.status_code.map(i64::from).unwrap_or(0));
        // Exported from the first probe on, 0 until this owner saw a success
        // (docs/metrics.md).
        let last_success_ts = self.last_success_ts.with_label_values(l);
        if o.success() {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs_f64())
                .unwrap_or(0.0);
            last_success_ts.set(now);
        }
        for (phase, d) in o.phases.named() {
            self.phase
                .with_label_values(&[namespace, name, phase])
                .set(d.as_secs_f64());
        }
        if let Some(t) = o.cert_not_after {
            self.cert_expiry.with_label_values(l).set(t);
        }
    }

    /// Sets the up gauge without a probe (for example a suspended or invalid checker).
    pub fn set_up(&self, namespace: &str, name: &str, ready: bool) {
        self.up
            .with_label_values(&[namespace, name])
            .set(ready as i64);
    }

    /// Drops every series of a checker this replica no longer owns.
    pub fn forget_checker(&self, namespace: &str, name: &str) {
        let l = &[namespace, name];
        let _ = self.probe_duration.remove_label_values(l);
        let _ = self.up.remove_label_values(l);
        let _ = self.last_success.remove_label_values(l);
        let _ = self.last_code.remove_label_values(l);
        let _ = self.last_success_ts.remove_label_values(l);
        let _ = self.cert_expiry.remove_label_values(l);
        for reason in ALL_REASONS {
            for result in ["success", "failure"] {
                let _ =
                    self.probes
                        .remove_label_values(&[namespace, name, result, reason.as_str()]);
            }
        }
        for phase in ["resolve", "connect", "tls", "processing", "transfer"] {
            let _ = self.phase.remove_label_values(&[namespace, name, phase]);
        }
    }

    pub fn render(&self) -> String {
        let mut buf = Vec::new();
        let _ = TextEncoder::new().encode(&self.registry.gather(), &mut buf);
        String::from_utf8(buf).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::Phases;
    use std::time::Duration;

    fn outcome(reason: Reason) -> Outcome {
        Outcome {
            reason,
            message: String::new(),
            status_code: Some(200),
            duration: Duration::from_millis(12),
            phases: Phases::default(),
            cert_not_after: Some(1_900_000_000),
            redirects: 0,
        }
    }

    #[test]
    fn forgetting_a_checker_removes_every_series() {
        let m = Metrics::new("r1", true);
        m.record_probe("ns", "a", &outcome(Reason::ProbeSucceeded), true);
        m.record_probe("ns", "a", &outcome(Reason::Timeout), false);
        m.record_probe("ns", "b", &outcome(Reason::ProbeSucceeded), true);
        assert!(m.render().contains("name=\"a\""));
        m.forget_checker("ns", "a");
        let text = m.render();
        assert!(!text.contains("name=\"a\""), "{text}");
        assert!(text.contains("name=\"b\""));
    }

    #[test]
    fn last_success_timestamp_is_zero_until_a_success() {
        let m = Metrics::new("r1", true);
        m.record_probe("ns", "a", &outcome(Reason::Timeout), false);
        let text = m.render();
        assert!(
            text.contains(
                "webchecker_last_success_timestamp_seconds{name=\"a\",namespace=\"ns\"} 0\n"
            ),
            "{text}"
        );
    }

    #[test]
    fn histogram_can_be_turned_off() {
        let m = Metrics::new("r1", false);
        m.record_probe("ns", "a", &outcome(Reason::ProbeSucceeded), true);
        let text = m.render();
        assert!(!text.contains("webchecker_probe_duration_seconds_bucket"));
        assert!(text.contains("webchecker_probes_total{"));
    }
}
