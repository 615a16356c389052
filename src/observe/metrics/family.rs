//! How a component registers its families on the replica's registry: each
//! component (engine, writer, membership, shard, guard, confirmation,
//! listeners, Events, watches, discovery) declares its own and registers
//! them once, when the wiring builds it.

use prometheus::{
    Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry,
};

/// A metric family's name and help.
pub type Family = (&'static str, &'static str);

pub fn reg<T: prometheus::core::Collector + Clone + 'static>(r: &Registry, c: T) -> T {
    r.register(Box::new(c.clone()))
        .expect("metric names are unique");
    c
}

pub fn gauge(r: &Registry, (name, help): Family) -> IntGauge {
    reg(r, IntGauge::new(name, help).expect("a valid metric"))
}

pub fn counter(r: &Registry, (name, help): Family) -> IntCounter {
    reg(r, IntCounter::new(name, help).expect("a valid metric"))
}

/// Every label set of `zeros` is created at 0, so that dashboards and
/// alerts see zeros, not absence.
pub fn counter_vec(
    r: &Registry,
    (name, help): Family,
    labels: &[&str],
    zeros: &[&str],
) -> IntCounterVec {
    let c = reg(
        r,
        IntCounterVec::new(Opts::new(name, help), labels).expect("a valid metric"),
    );
    for z in zeros {
        c.with_label_values(&[z]);
    }
    c
}

pub fn gauge_vec(r: &Registry, (name, help): Family, labels: &[&str]) -> IntGaugeVec {
    reg(
        r,
        IntGaugeVec::new(Opts::new(name, help), labels).expect("a valid metric"),
    )
}

pub fn histogram(r: &Registry, (name, help): Family, buckets: &[f64]) -> Histogram {
    let opts = HistogramOpts::new(name, help).buckets(buckets.to_vec());
    reg(r, Histogram::with_opts(opts).expect("a valid metric"))
}

/// Buckets of the histograms that time a handover or an assignment.
pub const ASSIGN_BUCKETS: &[f64] = &[
    0.01, 0.05, 0.1, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 30.0,
];
