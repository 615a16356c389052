//! The per-checker series of spec.slo: the objective and the probes counted
//! against it, from which the chart's static rules compute burn rates for
//! every checker (alerts/webchecker.rules.yaml, docs/slo.md).

use super::exposition::{Kind, Sink};
use super::{CheckerSeries, Snapshot};
use crate::probe::SloTarget;
use webchecker_core::status::Counted;

/// One checker's: counted by its owner since it took the checker over (a
/// new owner starts from zero, as a restarted process does; `rate()` sees a
/// reset of a series that moved to another instance).
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct SloSeries {
    target: Option<SloTarget>,
    good: u64,
    total: u64,
}

pub(super) fn record(c: &mut CheckerSeries, target: SloTarget, counted: Counted) {
    let s = &mut c.slo;
    s.target = Some(target);
    s.good += u64::from(counted.good);
    s.total += u64::from(counted.good) + u64::from(counted.bad);
}

pub(super) fn render(out: &mut dyn Sink, checkers: &Snapshot) {
    out.family(
        "webchecker_slo_objective",
        Kind::Gauge,
        "spec.slo.objective as a ratio (0.999 for 99.9), with its window",
    );
    for (ns, name, c) in checkers {
        if let Some(t) = c.slo.target {
            out.sample(
                &[
                    ("name", name),
                    ("namespace", ns),
                    ("window", t.window.as_str()),
                ],
                t.target(),
            );
        }
    }
    type Value = fn(&SloSeries) -> u64;
    let counters: [(&str, &str, Value); 2] = [
        (
            "webchecker_slo_good_probes_total",
            "Probes counted good against spec.slo: successes, and failures another replica refuted",
            |s| s.good,
        ),
        (
            "webchecker_slo_probes_total",
            "Probes counted against spec.slo: good ones and confirmed failures (maintenance and unconfirmed failures are not counted)",
            |s| s.total,
        ),
    ];
    for (family, help, value) in counters {
        out.family(family, Kind::Counter, help);
        for (ns, name, c) in checkers {
            if c.slo.target.is_some() {
                out.sample(&[("name", name), ("namespace", ns)], value(&c.slo) as f64);
            }
        }
    }
}
