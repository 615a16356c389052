//! The membership gate as a pure state machine: what this replica may do
//! (dispatch probes, write status, judge other members) given what its Lease
//! renewals heard and what its own clock saw. No I/O, no locks: the caller
//! passes `now`, so every rule is unit-tested in milliseconds.
//!
//! Timestamps of a renewal are taken when the attempt *starts*: an answer read
//! after a pause (a 200 already in the socket buffer at SIGCONT) proves the
//! Lease was ours when the request was sent, not when we read the answer.
//!
//! A pause is seen directly: a ticker (and every gate check) records that the
//! process runs; a gap longer than `pause_after` between two such records
//! means the process was stopped (SIGSTOP, a stall). After a pause nothing is
//! dispatched until a renewal attempt *started after it* is answered. A gap is
//! never inferred from missing renewals, so an API outage (attempts made, no
//! answer) is never mistaken for a pause.

use std::time::{Duration, Instant};

#[derive(Clone, Copy, Debug)]
pub struct Timing {
    pub lease_duration: Duration,
    pub renew_deadline: Duration,
    pub retry_period: Duration,
}

impl Timing {
    /// A gap in the process's own heartbeat longer than this is a pause.
    pub fn pause_after(&self) -> Duration {
        self.retry_period * 2
    }
}

/// How one renewal attempt ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answer {
    /// Renewed; the Lease's new resourceVersion.
    Renewed(String),
    /// The API server answered that the Lease is not ours (404, 409 with a
    /// foreign UID): fence.
    Lost,
    /// The API server answered, but refused (401, 403, 422, other 4xx): the
    /// Lease will expire under us and we may never hear so.
    Rejected,
    /// No answer (timeout, connection error) or an answer that says nothing of
    /// the Lease (429, 5xx).
    Unanswered,
}

#[derive(Clone, Debug)]
pub struct Gate {
    timing: Timing,
    /// UID of the Lease we hold; `None` while we hold none.
    epoch: Option<String>,
    resource_version: Option<String>,
    /// Start of the last attempt that renewed (or of the create that joined).
    last_success: Instant,
    /// Start of the current run of successful renewals, ended by a refusal,
    /// a pause or a run of failures longer than the renew deadline: the
    /// judge's clock (see `judge_since`).
    healthy_since: Option<Instant>,
    /// The last answer was a refusal: overdue then means "stop", not "keep probing".
    rejected: bool,
    reachable: bool,
    /// Last time the process was seen running.
    last_alive: Instant,
    /// When a pause was detected; cleared by an answer to an attempt started after it.
    paused_at: Option<Instant>,
    /// Start of the latest attempt whose answer was recorded: attempts
    /// overlap, and an older one's late answer says nothing newer.
    last_answer_start: Option<Instant>,
}

/// What a gate check found beyond its yes/no.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Seen {
    Nothing,
    /// This check detected a pause (count it, log it, renew now).
    PauseDetected,
}

impl Gate {
    pub fn new(timing: Timing, now: Instant) -> Self {
        Gate {
            timing,
            epoch: None,
            resource_version: None,
            last_success: now,
            healthy_since: None,
            rejected: false,
            reachable: true,
            last_alive: now,
            paused_at: None,
            last_answer_start: None,
        }
    }

    pub fn timing(&self) -> Timing {
        self.timing
    }

    pub fn epoch(&self) -> Option<&str> {
        self.epoch.as_deref()
    }

    #[cfg(test)]
    pub fn resource_version(&self) -> Option<&str> {
        self.resource_version.as_deref()
    }

    pub fn reachable(&self) -> bool {
        self.reachable
    }

    #[cfg(test)]
    pub fn paused(&self) -> bool {
        self.paused_at.is_some()
    }

    /// The process runs at `now`. Detects a pause from the gap since the last record.
    pub fn alive(&mut self, now: Instant) -> Seen {
        let gap = now.saturating_duration_since(self.last_alive);
        self.last_alive = self.last_alive.max(now);
        if gap > self.timing.pause_after() && self.epoch.is_some() {
            self.paused_at = Some(now);
            self.healthy_since = None;
            return Seen::PauseDetected;
        }
        Seen::Nothing
    }

