//! Per-namespace fairness of the worker pool: the engine's ready queue.
//!
//! Due probes wait here, one FIFO per namespace. When a worker is free, the
//! next probe comes from the namespaces in turn (round robin), so one
//! namespace's backlog does not delay another's probes. Turns alone are not
//! enough: a namespace whose probes hold a worker for their whole timeout (a
//! black-holed zone, a hanging target) would end up holding every worker
//! while the others' millisecond probes come and go. So:
//!
//! - **Share.** A namespace with fewer probes in flight than its share,
//!   `ceil(workers / active namespaces)` (active: probes waiting or in
//!   flight), goes before the namespaces that are above theirs. Above its
//!   share a namespace may still take free workers (nobody else wants them:
//!   the pool stays work-conserving).
//! - **Reserve.** While another namespace with checkers has nothing in
//!   flight, a namespace that already has probes in flight leaves
//!   `workers / 8` workers free: a namespace with nothing in flight may take
//!   any free worker, so a tenant whose probe comes due finds a worker at once
//!   instead of waiting for someone else's slow probe to end. With a single
//!   namespace, or fewer than 8 workers, there is no reserve.
//! - **Borrowing is short.** The share and the reserve are judged when a
//!   probe starts, and a probe is never cut short; so beyond its guaranteed
//!   share, `ceil(workers / namespaces with checkers)`, a namespace may start
//!   only probes whose timeout is at most [`BORROW_HOLD`]: a borrowed worker
//!   comes back within a second. Otherwise a namespace whose targets accept
//!   and never answer, with long timeouts, would take every worker the
//!   others leave free for a moment and hold it for up to 10 minutes, while
//!   the others' probes come due and wait.
//!
//! Pure: the engine tells it what starts and ends; tested with a simulated
//! clock below.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

/// The longest a probe started on a borrowed worker may hold it: the default
/// timeout (1 s).
pub const BORROW_HOLD: Duration = Duration::from_secs(1);

#[derive(Default)]
struct Space {
    /// Due probes: checker key, due time, and how long the probe may hold
    /// a worker (its timeout).
    ready: VecDeque<(String, Instant, Duration)>,
    inflight: usize,
    /// Checkers of this namespace the engine holds (for the reserve).
    checkers: usize,
}

impl Space {
    fn active(&self) -> bool {
        !self.ready.is_empty() || self.inflight > 0
    }
    fn known(&self) -> bool {
        self.checkers > 0
    }
    fn idle_known(&self) -> bool {
        self.known() && self.inflight == 0
    }
    /// Whether the next probe may hold a worker longer than [`BORROW_HOLD`].
    fn next_is_long(&self) -> bool {
        self.ready
            .front()
            .is_some_and(|(_, _, hold)| *hold > BORROW_HOLD)
    }
}

pub struct FairQueue {
    workers: usize,
    reserve: usize,
    spaces: HashMap<String, Space>,
    /// Namespaces with due probes, in turn order.
    turn: VecDeque<String>,
    /// Counts kept as spaces change, so a pick does not scan every namespace.
    active: usize,
    idle_known: usize,
    known: usize,
    ready: usize,
}

impl FairQueue {
    pub fn new(workers: usize) -> Self {
        FairQueue {
            workers: workers.max(1),
            reserve: workers / 8,
            spaces: HashMap::new(),
            turn: VecDeque::new(),
            active: 0,
            idle_known: 0,
            known: 0,
            ready: 0,
        }
    }

    /// Applies `f` to a namespace's state and keeps the counts right; forgets
    /// a namespace that has nothing left.
    fn update<R>(&mut self, ns: &str, f: impl FnOnce(&mut Space) -> R) -> R {
        if !self.spaces.contains_key(ns) {
            self.spaces.insert(ns.to_string(), Space::default());
        }
        let s = self.spaces.get_mut(ns).expect("inserted above");
        let (was_active, was_idle, was_known, was_ready) =
            (s.active(), s.idle_known(), s.known(), s.ready.len());
        let r = f(s);
        let (active, idle, known, ready, empty) = (
            s.active(),
            s.idle_known(),
            s.known(),
            s.ready.len(),
            !s.active() && !s.known(),
        );
        self.active = self.active + active as usize - was_active as usize;
        self.idle_known = self.idle_known + idle as usize - was_idle as usize;
        self.known = self.known + known as usize - was_known as usize;
        self.ready = self.ready + ready - was_ready;
        if was_ready == 0 && ready > 0 {
            self.turn.push_back(ns.to_string());
        } else if was_ready > 0 && ready == 0 {
            self.turn.retain(|n| n != ns);
        }
        if empty {
            self.spaces.remove(ns);
        }
        r
    }

