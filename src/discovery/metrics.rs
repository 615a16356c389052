//! Discovery's metrics (docs/metrics.md), registered on the replica's
//! registry when `--discover-routes` is on, every label set from zero.

use prometheus::{IntCounterVec, IntGauge, IntGaugeVec, Registry};

use crate::observe::metrics::family::{Family, counter_vec, gauge, gauge_vec};

pub struct DiscoveryMetrics {
    /// `result`: applied, conflict (applied without the hand-set fields),
    /// invalid (refused by admission), name_taken (a checker of that name
    /// exists that its source did not generate: left alone), error (retried).
    pub applies: IntCounterVec,
    /// `result`: deleted, error.
    pub deletes: IntCounterVec,
    /// Checkers the opted-in sources want, on the leader.
    pub generated: IntGauge,
    /// 1 while this replica leads and discovery's watches are listed.
    pub active: IntGauge,
    /// `source`: ingress, httproute, grpcroute, service; 1 while its objects
    /// are watched on the leader, 0 when not (elsewhere, or the Gateway API
    /// does not serve them).
    pub sources: IntGaugeVec,
}

pub const SOURCES: [&str; 4] = ["ingress", "httproute", "grpcroute", "service"];

pub const APPLY_RESULTS: [&str; 5] = ["applied", "conflict", "invalid", "name_taken", "error"];
pub const DELETE_RESULTS: [&str; 2] = ["deleted", "error"];

const APPLIES: Family = (
    "webchecker_discovery_applies_total",
    "Server-side applies of generated checkers, by result",
);
const DELETES: Family = (
    "webchecker_discovery_deletes_total",
    "Deletions of generated checkers their source no longer wants, by result",
);
const GENERATED: Family = (
    "webchecker_discovery_generated_checkers",
    "Checkers the opted-in routes want (on the leader; 0 elsewhere)",
);
const ACTIVE: Family = (
    "webchecker_discovery_active",
    "1 while this replica leads and route discovery's watches are listed",
);
const SOURCE_WATCHED: Family = (
    "webchecker_discovery_source_watched",
    "1 while route discovery watches this kind of source on the leader (httproute, grpcroute, gateway: 0 while the Gateway API does not serve them)",
);

impl DiscoveryMetrics {
    pub fn register(r: &Registry) -> Self {
        let sources = gauge_vec(r, SOURCE_WATCHED, &["source"]);
        for s in SOURCES {
            sources.with_label_values(&[s]);
        }
        DiscoveryMetrics {
            applies: counter_vec(r, APPLIES, &["result"], &APPLY_RESULTS),
            deletes: counter_vec(r, DELETES, &["result"], &DELETE_RESULTS),
            generated: gauge(r, GENERATED),
            active: gauge(r, ACTIVE),
            sources,
        }
    }

    pub fn applied(&self, result: &str) {
        self.applies.with_label_values(&[result]).inc();
    }

    /// No longer leading (or restarting): every gauge at 0.
    pub fn stopped(&self) {
        self.active.set(0);
        self.generated.set(0);
        for s in SOURCES {
            self.watched(s, false);
        }
    }

    pub fn watched(&self, source: &str, on: bool) {
        self.sources.with_label_values(&[source]).set(i64::from(on));
    }

    pub fn deleted(&self, result: &str) {
        self.deletes.with_label_values(&[result]).inc();
    }
}
