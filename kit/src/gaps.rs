//! Probe gaps from a witness's log: how long a checker went unprobed. The
//! primitives work on one checker's sorted probe starts; the tests call them
//! through [`largest_gap`] and [`failover_gap`] over `Hit`s, the bench over
//! an interned [`ProbeLog`](crate::oracle::ProbeLog).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::Hit;

/// Across an event at `at`: from the last probe at or before it (`at` if
/// none) to the first probe after it; None while there is none after it.
pub fn gap_across(starts: &[Instant], at: Instant) -> Option<Duration> {
    let before = starts
        .iter()
        .rev()
        .find(|t| **t <= at)
        .copied()
        .unwrap_or(at);
    starts.iter().find(|t| **t > at).map(|t| *t - before)
}

/// Largest gap between consecutive probes that started in [from, to],
/// counting from `start` (`from`, or the last probe before it) and up to `to`.
pub fn largest_gap_in(starts: &[Instant], start: Instant, from: Instant, to: Instant) -> Duration {
    let mut worst = Duration::ZERO;
    let mut prev = start;
    for t in starts.iter().filter(|t| **t >= from && **t <= to) {
        worst = worst.max(t.saturating_duration_since(prev));
        prev = *t;
    }
    worst.max(to.saturating_duration_since(prev))
}

/// The last probe at or before `at`, or `at`.
pub fn last_before(starts: &[Instant], at: Instant) -> Instant {
    starts
        .iter()
        .rev()
        .find(|t| **t <= at)
        .copied()
        .unwrap_or(at)
}

/// Probe starts of each checker in `hits`, sorted.
pub fn starts_by_checker(hits: &[Hit]) -> HashMap<&str, Vec<Instant>> {
    let mut by: HashMap<&str, Vec<Instant>> = HashMap::new();
    for h in hits {
        by.entry(h.checker.as_str()).or_default().push(h.start);
    }
    for v in by.values_mut() {
        v.sort();
    }
    by
}

/// Largest gap between consecutive probes of each checker, over `[from, to]`
/// (counted from `from`); the gap and its checker.
pub fn largest_gap(
    hits: &[Hit],
    checkers: &[String],
    from: Instant,
    to: Instant,
) -> (Duration, String) {
    worst_gap(hits, checkers, to, |_| from, from)
}

/// As [`largest_gap`], counted from each checker's last probe before
/// `from`: what an event at `from` cost, the gap that straddles it included.
pub fn largest_gap_across(
    hits: &[Hit],
    checkers: &[String],
    from: Instant,
    to: Instant,
) -> (Duration, String) {
    worst_gap(hits, checkers, to, |starts| last_before(starts, from), from)
}

/// The largest of the checkers' gaps over `[from, to]`, each counted from
/// `start(its probe starts)`.
fn worst_gap(
    hits: &[Hit],
    checkers: &[String],
    to: Instant,
    start: impl Fn(&[Instant]) -> Instant,
    from: Instant,
) -> (Duration, String) {
    let by = starts_by_checker(hits);
    let mut worst = (Duration::ZERO, String::new());
    for c in checkers {
        let starts = by.get(c.as_str()).map(Vec::as_slice).unwrap_or(&[]);
        let gap = largest_gap_in(starts, start(starts), from, to);
        if gap > worst.0 {
            worst = (gap, c.clone());
        }
    }
    worst
}

/// For the checkers in `of`, the longest time between the last probe before
/// `at` and the first probe after it (`Duration::MAX` while one has not been
/// probed again); the gap and its checker.
pub fn failover_gap(hits: &[Hit], of: &[String], at: Instant) -> (Duration, String) {
    let by = starts_by_checker(hits);
    let mut worst = (Duration::ZERO, String::new());
    for c in of {
        let starts = by.get(c.as_str()).map(Vec::as_slice).unwrap_or(&[]);
        let gap = gap_across(starts, at).unwrap_or(Duration::MAX);
        if gap > worst.0 {
            worst = (gap, c.clone());
        }
    }
    worst
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gaps_on_a_made_up_history() {
        let t0 = Instant::now();
        let s = |x: u64| t0 + Duration::from_secs(x);
        let starts = [s(0), s(10), s(20), s(45), s(55)];
        assert_eq!(gap_across(&starts, s(25)), Some(Duration::from_secs(25)));
        assert_eq!(gap_across(&starts, s(60)), None);
        assert_eq!(
            largest_gap_in(&starts, s(5), s(5), s(60)),
            Duration::from_secs(25)
        );
        // Counted from the probe before `from`, the first gap is longer.
        assert_eq!(
            largest_gap_in(&starts, last_before(&starts, s(42)), s(42), s(50)),
            Duration::from_secs(25)
        );
        assert_eq!(
            largest_gap_in(&starts, s(42), s(42), s(50)),
            Duration::from_secs(5)
        );
    }
}