    pub fn add_checker(&mut self, ns: &str) {
        self.update(ns, |s| s.checkers += 1);
    }

    pub fn remove_checker(&mut self, ns: &str) {
        self.update(ns, |s| s.checkers = s.checkers.saturating_sub(1));
    }

    /// A probe came due; it may hold a worker for up to `hold`.
    pub fn push(&mut self, ns: &str, key: String, due: Instant, hold: Duration) {
        self.update(ns, |s| s.ready.push_back((key, due, hold)));
    }

    pub fn has_ready(&self) -> bool {
        self.ready > 0
    }

    /// Drops every due probe (shutdown, fence).
    pub fn clear_ready(&mut self) {
        let names: Vec<String> = self.turn.iter().cloned().collect();
        for ns in names {
            self.update(&ns, |s| s.ready.clear());
        }
    }

    /// The next probe to start when `free` workers are free (the caller holds
    /// one of them), or None when every waiting namespace must wait for a
    /// worker to come back. The caller reports the start with
    /// [`FairQueue::started`] (or drops a probe that is no longer wanted).
    pub fn pop(&mut self, free: usize) -> Option<(String, String, Instant)> {
        if free == 0 || self.turn.is_empty() {
            return None;
        }
        let share = self.workers.div_ceil(self.active.max(1));
        let guaranteed = self.workers.div_ceil(self.known.max(1));
        let reserve = self.reserve;
        let idle_known = self.idle_known;
        let may_take = |s: &Space| {
            // A namespace with nothing in flight may use the reserve; it is
            // kept only for someone else who has nothing in flight.
            let others_idle = idle_known > s.idle_known() as usize;
            let reserve_ok = s.inflight == 0 || !others_idle || free > reserve;
            reserve_ok && (s.inflight < guaranteed || !s.next_is_long())
        };
        let spaces = &self.spaces;
        let at = self
            .turn
            .iter()
            .position(|ns| {
                let s = &spaces[ns];
                s.inflight < share && may_take(s)
            })
            .or_else(|| self.turn.iter().position(|ns| may_take(&spaces[ns])))?;
        let ns = self.turn[at].clone();
        let (key, due, _) = self
            .update(&ns, |s| s.ready.pop_front())
            .expect("a namespace in turn has a due probe");
        // Still waiting with more: to the back of the line.
        if self.turn.get(at) == Some(&ns) {
            self.turn.remove(at);
            self.turn.push_back(ns.clone());
        }
        Some((ns, key, due))
    }

    pub fn started(&mut self, ns: &str) {
        self.update(ns, |s| s.inflight += 1);
    }

    pub fn finished(&mut self, ns: &str) {
        self.update(ns, |s| s.inflight = s.inflight.saturating_sub(1));
    }

    #[cfg(test)]
    fn inflight(&self, ns: &str) -> usize {
        self.spaces.get(ns).map_or(0, |s| s.inflight)
    }
}

#[cfg(test)]
mod tests {
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;
    use std::time::Duration;

    use super::*;

    const SHORT: Duration = BORROW_HOLD;

    fn t0() -> Instant {
        Instant::now()
    }

    /// Pops as many as `free` allows, marking each started; the namespaces in order.
    fn drain(q: &mut FairQueue, mut free: usize) -> Vec<String> {
        let mut out = Vec::new();
        while let Some((ns, _, _)) = q.pop(free) {
            q.started(&ns);
            out.push(ns);
            free -= 1;
        }
        out
    }

    #[test]
    fn namespaces_take_turns() {
        let mut q = FairQueue::new(6);
        let now = t0();
        for i in 0..5 {
            q.push("a", format!("a/{i}"), now, SHORT);
        }
        q.push("b", "b/0".into(), now, SHORT);
        q.push("b", "b/1".into(), now, SHORT);
        q.push("c", "c/0".into(), now, SHORT);
        assert_eq!(drain(&mut q, 6), ["a", "b", "c", "a", "b", "a"]);
        // Within a namespace, first due first.
        let mut q = FairQueue::new(4);
        q.push("a", "a/early".into(), now, SHORT);
        q.push("a", "a/late".into(), now + Duration::from_secs(1), SHORT);
        assert_eq!(q.pop(4).unwrap().1, "a/early");
    }

    #[test]
    fn one_namespace_alone_uses_the_whole_pool() {
        let mut q = FairQueue::new(16);
        q.add_checker("a");
        for i in 0..20 {
            q.push("a", format!("a/{i}"), t0(), SHORT);
        }
        assert_eq!(drain(&mut q, 16).len(), 16);
        assert!(q.has_ready());
        q.finished("a");
        assert_eq!(drain(&mut q, 1), ["a"]);
    }

