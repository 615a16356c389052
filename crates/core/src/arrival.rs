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

/// Where in its interval a checker's probes settle: an offset on the wall
/// clock's grid of that interval, from a hash of its key. Checkers created
/// in one burst are probed at once (within the jitter), so without it they
/// would go on probing their targets and filling the pool in the same
/// second of every interval; every replica (and a restarted one) picks the
/// same offset.
pub fn phase(key: &str, interval: Duration) -> Duration {
    // The ring's hash: stable across builds and processes, unlike std's.
    let h = crate::ring::fnv1a64(key.as_bytes());
    Duration::from_millis(h % (interval.as_millis() as u64).max(1))
}

/// The checker's first slot after `now` (`now_unix_ms` on the wall clock):
/// at most one interval on.
pub fn next_slot(now: Instant, now_unix_ms: i64, interval: Duration, phase: Duration) -> Instant {
    let i = (interval.as_millis() as i64).max(1);
    let wait = (phase.as_millis() as i64 - now_unix_ms - 1).rem_euclid(i) + 1;
    now + Duration::from_millis(wait as u64)
}

/// How far from its slot a due time may lie and still count as on it: the
/// wall clock and the monotonic one are read apart and in whole
/// milliseconds, so a due time computed to land on the slot reads a
/// millisecond or two either side of it.
pub const PHASE_TOLERANCE: Duration = Duration::from_millis(10);

/// The probe after one due at `due` (`due_unix_ms` on the wall clock) of a
/// checker still settling into its `phase`, and whether it has settled. The
/// gap shrinks, never grows: the next probe is at the checker's slot if that
/// lies between half an interval and an interval on; else half an interval
/// after the slot before that, and the probe after it on the slot after it.
/// So a checker settles within two probes, never more than one interval
/// apart nor (but for the tolerance) less than half of one.
pub fn settling_due(
    due: Instant,
    due_unix_ms: i64,
    interval: Duration,
    phase: Duration,
) -> (Instant, bool) {
    let i = (interval.as_millis() as i64).max(1);
    let (half, tol) = (i / 2, PHASE_TOLERANCE.as_millis() as i64);
    // How long after its last slot the due time lies.
    let past = (due_unix_ms - phase.as_millis() as i64).rem_euclid(i);
    let to_slot = i - past;
    let (wait, settled) = if past <= tol || to_slot <= tol {
        (i, true)
    } else if to_slot + tol >= half {
        (to_slot, true)
    } else {
        (to_slot + half, false)
    };
    (due + Duration::from_millis(wait as u64), settled)
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

    #[test]
    fn a_checker_settles_into_its_phase_within_two_probes_and_no_gap_grows() {
        let t = Instant::now();
        let i = Duration::from_secs(10);
        let ms = |d: Duration| d.as_millis() as i64;
        for (wall, phase) in [
            (1_000, 6_000),
            (1_000, 2_000),
            (1_000, 1_000),
            (7_500, 0),
            (9_999, 5_000),
        ] {
            let phase = Duration::from_millis(phase);
            let (mut due, mut due_ms, mut probes) = (t, wall, 0);
            loop {
                let (next, settled) = settling_due(due, due_ms, i, phase);
                let gap = next - due;
                assert!(
                    gap + PHASE_TOLERANCE >= i / 2 && gap <= i,
                    "{wall} {phase:?}: gap {gap:?}"
                );
                due_ms += ms(gap);
                due = next;
                probes += 1;
                if settled {
                    break;
                }
            }
            assert!(probes <= 2, "{wall} {phase:?}: {probes} probes");
            assert_eq!(due_ms.rem_euclid(ms(i)), ms(phase), "{wall} {phase:?}");
        }
    }

    #[test]
    fn the_next_slot_is_within_an_interval_and_never_now() {
        let t = Instant::now();
        let i = Duration::from_secs(10);
        let ms = Duration::from_millis;
        assert_eq!(next_slot(t, 21_000, i, ms(4_000)), t + ms(3_000));
        assert_eq!(next_slot(t, 24_000, i, ms(4_000)), t + i);
        assert_eq!(next_slot(t, 24_001, i, ms(4_000)), t + ms(9_999));
        assert_eq!(next_slot(t, 23_999, i, ms(4_000)), t + ms(1));
    }

    #[test]
    fn a_due_time_read_a_millisecond_off_still_settles_and_stays() {
        // The wall clock read up to 1 ms either side of where the due time
        // lies, one way at one probe and the other at the next: it settles
        // within two probes all the same and then keeps the interval. (Read
        // exactly, a due time 1 ms past its slot was half an interval off
        // it, and the next one moved half an interval, in steady state.)
        let t = Instant::now();
        let i = Duration::from_secs(4);
        let phase = Duration::from_millis(1_234);
        for wall in [0, 1_000, 2_000, 3_233, 3_500, 3_999] {
            for skews in [[-1_i64, 1], [1, -1], [0, 1], [-1, 0]] {
                let (mut due, mut due_ms) = (t, wall);
                let mut gaps = Vec::new();
                let mut settled_after = None;
                for n in 0..6 {
                    let skew = skews[n % 2];
                    let (next, settled) = settling_due(due, due_ms + skew, i, phase);
                    if settled && settled_after.is_none() {
                        settled_after = Some(n + 1);
                    }
                    gaps.push((next - due).as_millis() as i64);
                    due_ms += (next - due).as_millis() as i64;
                    due = next;
                }
                assert!(
                    settled_after.is_some_and(|n| n <= 2),
                    "{wall} {skews:?}: {gaps:?}"
                );
                let at = settled_after.unwrap();
                assert!(
                    gaps[at..].iter().all(|g| *g == 4_000),
                    "{wall} {skews:?}: {gaps:?}"
                );
                let off = (due_ms - 1_234).rem_euclid(4_000);
                assert!(off.min(4_000 - off) <= 10, "{wall} {skews:?}: {off} ms off");
            }
        }
    }

    #[test]
    fn phases_are_fixed_per_key_and_spread_over_the_interval() {
        let i = Duration::from_secs(2);
        assert_eq!(phase("ns/c1", i), phase("ns/c1", i));
        assert!(phase("ns/c1", i) < i);
        // 3,000 keys like a burst's fall about evenly into tenths of it.
        let mut tenths = [0; 10];
        for n in 0..3000 {
            tenths[(phase(&format!("share-x/c{n}"), i).as_millis() / 200) as usize] += 1;
        }
        assert!(tenths.iter().all(|n| (240..=360).contains(n)), "{tenths:?}");
    }
}
