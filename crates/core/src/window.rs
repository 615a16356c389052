//! How many handovers (drains) may be in progress at once, sized from what
//! the sharder measures: the API server's answer time to its writes, and how
//! long handovers take from the drain to the old owner's acknowledgement.
//!
//! Every handover is two writes in sequence (the sharder's drain, the old
//! owner's acknowledgement), each followed by a watch delivery, and leaves
//! its checker unprobed from the old owner's last probe to the new owner's
//! first: a handover that takes longer than the rest of its checker's
//! interval makes that gap longer than the interval. While writes are
//! answered quickly and handovers end within half a second, a wide window
//! finishes a rebalance in seconds; once writes queue at the API server, or
//! the old owners' acknowledgements queue behind each other (each replica
//! writes a few at a time), handovers take longer, and the window narrows.
//! Shed or unanswered writes (429, 5xx, timeouts) halve it at once. Pure
//! logic: fed samples and the time, asked for the width.

use std::time::{Duration, Instant};

/// The window never goes below this: a rebalance always progresses.
pub const MIN_WINDOW: usize = 8;
/// Nor above this: the sharder keeps 64 writes in flight.
pub const MAX_WINDOW: usize = 256;
/// Where a sharder starts, before it has measured anything.
pub const START_WINDOW: usize = 32;
/// How often the width is reconsidered.
const STEP: Duration = Duration::from_millis(200);
/// Write answers (smoothed) quicker than this allow widening.
pub const WIDEN_BELOW: Duration = Duration::from_millis(100);
/// Slower than this halve the window.
pub const NARROW_ABOVE: Duration = Duration::from_millis(250);
/// Handovers (the 90th percentile of a step's) quicker than this allow
/// widening; slower than [`HANDOVER_NARROW`] halve the window.
pub const HANDOVER_WIDEN: Duration = Duration::from_millis(500);
pub const HANDOVER_NARROW: Duration = Duration::from_secs(1);
/// Fewer handovers than this in a step say nothing about their tail.
const HANDOVER_SAMPLES: usize = 10;

#[derive(Debug)]
pub struct Window {
    width: usize,
    /// Smoothed answer time of answered writes (1/8 per sample).
    smoothed: Option<Duration>,
    /// Handovers completed since the last step: how long each took.
    handovers: Vec<Duration>,
    last_step: Instant,
    /// A write was shed or went unanswered since the last step.
    shed: bool,
    /// The most handovers in progress since the last step ([`Window::in_use`]).
    peak_use: usize,
}

/// What the latest samples say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Signal {
    Quick,
    Slow,
    Between,
}

