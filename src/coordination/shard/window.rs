//! How many handovers (drains) may be in progress at once, sized from the
//! API server's measured answer time to the sharder's writes.
//!
//! Every handover is two writes in sequence (the sharder's drain, the old
//! owner's acknowledgement), each followed by a watch delivery, and leaves
//! its checker unprobed from the drain to the new owner's first probe. While
//! writes are answered quickly a wide window finishes a rebalance in
//! seconds; once they queue at the API server (answers slower than
//! [`NARROW_ABOVE`], so that a handover's four steps no longer fit in about
//! a second) every handover waits behind the others, so the window narrows.
//! Shed or unanswered writes (429, 5xx, timeouts) halve it at once. Pure
//! logic: fed samples and the time, asked for the width.

use std::time::{Duration, Instant};

/// The window never goes below this: a rebalance always progresses.
pub const MIN_WINDOW: usize = 8;
/// Nor above this: the sharder keeps 64 writes in flight and each old owner
/// 4, so a wider window only queues drains.
pub const MAX_WINDOW: usize = 256;
/// Where a sharder starts, before it has measured anything.
pub const START_WINDOW: usize = 32;
/// How often the width is reconsidered.
const STEP: Duration = Duration::from_millis(200);
/// Answers (smoothed) quicker than this widen the window by a quarter.
pub const WIDEN_BELOW: Duration = Duration::from_millis(100);
/// Answers slower than this halve it: a handover is two writes and two
/// watch deliveries, and should take about a second at most.
pub const NARROW_ABOVE: Duration = Duration::from_millis(250);

#[derive(Debug)]
pub struct Window {
    width: usize,
    /// Smoothed answer time of answered writes (1/8 per sample).
    smoothed: Option<Duration>,
    last_step: Instant,
    /// A write was shed or went unanswered since the last step.
    shed: bool,
}

impl Window {
    pub fn new(now: Instant) -> Self {
        Window {
            width: START_WINDOW,
            smoothed: None,
            last_step: now,
            shed: false,
        }
    }

    pub fn width(&self) -> usize {
        self.width
    }

    /// The smoothed answer time, once there is one.
    pub fn smoothed(&self) -> Option<Duration> {
        self.smoothed
    }

    /// A write the API server answered (written or refused on its merits)
    /// after `took`.
    pub fn answered(&mut self, took: Duration) {
        self.smoothed = Some(match self.smoothed {
            None => took,
            Some(s) => (s * 7 + took) / 8,
        });
    }

    /// A write shed (429, 503) or unanswered within the call deadline.
    pub fn shed(&mut self) {
        self.shed = true;
    }

    /// Reconsiders the width at most every [`STEP`]: halve after a shed
    /// write or while answers are slow, widen by a quarter while they are
    /// quick, hold in between.
    pub fn step(&mut self, now: Instant) {
        if now.saturating_duration_since(self.last_step) < STEP {
            return;
        }
        self.last_step = now;
        let w = self.width;
        self.width = if std::mem::take(&mut self.shed) {
            w / 2
        } else {
            match self.smoothed {
                Some(s) if s < WIDEN_BELOW => w + w / 4,
                Some(s) if s > NARROW_ABOVE => w / 2,
                _ => w,
            }
        }
        .clamp(MIN_WINDOW, MAX_WINDOW);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    /// Feeds `n` answers of `took` each, one step apart; the width after.
    fn feed(w: &mut Window, t: &mut Instant, took: Duration, n: usize) -> usize {
        for _ in 0..n {
            *t += STEP;
            w.answered(took);
            w.step(*t);
        }
        w.width()
    }

    #[test]
    fn quick_answers_widen_the_window_to_its_bound() {
        let mut t = Instant::now();
        let mut w = Window::new(t);
        assert_eq!(w.width(), START_WINDOW);
        assert_eq!(feed(&mut w, &mut t, 5 * MS, 1), 40);
        assert_eq!(feed(&mut w, &mut t, 5 * MS, 30), MAX_WINDOW);
    }

    #[test]
    fn slow_answers_narrow_it_moderate_ones_hold_it_and_it_recovers() {
        let mut t = Instant::now();
        let mut w = Window::new(t);
        feed(&mut w, &mut t, 10 * MS, 20);
        assert_eq!(w.width(), MAX_WINDOW);
        // Our writes queue at the API server.
        assert_eq!(feed(&mut w, &mut t, 600 * MS, 40), MIN_WINDOW);
        // Between the two bounds: held.
        let held = feed(&mut w, &mut t, 170 * MS, 60);
        assert_eq!(feed(&mut w, &mut t, 170 * MS, 10), held);
        // The queue drains: quick again, wide again.
        assert_eq!(feed(&mut w, &mut t, 10 * MS, 60), MAX_WINDOW);
    }

    #[test]
    fn a_shed_write_halves_it_at_the_next_step_only() {
        let mut t = Instant::now();
        let mut w = Window::new(t);
        feed(&mut w, &mut t, 5 * MS, 30);
        w.shed();
        w.step(t + MS);
        assert_eq!(w.width(), MAX_WINDOW, "at most one step per {STEP:?}");
        w.step(t + STEP);
        assert_eq!(w.width(), MAX_WINDOW / 2);
        for _ in 0..10 {
            t += STEP;
            w.shed();
            w.step(t);
        }
        assert_eq!(w.width(), MIN_WINDOW);
    }

    #[test]
    fn without_a_sample_it_holds_its_start() {
        let t = Instant::now();
        let mut w = Window::new(t);
        w.step(t + 10 * STEP);
        assert_eq!(w.width(), START_WINDOW);
    }
}