    #[test]
    fn the_reserve_is_kept_for_a_namespace_with_nothing_in_flight() {
        let mut q = FairQueue::new(16);
        q.add_checker("slow");
        q.add_checker("quick");
        q.add_checker("idle");
        for i in 0..50 {
            q.push("slow", format!("slow/{i}"), t0(), SHORT);
        }
        // 16 / 8 = 2 workers stay free while "quick" has nothing in flight.
        assert_eq!(drain(&mut q, 16).len(), 14);
        assert_eq!(q.pop(2), None);
        // "quick" comes due: it takes the reserve at once.
        q.push("quick", "quick/0".into(), t0(), SHORT);
        q.push("quick", "quick/1".into(), t0(), SHORT);
        assert_eq!(
            drain(&mut q, 2),
            ["quick"],
            "the second waits: the last free worker is kept for \"idle\""
        );
        // Workers come back: two stay free for "idle"; the third goes to
        // "quick", which is under its share ("slow" is not).
        q.finished("slow");
        assert_eq!(drain(&mut q, 2), Vec::<String>::new());
        q.finished("slow");
        assert_eq!(drain(&mut q, 3), ["quick"]);
        assert_eq!(q.inflight("quick"), 2);
        // "quick" is done: "slow" may fill up to the reserve again.
        q.finished("quick");
        q.finished("quick");
        assert_eq!(drain(&mut q, 4), ["slow", "slow"]);
        assert_eq!(q.inflight("slow"), 14);
        // Nobody left to keep it for: "idle" and "quick" are gone.
        q.remove_checker("idle");
        q.remove_checker("quick");
        assert_eq!(drain(&mut q, 2), ["slow", "slow"]);
    }

    #[test]
    fn a_namespace_above_its_share_yields_to_one_below() {
        let mut q = FairQueue::new(8);
        q.add_checker("a");
        q.add_checker("b");
        for i in 0..20 {
            q.push("a", format!("a/{i}"), t0(), SHORT);
        }
        // 8 / 8 = 1 worker in reserve for "b".
        assert_eq!(drain(&mut q, 8).len(), 7);
        for i in 0..8 {
            q.push("b", format!("b/{i}"), t0(), SHORT);
        }
        // Every worker that comes back goes to "b" until both hold 4.
        let mut order = Vec::new();
        order.extend(drain(&mut q, 1));
        for _ in 0..6 {
            q.finished("a");
            order.extend(drain(&mut q, 1));
        }
        assert_eq!(q.inflight("b"), 4, "{order:?}");
        assert_eq!(q.inflight("a"), 4);
        assert_eq!(&order[..4], ["b", "b", "b", "b"]);
        // From then on a worker "a" gives back returns to it: at 3 it is
        // below its share, "b" at 4 is not.
        assert_eq!(&order[4..], ["a", "a", "a"]);
    }

    #[test]
    fn no_reserve_below_eight_workers_nor_when_everyone_is_busy() {
        let mut q = FairQueue::new(4);
        q.add_checker("a");
        q.add_checker("b");
        for i in 0..8 {
            q.push("a", format!("a/{i}"), t0(), SHORT);
        }
        assert_eq!(drain(&mut q, 4).len(), 4);
        let mut q = FairQueue::new(16);
        for ns in ["a", "b"] {
            q.add_checker(ns);
            for i in 0..20 {
                q.push(ns, format!("{ns}/{i}"), t0(), SHORT);
            }
        }
        assert_eq!(drain(&mut q, 16).len(), 16, "both busy: nothing to keep");
    }

    #[test]
    fn bookkeeping_forgets_empty_namespaces() {
        let mut q = FairQueue::new(4);
        q.add_checker("a");
        q.push("a", "a/0".into(), t0(), SHORT);
        q.push("b", "b/0".into(), t0(), SHORT);
        q.clear_ready();
        assert!(!q.has_ready());
        assert_eq!(q.pop(4), None);
        assert!(!q.spaces.contains_key("b"));
        q.remove_checker("a");
        assert!(q.spaces.is_empty());
        assert_eq!((q.active, q.idle_known, q.ready), (0, 0, 0));
    }

    /// The tenancy scenario with a simulated clock: 50 checkers whose probes
    /// hold a worker for their whole 1 s timeout beside 500 checkers whose
    /// probes take 2 ms, all every 2 s, on 16 workers. The slow namespace
    /// alone would need 25 workers. The quick namespaces' probes start within
    /// a few milliseconds of their due time; without the per-namespace rules
    /// (one FIFO) they would wait behind the slow backlog.
    #[test]
    fn slow_probes_of_one_namespace_do_not_delay_the_others() {
        let every = Duration::from_secs(2);
        let mut fleet = vec![];
        for i in 0..50 {
            fleet.push(sim("slow", i, every, Duration::from_secs(1), SHORT));
        }
        for i in 0..500 {
            let ns = ["quick-0", "quick-1", "quick-2", "quick-3", "quick-4"][i % 5];
            fleet.push(sim(ns, i, every, Duration::from_millis(2), SHORT));
        }
        let fair = simulate(16, &fleet, true, "quick");
        let fifo = simulate(16, &fleet, false, "quick");
        println!("largest lag of a quick probe: fair {fair:?}, one FIFO {fifo:?}");
        assert!(fair <= Duration::from_millis(20), "{fair:?}");
        assert!(fifo >= Duration::from_millis(500), "{fifo:?}");
    }