impl Window {
    pub fn new(now: Instant) -> Self {
        Window {
            width: START_WINDOW,
            smoothed: None,
            handovers: Vec::new(),
            last_step: now,
            shed: false,
            peak_use: 0,
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

    /// A handover completed `took` after its drain was seen.
    pub fn handed_over(&mut self, took: Duration) {
        self.handovers.push(took);
    }

    /// Handovers in progress right after a decision started its drains:
    /// the window's use peaks there, and quick handovers may all be done by
    /// the next step, so the step judges the use by the peak since the last.
    pub fn in_use(&mut self, in_progress: usize) {
        self.peak_use = self.peak_use.max(in_progress);
    }

    /// A write shed (429, 503) or unanswered within the call deadline.
    pub fn shed(&mut self) {
        self.shed = true;
    }

    fn writes(&self) -> Signal {
        match self.smoothed {
            Some(s) if s < WIDEN_BELOW => Signal::Quick,
            Some(s) if s > NARROW_ABOVE => Signal::Slow,
            Some(_) => Signal::Between,
            // Nothing written yet: nothing against widening.
            None => Signal::Quick,
        }
    }

    /// The 90th percentile of this step's handovers, when there are enough
    /// (a few checkers whose in-flight probe waits for a slow target must
    /// not narrow everyone's window).
    fn handovers(&mut self) -> Signal {
        let mut h = std::mem::take(&mut self.handovers);
        if h.len() < HANDOVER_SAMPLES {
            return Signal::Quick;
        }
        let i = (h.len() * 9 / 10).min(h.len() - 1);
        let p90 = *h.select_nth_unstable(i).1;
        if p90 < HANDOVER_WIDEN {
            Signal::Quick
        } else if p90 > HANDOVER_NARROW {
            Signal::Slow
        } else {
            Signal::Between
        }
    }

    /// Reconsiders the width at most every [`STEP`]: halve after a shed
    /// write, or while writes or handovers are slow; widen by a quarter
    /// while both are quick and the window is in use (`in_progress`
    /// handovers, or the peak since the last step, fill three quarters of
    /// it: an idle sharder's quick writes
    /// say nothing of how a rebalance's handovers will go, so each one
    /// starts from the width it earned, not a width grown while idle);
    /// hold in between.
    pub fn step(&mut self, now: Instant, in_progress: usize) {
        if now.saturating_duration_since(self.last_step) < STEP {
            return;
        }
        self.last_step = now;
        let w = self.width;
        let in_progress = in_progress.max(std::mem::take(&mut self.peak_use));
        let (writes, handovers) = (self.writes(), self.handovers());
        self.width = if std::mem::take(&mut self.shed) {
            w / 2
        } else {
            match (writes, handovers) {
                (Signal::Slow, _) | (_, Signal::Slow) => w / 2,
                (Signal::Quick, Signal::Quick)
                    if self.smoothed.is_some() && in_progress * 4 >= w * 3 =>
                {
                    w + w / 4
                }
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
            w.step(*t, w.width());
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
        w.step(t + MS, MAX_WINDOW);
        assert_eq!(w.width(), MAX_WINDOW, "at most one step per {STEP:?}");
        w.step(t + STEP, MAX_WINDOW);
        assert_eq!(w.width(), MAX_WINDOW / 2);
        for _ in 0..10 {
            t += STEP;
            w.shed();
            w.step(t, MAX_WINDOW);
        }
        assert_eq!(w.width(), MIN_WINDOW);
    }

    /// The old owners' acknowledgements queue (each replica writes a few
    /// at a time) while the sharder's own writes are quick: the handovers'
    /// tail narrows the window; a minority of slow ones (probes in flight
    /// on slow targets) does not.
    #[test]
    fn slow_handovers_narrow_it_a_few_slow_ones_do_not() {
        let mut t = Instant::now();
        let mut w = Window::new(t);
        feed(&mut w, &mut t, 5 * MS, 30);
        assert_eq!(w.width(), MAX_WINDOW);
        let step = |w: &mut Window, t: &mut Instant, quick: usize, slow: usize| {
            *t += STEP;
            w.answered(5 * MS);
            for _ in 0..quick {
                w.handed_over(200 * MS);
            }
            for _ in 0..slow {
                w.handed_over(Duration::from_secs(3));
            }
            w.step(*t, w.width());
            w.width()
        };
        assert_eq!(
            step(&mut w, &mut t, 19, 1),
            MAX_WINDOW,
            "5% slow: the tail is fine"
        );
        assert_eq!(step(&mut w, &mut t, 15, 5), MAX_WINDOW / 2);
        assert_eq!(step(&mut w, &mut t, 0, 20), MAX_WINDOW / 4);
        // Between the bounds: held; too few samples: writes decide.
        for _ in 0..20 {
            t += STEP;
            w.answered(5 * MS);
            (0..20).for_each(|_| w.handed_over(700 * MS));
            w.step(t, MAX_WINDOW);
        }
        assert_eq!(w.width(), MAX_WINDOW / 4);
        assert_eq!(step(&mut w, &mut t, 0, 3), MAX_WINDOW / 4 + MAX_WINDOW / 16);
    }

    #[test]
    fn without_a_sample_it_holds_its_start() {
        let t = Instant::now();
        let mut w = Window::new(t);
        w.step(t + 10 * STEP, START_WINDOW);
        assert_eq!(w.width(), START_WINDOW);
    }

    /// Quick writes while nothing is handed over (new checkers, status
    /// changes) do not widen it: the next rebalance starts at the width the
    /// last one ended with, and earns more with quick handovers.
    #[test]
    fn an_idle_window_does_not_grow() {
        let mut t = Instant::now();
        let mut w = Window::new(t);
        for _ in 0..50 {
            t += STEP;
            w.answered(5 * MS);
            w.step(t, 3);
        }
        assert_eq!(w.width(), START_WINDOW);
        t += STEP;
        w.step(t, START_WINDOW * 3 / 4);
        assert_eq!(w.width(), 40);
    }

    /// Handovers that finish within a decision's spacing leave few in
    /// progress at the next step: the window is full right after each
    /// decision, and that is what counts.
    #[test]
    fn a_window_filled_after_each_decision_grows() {
        let mut t = Instant::now();
        let mut w = Window::new(t);
        for _ in 0..30 {
            t += STEP;
            w.answered(5 * MS);
            w.handed_over(40 * MS);
            w.in_use(w.width());
            w.step(t, 0);
        }
        assert_eq!(w.width(), MAX_WINDOW);
        // Without the peak, the same steps hold it.
        let mut w = Window::new(t);
        for _ in 0..30 {
            t += STEP;
            w.answered(5 * MS);
            w.step(t, 0);
        }
        assert_eq!(w.width(), START_WINDOW);
    }
}
