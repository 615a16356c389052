//! The engine's families: what it owns, how late its probes start, its
//! worker pool, and the owner's side of confirmations.

use std::sync::Arc;

use prometheus::{Histogram, IntCounter, IntCounterVec, IntGauge, Registry};

use crate::observe::metrics::family::{
    ASSIGN_BUCKETS, Family, counter, counter_vec, gauge, histogram,
};

const LAG_BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

const OWNED: Family = (
    "webchecker_owned_checkers",
    "Checkers this replica owns and probes",
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
const FIRST_PROBE_DELAY: Family = (
    "webchecker_first_probe_delay_seconds",
    "Owner: a new checker delivered by the watch to its first probe's start",
);
const CONFIRMATIONS: Family = (
    "webchecker_confirmations_total",
    "Failures of this replica's probes that would have turned a checker Ready=False, by what another replica's probe said: confirmed (it failed too), refuted (it succeeded: Ready stays True, Degraded=True), unanswered (no other replica answered: Ready keeps its verdict, Degraded=True), none (no other replica, or confirmFailures: false)",
);
const UNCONFIRMED_FAILURES: Family = (
    "webchecker_unconfirmed_failures_total",
    "Failures of this replica's probes that another replica's probe refuted (the target answered it), by this replica's zone: a sign of trouble on this replica's network path",
);

pub struct EngineMetrics {
    pub owned: IntGauge,
    /// Checkers held, those being handed over included (not exported: a
    /// graceful shutdown waits for it to reach 0).
    pub held: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    pub schedule_lag: Histogram,
    pub missed_intervals: IntCounter,
    inflight: IntGauge,
    pub pool_size: IntGauge,
    pub first_probe_delay: Histogram,
    /// Owner side: failures that would have turned a checker Ready=False,
    /// by what the confirmer said.
    pub confirmations: IntCounterVec,
    /// Owner side: its failures another replica's probe refuted, by this
    /// replica's zone.
    pub unconfirmed_failures: IntCounterVec,
}

impl EngineMetrics {
    /// `zone`: this replica's, whose refutations count from 0.
    pub fn register(r: &Registry, zone: &str) -> Self {
        EngineMetrics {
            owned: gauge(r, OWNED),
            held: Default::default(),
            schedule_lag: histogram(r, SCHEDULE_LAG, LAG_BUCKETS),
            missed_intervals: counter(r, MISSED_INTERVALS),
            inflight: gauge(r, INFLIGHT),
            pool_size: gauge(r, POOL_SIZE),
            first_probe_delay: histogram(r, FIRST_PROBE_DELAY, ASSIGN_BUCKETS),
            confirmations: counter_vec(
                r,
                CONFIRMATIONS,
                &["result"],
                &["confirmed", "refuted", "unanswered", "none"],
            ),
            unconfirmed_failures: counter_vec(r, UNCONFIRMED_FAILURES, &["zone"], &[zone]),
        }
    }
}

/// Counts a probe in flight for as long as its task lives (also when aborted).
pub(super) struct InflightGuard(Arc<EngineMetrics>);

impl InflightGuard {
    pub(super) fn new(metrics: Arc<EngineMetrics>) -> Self {
        metrics.inflight.inc();
        InflightGuard(metrics)
    }
}

impl Drop for InflightGuard {
    fn drop(&mut self) {
        self.0.inflight.dec();
    }
}
