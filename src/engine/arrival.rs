//! When a checker's first probe is due, by how it reached the engine. Pure:
//! the engine passes the instant and the random draw.

use std::time::{Duration, Instant};

/// Jitter of a new arrival's first probe, so that a burst of arrivals does
/// not reach the pool in one tick.
pub const ARRIVAL_JITTER: Duration = Duration::from_millis(100);

/// How a checker (re)entered the plan.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arrival {
    /// Listed into an empty table (start-up, or after a fence): its first
    /// probe is spread over an interval, so a whole shard does not start in
    /// one second.
    Listed,
    /// A new arrival the watch delivered at this instant: probed at once.
    New(Instant),
    /// Already known (its values were refreshed).
    Known,
}

/// Whether the engine's table is being filled from empty. Once a list has
/// finished, a checker that a later re-list brings (after a watch expired,
/// or after renewals went unanswered for longer than the renew deadline) is
/// a new arrival like one a watch event brings, not part of a start-up.
#[derive(Debug)]
pub struct Arrivals {
    cold: bool,
}

impl Default for Arrivals {
    fn default() -> Self {
        Arrivals { cold: true }
    }
}

impl Arrivals {
    /// How an upsert arrives: `initial` when it came from a (re)list.
    pub fn of(&self, initial: bool, seen: Instant) -> Arrival {
        if initial && self.cold {
            Arrival::Listed
        } else {
            Arrival::New(seen)
        }
    }

    /// A list finished: the table is warm.
    pub fn listed(&mut self) {
        self.cold = false;
    }

    /// Every checker was dropped (fenced): the next list fills an empty table.
    pub fn emptied(&mut self) {
        self.cold = true;
    }
}

/// When the first probe of a checker with this interval is due. `handover`:
/// the old owner's last probe, that many milliseconds ago (keep its
/// cadence). `draw` in [0, 1] places it within its spread.
pub fn first_due(
    now: Instant,
    interval: Duration,
    arrival: Arrival,
    handover_ms_ago: Option<i64>,
    draw: f64,
) -> Instant {
    if let Some(since) = handover_ms_ago {
        let wait = interval.as_millis() as i64 - since;
        return now + Duration::from_millis(wait.clamp(0, interval.as_millis() as i64) as u64);
    }
    let spread = match arrival {
        Arrival::Listed => interval,
        Arrival::New(_) | Arrival::Known => interval.min(ARRIVAL_JITTER),
    };
    now + spread.mul_f64(draw.clamp(0.0, 1.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    const S10: Duration = Duration::from_secs(10);

    #[test]
    fn the_first_list_spreads_over_an_interval_and_later_lists_do_not() {
        let t = Instant::now();
        let mut a = Arrivals::default();
        assert_eq!(a.of(true, t), Arrival::Listed);
        assert_eq!(first_due(t, S10, a.of(true, t), None, 1.0), t + S10);
        a.listed();
        // A re-list of a replica that already probes: what it did not know
        // is new, probed within the jitter (it was spread over 10 s).
        assert_eq!(a.of(true, t), Arrival::New(t));
        assert_eq!(
            first_due(t, S10, a.of(true, t), None, 1.0),
            t + ARRIVAL_JITTER
        );
        // Fenced: the next list fills an empty table again.
        a.emptied();
        assert_eq!(a.of(true, t), Arrival::Listed);
    }

    #[test]
    fn a_watch_event_is_a_new_arrival_even_during_the_first_list() {
        let t = Instant::now();
        let a = Arrivals::default();
        assert_eq!(a.of(false, t), Arrival::New(t));
        let due = first_due(t, S10, Arrival::New(t), None, 0.5);
        assert_eq!(due, t + ARRIVAL_JITTER / 2);
        // An interval shorter than the jitter bounds it.
        let short = Duration::from_millis(40);
        assert_eq!(first_due(t, short, Arrival::New(t), None, 1.0), t + short);
    }

    #[test]
    fn a_handover_keeps_the_old_owners_cadence() {
        let t = Instant::now();
        for arrival in [Arrival::Listed, Arrival::New(t), Arrival::Known] {
            assert_eq!(
                first_due(t, S10, arrival, Some(3_000), 0.9),
                t + Duration::from_secs(7)
            );
            // Overdue: at once; a clock ahead of the old owner's: one interval.
            assert_eq!(first_due(t, S10, arrival, Some(25_000), 0.9), t);
            assert_eq!(first_due(t, S10, arrival, Some(-5_000), 0.9), t + S10);
        }
    }
}
