//! How many handovers (drains) may be in progress at once, sized from the
//! API server's measured answer time to the sharder's writes.
//!
//! Every handover is two writes in sequence (the sharder's drain, the old
//! owner's acknowledgement) and leaves its checker unprobed from the drain to
//! the new owner's first probe. When the API server answers quickly, a wide
//! window finishes a rebalance in a few seconds; when our writes queue there
//! (its answer time grows well past the quickest seen lately) each handover
//! waits behind all the others, so the window narrows. Shed or unanswered
//! writes (429, 5xx, timeouts) halve it at once. Pure logic: fed samples and
//! the time, asked for the width.

use std::time::{Duration, Instant};

/// The window never goes below this: a rebalance always progresses.
pub const MIN_WINDOW: usize = 8;
/// Nor above this: the sharder keeps 64 writes in flight, and a window much
/// wider than what it can write in one round trip only queues drains.
pub const MAX_WINDOW: usize = 256;
/// Where a sharder starts, before it has measured anything.
pub const START_WINDOW: usize = 32;
/// How often the width is reconsidered.
const STEP: Duration = Duration::from_millis(200);
/// The quickest answer is looked for over the last two spans of this.
const BASE_SPAN: Duration = Duration::from_secs(10);
/// An answer time within this factor of the quickest seen lately (plus
/// [`SLACK`], for API servers whose quickest answer is a millisecond) means
/// our writes do not queue.
const QUEUE_FACTOR: f64 = 2.0;
const SLACK: Duration = Duration::from_millis(20);

#[derive(Debug)]
pub struct Window {
    width: usize,
    /// Smoothed answer time of successful writes (1/8 per sample).
    smoothed: Option<Duration>,
    /// Quickest answer in the current and the previous span.
    base_now: Option<Duration>,
    base_prev: Option<Duration>,
    span_start: Instant,
    last_step: Instant,
    /// A write was shed or went unanswered since the last step.
    shed: bool,
}

impl Window {
    pub fn new(now: Instant) -> Self {
        Window {
            width: START_WINDOW,
            smoothed: None,
            base_now: None,
            base_prev: None,
            span_start: now,
            last_step: now,
            shed: false,
        }
    }

    pub fn width(&self) -> usize {
        self.width
    }

    /// A write the API server answered (written or refused on its merits)
    /// after `took`.
    pub fn answered(&mut self, took: Duration, now: Instant) {
        if now.saturating_duration_since(self.span_start) >= BASE_SPAN {
            self.base_prev = self.base_now.take();
            self.span_start = now;
        }
        self.base_now = Some(self.base_now.map_or(took, |b| b.min(took)));
        self.smoothed = Some(match self.smoothed {
            None => took,
            Some(s) => (s * 7 + took) / 8,
        });
    }

    /// A write shed (429, 503) or unanswered within the call deadline.
    pub fn shed(&mut self) {
        self.shed = true;
    }

    /// The answer time under which our writes are taken not to queue.
    pub fn target(&self) -> Option<Duration> {
        let base = match (self.base_now, self.base_prev) {
            (Some(a), Some(b)) => a.min(b),
            (a, b) => a.or(b)?,
        };
        Some(base.mul_f64(QUEUE_FACTOR) + SLACK)
    }

    /// Reconsiders the width at most every [`STEP`]: halve after a shed
    /// write, widen by a quarter while answers are quick, halve when they
    /// take more than twice the target, hold in between.
    pub fn step(&mut self, now: Instant) {
        if now.saturating_duration_since(self.last_step) < STEP {
            return;
        }
        self.last_step = now;
        let w = self.width;
        self.width = if std::mem::take(&mut self.shed) {
            w / 2
        } else {
            match (self.smoothed, self.target()) {
                (Some(s), Some(t)) if s <= t => w + w / 4,
                (Some(s), Some(t)) if s > t * 2 => w / 2,
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
            w.answered(took, *t);
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
    fn answers_queued_at_the_api_server_narrow_it_and_it_recovers() {
        let mut t = Instant::now();
        let mut w = Window::new(t);
        feed(&mut w, &mut t, 10 * MS, 20);
        assert_eq!(w.width(), MAX_WINDOW);
        // Our writes queue: answers ten times slower than the quickest.
        let narrowed = feed(&mut w, &mut t, 100 * MS, 20);
        assert_eq!(narrowed, MIN_WINDOW);
        // Moderately slower (within twice the target): held.
        let mut t2 = Instant::now();
        let mut h = Window::new(t2);
        feed(&mut h, &mut t2, 10 * MS, 3);
        let before = h.width();
        feed(&mut h, &mut t2, 50 * MS, 5);
        assert!(h.width() >= before, "{} < {before}", h.width());
        // The queue drains: quick again, wide again.
        assert_eq!(feed(&mut w, &mut t, 10 * MS, 40), MAX_WINDOW);
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
    fn the_quickest_answer_is_forgotten_after_two_spans() {
        let mut t = Instant::now();
        let mut w = Window::new(t);
        w.answered(MS, t);
        assert_eq!(w.target(), Some(2 * MS + SLACK));
        // The API server got slower for good (another load, a bigger etcd):
        // after two spans the target follows, and the window is not held
        // narrow by a quick answer of long ago.
        t += BASE_SPAN;
        w.answered(40 * MS, t);
        assert_eq!(w.target(), Some(2 * MS + SLACK));
        t += BASE_SPAN;
        w.answered(40 * MS, t);
        assert_eq!(w.target(), Some(80 * MS + SLACK));
    }

    #[test]
    fn without_a_sample_it_holds_its_start() {
        let t = Instant::now();
        let mut w = Window::new(t);
        w.step(t + 10 * STEP);
        assert_eq!(w.width(), START_WINDOW);
    }
}