    /// Hanging targets with long timeouts (docs/security.md, "Starve another
    /// namespace's probes") with a simulated clock, on 64 workers: 200 checkers
    /// whose targets accept and never answer (timeout 590 s) in one
    /// namespace, 40 checkers whose target answers after 1 s (timeout 3 s,
    /// every 5 s) in another. Taking free workers whenever it had due probes,
    /// the first namespace would hold all but the one the other got first,
    /// and the other's 40 probes would run one after the other (40 s for a
    /// 5 s interval). Limited to its guaranteed share for long probes, it
    /// holds 32; of the other's 40 probes, which come due together, 8 wait
    /// for one of their own namespace's to end (1 s) and none misses its
    /// interval.
    #[test]
    fn long_probes_never_hold_more_than_the_guaranteed_share() {
        let mut fleet = vec![];
        for i in 0..200 {
            let (every, hold) = (Duration::from_secs(600), Duration::from_secs(590));
            fleet.push(sim("hanging", i, every, hold, hold));
        }
        for i in 0..40 {
            let every = Duration::from_secs(5);
            fleet.push(sim(
                "steady",
                i,
                every,
                Duration::from_secs(1),
                Duration::from_secs(3),
            ));
        }
        let lag = simulate(64, &fleet, true, "steady");
        println!("largest lag of a steady probe: {lag:?}");
        assert!(lag <= Duration::from_millis(1010), "{lag:?}");
    }

    /// One simulated checker: namespace, key, interval, how long its probe
    /// holds a worker, and its timeout (what the queue is told).
    type Sim = (&'static str, String, Duration, Duration, Duration);

    fn sim(ns: &'static str, i: usize, every: Duration, hold: Duration, timeout: Duration) -> Sim {
        (ns, format!("{ns}/{i}"), every, hold, timeout)
    }

    /// The largest schedule lag of a probe of the namespaces whose name
    /// starts with `watched` over 60 simulated seconds; first probes spread
    /// over the first 2 s at most.
    fn simulate(workers: usize, fleet: &[Sim], fair: bool, watched: &str) -> Duration {
        let spread = fleet
            .iter()
            .map(|c| c.2)
            .min()
            .unwrap_or_default()
            .min(Duration::from_secs(2));
        let start = Instant::now();
        let mut q = FairQueue::new(workers);
        let mut fifo: VecDeque<(String, String, Instant)> = VecDeque::new();
        // (time, 0 = due or 1 = done, checker index, due time)
        let mut events: BinaryHeap<Reverse<(Instant, u8, usize, Instant)>> = BinaryHeap::new();
        let by_key: HashMap<&str, usize> = fleet
            .iter()
            .enumerate()
            .map(|(i, c)| (c.1.as_str(), i))
            .collect();
        for (i, c) in fleet.iter().enumerate() {
            q.add_checker(c.0);
            let at = start + spread * i as u32 / fleet.len() as u32;
            events.push(Reverse((at, 0, i, at)));
        }
        let mut free = workers;
        let mut worst = Duration::ZERO;
        let end = start + Duration::from_secs(60);
        while let Some(Reverse((now, kind, i, due))) = events.pop() {
            if now > end {
                break;
            }
            let (ns, key, every, _, timeout) = &fleet[i];
            if kind == 0 {
                if fair {
                    q.push(ns, key.clone(), now, *timeout);
                } else {
                    fifo.push_back((ns.to_string(), key.clone(), now));
                }
            } else {
                free += 1;
                if fair {
                    q.finished(ns);
                }
                // Next due on the cadence, skipping missed intervals (as the engine does).
                let mut next = due + *every;
                while next < now {
                    next += *every;
                }
                events.push(Reverse((next, 0, i, next)));
            }
            while free > 0 {
                let picked = if fair { q.pop(free) } else { fifo.pop_front() };
                let Some((ns, key, due)) = picked else { break };
                if fair {
                    q.started(&ns);
                }
                free -= 1;
                if ns.starts_with(watched) {
                    worst = worst.max(now - due);
                }
                let c = by_key[key.as_str()];
                events.push(Reverse((now + fleet[c].3, 1, c, due)));
            }
        }
        worst
    }
}