    /// The Lease was created (joined) by a request started at `started`.
    pub fn joined(&mut self, uid: String, rv: String, started: Instant, now: Instant) {
        self.epoch = Some(uid);
        self.resource_version = Some(rv);
        self.last_success = started;
        self.healthy_since = Some(now);
        self.rejected = false;
        self.reachable = true;
        self.paused_at = None;
        self.last_alive = self.last_alive.max(now);
        self.last_answer_start = Some(started);
    }

    /// The Lease was given up (graceful shutdown).
    pub fn released(&mut self) {
        self.epoch = None;
        self.resource_version = None;
        self.healthy_since = None;
    }

    /// Applies the answer to an attempt started at `started`. Returns true when
    /// the Lease is lost (fence now).
    pub fn answered(&mut self, started: Instant, answer: Answer, now: Instant) -> bool {
        // A loss is news whenever it was heard (the UID decides it); anything
        // else from an attempt older than one already answered is stale.
        if answer != Answer::Lost && self.last_answer_start.is_some_and(|l| started < l) {
            return false;
        }
        self.last_answer_start = Some(started);
        let after_pause = self.paused_at.is_none_or(|p| started >= p);
        match answer {
            Answer::Renewed(rv) => {
                // A run of failures longer than the renew deadline (an
                // outage of ours, not a busy API server's odd 429) restarts
                // the judge's clock; shorter ones only stop it meanwhile
                // (`judge_since` is None while unreachable).
                let outage = started.saturating_duration_since(self.last_success)
                    > self.timing.renew_deadline;
                self.resource_version = Some(rv);
                self.last_success = self.last_success.max(started);
                self.reachable = true;
                self.rejected = false;
                if after_pause {
                    self.paused_at = None;
                    if outage {
                        self.healthy_since = Some(now);
                    } else {
                        self.healthy_since.get_or_insert(now);
                    }
                }
                false
            }
            Answer::Lost => {
                self.epoch = None;
                self.resource_version = None;
                self.healthy_since = None;
                self.paused_at = None;
                self.reachable = true;
                true
            }
            Answer::Rejected => {
                self.reachable = true;
                self.rejected = true;
                self.healthy_since = None;
                false
            }
            Answer::Unanswered => {
                self.reachable = false;
                false
            }
        }
    }

    /// No attempt answered for longer than the renew deadline: a real
    /// outage on our path, after which a watch opened meanwhile may hang
    /// (one slow answer on a busy API server is not one).
    pub fn cut_off(&self, now: Instant) -> bool {
        !self.reachable && self.overdue(now)
    }

    /// Our last renewal is less than a lease duration old: if the Lease is
    /// lost now, nobody can have seen it expire, so it was taken on evidence
    /// that this process is gone (peers found its address refusing), which
    /// was false (see `crate::coordination::shard::peers`).
    pub fn within_lease(&self, now: Instant) -> bool {
        self.epoch.is_some()
            && self.paused_at.is_none()
            && now.saturating_duration_since(self.last_success) < self.timing.lease_duration
    }

    fn overdue(&self, now: Instant) -> bool {
        now.saturating_duration_since(self.last_success) > self.timing.renew_deadline
    }

    /// May a probe start (or send its request) now?
    pub fn dispatch_allowed(&mut self, now: Instant) -> (bool, Seen) {
        let seen = self.alive(now);
        if self.epoch.is_none() || self.paused_at.is_some() {
            return (false, seen);
        }
        // Overdue with attempts unanswered: the API server is away, keep probing
        // (a monitor must not go blind). Overdue after a refusal: the Lease
        // expires under us and we may never hear it, so stop.
        (!(self.overdue(now) && self.rejected), seen)
    }

    /// May status be written now? Only while the Lease is known to be ours.
    pub fn can_write(&self, now: Instant) -> bool {
        self.epoch.is_some()
            && self.paused_at.is_none()
            && self.reachable
            && !self.rejected
            && !self.overdue(now)
            && now.saturating_duration_since(self.last_alive) <= self.timing.pause_after()
    }

