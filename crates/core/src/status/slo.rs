//! The reducer's part of spec.slo: what each probe counts for, the ledger
//! that counts it (crate::slo) and status.slo.
//!
//! A success is good. A failure is bad once it is confirmed: another replica
//! saw it too, no other replica exists, the checker does not ask (spec.
//! confirmFailures: false, or the operator runs without confirmation), or
//! Ready is already False. Until then it waits, with the failures of its
//! streak below the failure threshold:
//! - refuted (another replica reached the target): they count as good;
//! - unanswered (nobody could say): they count for neither side;
//! - ended by a success below the threshold: bad when the checker does not
//!   ask, neither side when it does (nobody was asked to confirm them).
//!
//! A refusal of the operator's own (the forgery guard, a spec that cannot be
//! probed) says nothing of the target and counts for neither side.

use webchecker_api::SloStatus;
use webchecker_plan::SloTarget;

use crate::slo::{Ledger, Objective, Snapshot, Tally};

/// The status is written after at most this many counted probes, besides
/// its other writes: the most a failover can lose from the count, and, at
/// more than one probe per 10 s, about as often as the 20 min heartbeat
/// writes it (docs/slo.md).
pub const SLO_WRITE_EVERY: u32 = 120;

/// Good and bad probes one step counted (the metrics' increments).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counted {
    pub good: u32,
    pub bad: u32,
}

/// How a streak of held failures ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Judged {
    /// Confirmed, or nobody could say otherwise.
    Bad,
    /// Another replica reached the target.
    Refuted,
    /// Nobody could say.
    Unknown,
    /// A success came before the threshold.
    Flap,
}

#[derive(Clone, Debug)]
pub struct SloBook {
    target: SloTarget,
    ledger: Ledger,
    /// Failures not judged yet.
    pending: u32,
    /// Probes counted since the status was last written.
    unsaved: u32,
    /// Whether failures are put to another replica (a flap's are then
    /// never confirmed).
    asks: bool,
}

fn objective(t: SloTarget) -> Objective {
    Objective {
        target: t.target(),
        window: t.window.seconds(),
    }
}

impl SloBook {
    /// A book for `target`: `earlier`'s counts when it had the same window
    /// (a new objective for the same probes), else the inherited ledger's
    /// (this replica took the checker over), else none.
    pub fn reconcile(
        earlier: Option<SloBook>,
        inherited: Option<Snapshot>,
        target: SloTarget,
        asks: bool,
        now: u64,
    ) -> SloBook {
        let objective = objective(target);
        let ledger = match (earlier, inherited) {
            (Some(b), _) if b.target == target => return SloBook { asks, ..b },
            (Some(b), _) => Ledger::resume(objective, b.ledger.snapshot(), now),
            (None, Some(s)) => Ledger::resume(objective, s, now),
            (None, None) => Ledger::new(objective),
        };
        SloBook {
            target,
            ledger,
            pending: 0,
            unsaved: 0,
            asks,
        }
    }

    fn count(&mut self, tally: Tally, n: u32, now: u64, out: &mut Counted) {
        for _ in 0..n {
            self.ledger.record(now, tally);
        }
        match tally {
            Tally::Good => out.good += n,
            Tally::Bad => out.bad += n,
            Tally::Excluded => return,
        }
        self.unsaved = self.unsaved.saturating_add(n);
    }

    /// One probe of the owner: `success`; `refusal`: the operator's own
    /// refusal; `was_false`: Ready was False before it.
    pub fn probe(&mut self, success: bool, refusal: bool, was_false: bool, now: u64) -> Counted {
        let mut out = Counted::default();
        if refusal {
            return out;
        }
        if success {
            self.judge(Judged::Flap, now, &mut out);
            self.count(Tally::Good, 1, now, &mut out);
        } else if was_false {
            self.count(Tally::Bad, 1, now, &mut out);
        } else {
            self.pending += 1;
        }
        out
    }

