//! Discovery's metrics (docs/metrics.md), registered on the replica's
//! registry when `--discover-routes` is on, every label set from zero.

use prometheus::{IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry};

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

impl DiscoveryMetrics {
    /// Registers the series on `r`; None (logged by the caller) if they are
    /// there already.
    pub fn register(r: &Registry) -> Result<Self, prometheus::Error> {
        let applies = IntCounterVec::new(
            Opts::new(
                "webchecker_discovery_applies_total",
                "Server-side applies of generated checkers, by result",
            ),
            &["result"],
        )?;
        let deletes = IntCounterVec::new(
            Opts::new(
                "webchecker_discovery_deletes_total",
                "Deletions of generated checkers their source no longer wants, by result",
            ),
            &["result"],
        )?;
        let generated = IntGauge::new(
            "webchecker_discovery_generated_checkers",
            "Checkers the opted-in routes want (on the leader; 0 elsewhere)",
        )?;
        let active = IntGauge::new(
            "webchecker_discovery_active",
            "1 while this replica leads and route discovery's watches are listed",
        )?;
        r.register(Box::new(applies.clone()))?;
        r.register(Box::new(deletes.clone()))?;
        r.register(Box::new(generated.clone()))?;
        let sources = IntGaugeVec::new(
            Opts::new(
                "webchecker_discovery_source_watched",
                "1 while route discovery watches this kind of source on the leader (httproute, grpcroute: 0 while the Gateway API does not serve them)",
            ),
            &["source"],
        )?;
        r.register(Box::new(active.clone()))?;
        r.register(Box::new(sources.clone()))?;
        for s in SOURCES {
            sources.with_label_values(&[s]);
        }
        for res in APPLY_RESULTS {
            applies.with_label_values(&[res]);
        }
        for res in DELETE_RESULTS {
            deletes.with_label_values(&[res]);
        }
        Ok(DiscoveryMetrics {
            applies,
            deletes,
            generated,
            active,
            sources,
        })
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