    /// Since when this replica may count time against other members' Leases:
    /// the start of its current run of successful renewals. `None` while it
    /// could not write (a failure, a pause, overdue): then no one may be judged.
    pub fn judge_since(&self, now: Instant) -> Option<Instant> {
        if !self.can_write(now) {
            return None;
        }
        self.healthy_since
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    fn timing() -> Timing {
        Timing {
            lease_duration: 3000 * MS,
            renew_deadline: 2000 * MS,
            retry_period: 500 * MS,
        }
    }

    fn joined(t0: Instant) -> Gate {
        let mut g = Gate::new(timing(), t0);
        g.joined("uid".into(), "1".into(), t0, t0);
        g
    }

    /// Keeps the heartbeat going from `from` to `to` (no pause in between).
    fn tick(g: &mut Gate, from: Instant, to: Instant) {
        let mut t = from;
        while t < to {
            t += 100 * MS;
            assert_eq!(g.alive(t), Seen::Nothing);
        }
    }

    #[test]
    fn an_outage_keeps_probing_and_stops_writing() {
        let t0 = Instant::now();
        let mut g = joined(t0);
        let end = t0 + 10_000 * MS;
        let mut t = t0;
        while t < end {
            tick(&mut g, t, t + 500 * MS);
            t += 500 * MS;
            g.answered(t - 500 * MS, Answer::Unanswered, t);
        }
        assert_eq!(g.dispatch_allowed(end), (true, Seen::Nothing));
        assert!(!g.can_write(end));
        assert_eq!(g.judge_since(end), None);
    }

    #[test]
    fn a_late_answer_of_an_older_attempt_changes_nothing() {
        let t0 = Instant::now();
        let mut g = joined(t0);
        tick(&mut g, t0, t0 + 1500 * MS);
        // Attempt A (t0 + 500 ms) hangs; B (t0 + 1 s) renews; A times out.
        g.answered(t0 + 1000 * MS, Answer::Renewed("2".into()), t0 + 1010 * MS);
        let healthy = g.judge_since(t0 + 1010 * MS);
        assert!(healthy.is_some());
        g.answered(t0 + 500 * MS, Answer::Unanswered, t0 + 1500 * MS);
        assert!(g.reachable());
        assert!(g.can_write(t0 + 1500 * MS));
        assert_eq!(g.judge_since(t0 + 1500 * MS), healthy);
        assert_eq!(g.resource_version(), Some("2"));
        // A loss is news however old the attempt that heard it.
        assert!(g.answered(t0 + 500 * MS, Answer::Lost, t0 + 1500 * MS));
        assert_eq!(g.epoch(), None);
    }

    #[test]
    fn a_pause_holds_probes_until_an_attempt_started_after_it_is_answered() {
        let t0 = Instant::now();
        let mut g = joined(t0);
        // A renewal is sent at t0 + 100 ms, then the process stops for 5 s.
        let sent = t0 + 100 * MS;
        let resumed = t0 + 5100 * MS;
        // The 200 that was already in the socket buffer is read first.
        g.answered(sent, Answer::Renewed("2".into()), resumed);
        // Without the start stamp this answer would have cleared the gate.
        assert!(!g.dispatch_allowed(resumed).0);
        assert!(g.paused());
        assert!(!g.can_write(resumed));
        // A fresh attempt, started after the pause was seen, is answered.
        let again = resumed + 10 * MS;
        g.answered(again, Answer::Renewed("3".into()), again + 20 * MS);
        assert_eq!(g.dispatch_allowed(again + 30 * MS), (true, Seen::Nothing));
    }

    #[test]
    fn a_pause_is_detected_by_the_gate_itself_before_the_ticker_runs() {
        let t0 = Instant::now();
        let mut g = joined(t0);
        let (allowed, seen) = g.dispatch_allowed(t0 + 1500 * MS);
        assert!(!allowed);
        assert_eq!(seen, Seen::PauseDetected);
    }

    #[test]
    fn an_outage_is_never_taken_for_a_pause() {
        // Attempts time out one after another for a minute; the heartbeat runs.
        let t0 = Instant::now();
        let mut g = joined(t0);
        tick(&mut g, t0, t0 + 60_000 * MS);
        g.answered(t0 + 59_000 * MS, Answer::Unanswered, t0 + 59_500 * MS);
        assert!(!g.paused());
        assert!(g.dispatch_allowed(t0 + 60_000 * MS).0);
    }

    #[test]
    fn a_pause_during_an_outage_blinds_until_the_api_answers() {
        let t0 = Instant::now();
        let mut g = joined(t0);
        assert_eq!(g.alive(t0 + 4000 * MS), Seen::PauseDetected);
        g.answered(t0 + 4100 * MS, Answer::Unanswered, t0 + 4600 * MS);
        assert!(!g.dispatch_allowed(t0 + 4600 * MS).0);
        g.answered(t0 + 4700 * MS, Answer::Lost, t0 + 4800 * MS);
        assert!(g.epoch().is_none());
        assert!(!g.paused(), "acted on the answer");
    }

    #[test]
    fn a_refusal_stops_probing_once_overdue() {
        let t0 = Instant::now();
        let mut g = joined(t0);
        tick(&mut g, t0, t0 + 2500 * MS);
        g.answered(t0 + 2000 * MS, Answer::Rejected, t0 + 2010 * MS);
        assert!(g.dispatch_allowed(t0 + 1900 * MS).0, "not overdue yet");
        assert!(!g.dispatch_allowed(t0 + 2500 * MS).0);
        assert!(!g.can_write(t0 + 2500 * MS));
    }

    #[test]
    fn the_judge_clock_restarts_at_the_first_success_after_a_failure() {
        let t0 = Instant::now();
        let mut g = joined(t0);
        assert_eq!(g.judge_since(t0), Some(t0));
        tick(&mut g, t0, t0 + 5000 * MS);
        g.answered(t0 + 1000 * MS, Answer::Unanswered, t0 + 1500 * MS);
        assert_eq!(g.judge_since(t0 + 1600 * MS), None);
        let back = t0 + 4000 * MS;
        g.answered(back, Answer::Renewed("9".into()), back + 50 * MS);
        assert_eq!(g.judge_since(back + 60 * MS), Some(back + 50 * MS));
        // Further successes keep the clock running from there.
        g.answered(
            back + 500 * MS,
            Answer::Renewed("10".into()),
            back + 550 * MS,
        );
        assert_eq!(g.judge_since(back + 600 * MS), Some(back + 50 * MS));
    }

    /// A busy API server answers some renewals with 429: each one stops the
    /// judge until the next success, which resumes the clock where it was
    /// instead of restarting it (at a 30% share a restart per failure left
    /// the judge a clean lease in a row to wait for: minutes at 50%).
    #[test]
    fn a_failure_within_the_renew_deadline_only_stops_the_judge_meanwhile() {
        let t0 = Instant::now();
        let mut g = joined(t0);
        tick(&mut g, t0, t0 + 5000 * MS);
        for i in 1..=8u32 {
            let at = t0 + 500 * MS * i;
            if i % 3 == 0 {
                g.answered(at, Answer::Unanswered, at + 10 * MS);
                assert_eq!(g.judge_since(at + 20 * MS), None, "no judging unanswered");
            } else {
                g.answered(at, Answer::Renewed(format!("{i}")), at + 10 * MS);
                assert_eq!(g.judge_since(at + 20 * MS), Some(t0), "renewal {i}");
            }
        }
    }

    #[test]
    fn the_judge_clock_restarts_after_a_pause() {
        let t0 = Instant::now();
        let mut g = joined(t0);
        let resumed = t0 + 5000 * MS;
        assert_eq!(g.alive(resumed), Seen::PauseDetected);
        assert_eq!(g.judge_since(resumed), None);
        g.answered(resumed, Answer::Renewed("2".into()), resumed + 10 * MS);
        assert_eq!(g.judge_since(resumed + 20 * MS), Some(resumed + 10 * MS));
    }

    #[test]
    fn a_lost_lease_closes_every_gate() {
        let t0 = Instant::now();
        let mut g = joined(t0);
        assert!(g.answered(t0, Answer::Lost, t0));
        assert!(!g.dispatch_allowed(t0).0);
        assert!(!g.can_write(t0));
        assert_eq!(g.judge_since(t0), None);
    }

    #[test]
    fn a_lease_lost_within_its_duration_was_taken_on_evidence() {
        let t = timing();
        let t0 = Instant::now();
        let mut g = Gate::new(t, t0);
        assert!(!g.within_lease(t0), "no Lease held");
        g.joined("u1".into(), "1".into(), t0, t0);
        assert!(g.within_lease(t0 + t.retry_period));
        // A member cut off for a whole lease may be proven gone by the rules.
        assert!(!g.within_lease(t0 + t.lease_duration + Duration::from_millis(1)));
    }
}