    /// The held failures' fate.
    pub fn judge(&mut self, how: Judged, now: u64, out: &mut Counted) {
        let n = std::mem::take(&mut self.pending);
        let tally = match how {
            Judged::Bad => Tally::Bad,
            Judged::Refuted => Tally::Good,
            Judged::Unknown => Tally::Excluded,
            Judged::Flap if self.asks => Tally::Excluded,
            Judged::Flap => Tally::Bad,
        };
        self.count(tally, n, now, out);
    }

    /// One round of the zones (spec.locations): the quorum's word.
    pub fn round(&mut self, tally: Tally, now: u64) -> Counted {
        let mut out = Counted::default();
        self.count(tally, 1, now, &mut out);
        out
    }

    /// The objective and window, as status.slo writes them.
    pub fn summary(&self) -> (String, String) {
        (self.target.percent(), self.target.window.as_str().into())
    }

    /// Whether enough was counted since the last write to write again.
    pub fn unsaved_due(&self) -> bool {
        self.unsaved >= SLO_WRITE_EVERY
    }

    pub fn saved(&mut self) {
        self.unsaved = 0;
    }

    pub fn render(&self, now: u64) -> SloStatus {
        let r = self.ledger.report(now);
        let left = r.budget_left_seconds();
        SloStatus {
            objective: self.target.percent(),
            window: self.target.window.as_str().into(),
            availability: r.availability.map(|a| format!("{}%", floor3(a * 100.0))),
            budget: r.budget_left.zip(left).map(|(share, secs)| {
                format!(
                    "{}% ({} of {})",
                    (share * 100.0 + 1e-9).floor() as i64,
                    short_duration(secs),
                    short_duration(r.budget_seconds as i64)
                )
            }),
            budget_remaining: r.budget_left.map(floor3),
            budget_remaining_seconds: left,
            budget_seconds: r.budget_seconds as i64,
            burn_rate_1h: r.burn_1h.map(|b| format!("{b:.2}")),
            burn_rate_6h: r.burn_6h.map(|b| format!("{b:.2}")),
            good_probes: r.good as i64,
            total_probes: (r.good + r.bad) as i64,
            counting_since: r.since.and_then(rfc3339),
            window_complete: r
                .since
                .is_some_and(|s| now >= s + self.target.window.seconds()),
            ledger: self.ledger.snapshot().render(),
        }
    }
}

/// Cut (not rounded) to three decimals: an availability of 99.99996% is not
/// shown as 100%.
fn floor3(x: f64) -> String {
    // The epsilon keeps 99.95 from reading 99.949 (0.9995 * 100 in binary).
    let cut = (x * 1000.0 + 1e-6).floor() / 1000.0;
    let text = format!("{cut:.3}");
    let text = text.trim_end_matches('0').trim_end_matches('.');
    if text == "-0" {
        "0".into()
    } else {
        text.into()
    }
}

fn rfc3339(secs: u64) -> Option<String> {
    chrono::DateTime::from_timestamp(secs as i64, 0)
        .map(|t| t.format("%Y-%m-%dT%H:%M:%SZ").to_string())
}

/// "45s", "43m", "7h12m", "3d4h"; negative with a minus.
pub fn short_duration(secs: i64) -> String {
    let sign = if secs < 0 { "-" } else { "" };
    let s = secs.unsigned_abs();
    let (d, h, m) = (s / 86_400, s % 86_400 / 3600, s % 3600 / 60);
    let body = match () {
        _ if s < 60 => format!("{s}s"),
        _ if s < 3600 => format!("{m}m"),
        _ if s < 86_400 && m == 0 => format!("{h}h"),
        _ if s < 86_400 => format!("{h}h{m}m"),
        _ if h == 0 => format!("{d}d"),
        _ => format!("{d}d{h}h"),
    };
    format!("{sign}{body}")
}

/// The ledger an inherited status.slo carries, if it is one we can read.
pub fn inherited(slo: Option<SloStatus>) -> Option<Snapshot> {
    Snapshot::parse(&slo?.ledger).ok()
}

/// What a summary compares: a new objective or window is written at once.
pub fn summary(s: Option<&SloStatus>) -> Option<(String, String)> {
    s.map(|s| (s.objective.clone(), s.window.clone()))
}

#[cfg(test)]
mod tests;
