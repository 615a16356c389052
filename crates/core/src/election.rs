//! The leader election's rules, pure: when another holder's Lease counts as
//! stale, when a candidate takes the Lease, and how long each standing waits
//! before its next step. The elector (`src/coordination/shard/elector.rs`)
//! reads and writes the Lease and asks these.

use std::time::{Duration, Instant};

/// Whether we lead, and if not, why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Standing {
    Leading,
    /// Our renewals did not land in time; nobody else holds the Lease (yet).
    Lapsed,
    /// Someone else holds the Lease, or we never did.
    Follower,
}

/// Our observation of another holder's Lease: its resourceVersion and for
/// how long we have seen it unchanged. A run of failed reads longer than
/// the renew deadline does not count (the holder may have been as unable to
/// renew as we were to read, and it keeps leading through a shorter one);
/// shorter runs count, so a share of 429s neither restarts the count nor
/// slows it.
#[derive(Debug, Default)]
pub struct Observed {
    /// The version, and since when it counts as unchanged (moved later by
    /// the failed stretches).
    seen: Option<(String, Instant)>,
    /// Since when reads fail.
    failing_since: Option<Instant>,
}

impl Observed {
    pub fn read_failed(&mut self, now: Instant) {
        self.failing_since.get_or_insert(now);
    }

    /// Records a successful read; returns whether the holder is stale.
    pub fn saw(&mut self, rv: &str, now: Instant, timing: (Duration, Duration)) -> bool {
        let (lease_duration, renew_deadline) = timing;
        let gap = self
            .failing_since
            .take()
            .map_or(Duration::ZERO, |f| now.saturating_duration_since(f));
        let gap = if gap > renew_deadline {
            gap
        } else {
            Duration::ZERO
        };
        match &mut self.seen {
            Some((seen, at)) if seen == rv => *at += gap,
            _ => self.seen = Some((rv.to_string(), now)),
        }
        self.seen
            .as_ref()
            .is_some_and(|(_, at)| now.saturating_duration_since(*at) > lease_duration)
    }
}

/// Whether a candidate that read another holder's Lease takes it: when
/// nobody holds it, when the holder left it unrenewed for a lease
/// (`stale`), or when the peers found the holder's process gone (`gone`).
pub fn takes_over(holder: &str, stale: bool, gone: bool) -> bool {
    holder.is_empty() || stale || gone
}

/// The wait before the next election step: a retry period for the leader,
/// half of it for candidates. A leader whose call was shed (or a lapsed one,
/// still holding the Lease) tries again after a quarter, so a share of shed
/// calls does not let its renew deadline pass; candidates add no load to a
/// busy API server.
pub fn pause(standing: Standing, shed: bool, retry: Duration) -> Duration {
    match (standing, shed) {
        (Standing::Leading | Standing::Lapsed, true) => retry / 4,
        (Standing::Leading, false) => retry,
        _ => retry / 2,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lease 3 s, renew deadline 2 s.
    const TIMING: (Duration, Duration) = (Duration::from_secs(3), Duration::from_secs(2));

    #[test]
    fn an_outage_of_ours_stops_the_clock_on_the_holder_and_the_next_read_resumes_it() {
        let ms = Duration::from_millis(1);
        let mut o = Observed::default();
        let t0 = Instant::now();
        assert!(!o.saw("7", t0, TIMING));
        // An outage of ours: reads fail for 20 s, the holder could not renew either.
        o.read_failed(t0 + 1000 * ms);
        let back = t0 + Duration::from_secs(21);
        assert!(
            !o.saw("7", back, TIMING),
            "the outage is not the holder's silence"
        );
        // 1 s counted before the outage, 2 s after it: stale just past 3 s.
        assert!(!o.saw("7", back + 1999 * ms, TIMING));
        assert!(o.saw("7", back + 2001 * ms, TIMING));
        assert!(!o.saw("8", back + Duration::from_secs(4), TIMING));
    }

    /// A busy API server fails half the reads: a dead holder is found stale
    /// a lease after it last renewed (plus a read), as on a quiet one.
    #[test]
    fn a_share_of_failed_reads_neither_restarts_nor_slows_the_count() {
        let period = Duration::from_millis(250);
        let t0 = Instant::now();
        for pattern in [[false, true], [true, false]] {
            let mut o = Observed::default();
            let mut stale_at = None;
            for i in 0..40u32 {
                let at = t0 + period * i;
                if i > 0 && pattern[i as usize % 2] {
                    o.read_failed(at);
                } else if o.saw("7", at, TIMING) {
                    stale_at = Some(at - t0);
                    break;
                }
            }
            let stale_at = stale_at.expect("a holder that never renews goes stale");
            assert!(stale_at <= TIMING.0 + 2 * period, "{stale_at:?}");
        }
    }

    #[test]
    fn a_live_holder_keeps_the_lease_a_stale_or_gone_one_loses_it() {
        assert!(!takes_over("a", false, false));
        assert!(takes_over("", false, false));
        assert!(takes_over("a", true, false));
        assert!(takes_over("a", false, true));
    }
}
