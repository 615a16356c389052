//! The runs of part 1 and 1b as they are kept: by protocol, concurrency
//! and round, one run per engine; the concurrencies, cores and timings
//! every comparison uses (probe.rs, kinds.rs, tls_cost.rs).

use std::collections::BTreeMap;
use std::time::Duration;

use crate::common::Cfg;
use crate::engines::{EngineRun, Proto};
use crate::sys::ncpus;

/// protocol -> concurrency -> rounds of (ours, blackbox)
pub type Runs = BTreeMap<Proto, BTreeMap<usize, Vec<(EngineRun, EngineRun)>>>;
/// protocol -> concurrency -> ratio ours/blackbox: (median, min, max)
pub type Ratios = BTreeMap<Proto, BTreeMap<usize, (f64, f64, f64)>>;

/// The concurrencies each protocol is measured at.
pub const CONCURRENCIES: &[usize] = &[1, 16, 128];

/// The cores: whether the engines are pinned, the targets' and the load's
/// core, the probers' core (none pinned with fewer than 2 cores).
pub fn cores() -> (bool, Option<usize>, Option<usize>) {
    if ncpus() >= 2 {
        (true, Some(0), Some(1))
    } else {
        (false, None, None)
    }
}

/// Warm-up and measured duration of one run.
pub fn timings(cfg: &Cfg) -> (Duration, Duration) {
    if cfg.quick {
        (Duration::from_millis(300), Duration::from_millis(1500))
    } else {
        (Duration::from_millis(500), Duration::from_secs(3))
    }
}

/// Every engine's run of one round (by engine, see probe.rs's `Rig`); `None` for an
/// engine that does not take part for that protocol.
pub type Round = Vec<Option<EngineRun>>;
/// protocol -> concurrency -> rounds
pub type AllRuns = BTreeMap<Proto, BTreeMap<usize, Vec<Round>>>;

/// The rounds of engines `a` and `b` (numbered as in probe.rs's `Rig`) where both ran.
pub fn pairs(all: &AllRuns, a: usize, b: usize) -> Runs {
    let mut runs = Runs::new();
    for (proto, by_c) in all {
        for (c, rounds) in by_c {
            for r in rounds {
                if let (Some(Some(x)), Some(Some(y))) = (r.get(a), r.get(b)) {
                    runs.entry(*proto)
                        .or_default()
                        .entry(*c)
                        .or_default()
                        .push((*x, *y));
                }
            }
        }
    }
    runs
}
