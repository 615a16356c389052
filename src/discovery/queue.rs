//! The work queue of discovery: source objects to reconcile, each at most
//! once in the queue and once at work (a trigger while it is at work runs
//! it again afterwards), and failed ones retried with a backoff of their
//! own. One FIFO per namespace, taken in turn, and at most a set number of
//! one namespace's keys at work at once: a namespace with thousands of
//! routes to write neither delays another's by its thousands nor holds
//! every writer. Bounded by the number of source objects. Pure: the clock
//! is an input.

use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};
use std::hash::Hash;
use std::time::{Duration, Instant};

/// A key of the queue and the group (namespace) whose turn it waits for.
pub trait Grouped {
    fn group(&self) -> &str;
}

/// `namespace/name`: the namespace.
impl Grouped for &str {
    fn group(&self) -> &str {
        self.split_once('/').map_or("", |(g, _)| g)
    }
}

/// First retry after a failure; doubled per failure in a row.
pub const RETRY_MIN: Duration = Duration::from_millis(500);
/// Longest wait before a retry.
pub const RETRY_MAX: Duration = Duration::from_secs(60);

pub struct WorkQueue<K> {
    /// Per group, its keys in the order they came.
    ready: HashMap<String, VecDeque<K>>,
    /// The groups with keys ready, in turn.
    turns: VecDeque<String>,
    queued: HashSet<K>,
    working: HashSet<K>,
    /// Per group, its keys at work.
    working_in: HashMap<String, usize>,
    /// Keys of one group at work at once, at most.
    group_limit: usize,
    /// Triggered while at work: queued again when the work ends.
    again: HashSet<K>,
    /// (due, sequence) of the retries; the sequence keeps equal instants apart.
    retries: BTreeSet<(Instant, u64, K)>,
    retry_of: HashMap<K, (Instant, u64)>,
    failures: HashMap<K, u32>,
    seq: u64,
}

impl<K: Clone + Eq + Hash + Ord + Grouped> Default for WorkQueue<K> {
    fn default() -> Self {
        WorkQueue {
            ready: HashMap::new(),
            turns: VecDeque::new(),
            queued: HashSet::new(),
            working: HashSet::new(),
            working_in: HashMap::new(),
            group_limit: usize::MAX,
            again: HashSet::new(),
            retries: BTreeSet::new(),
            retry_of: HashMap::new(),
            failures: HashMap::new(),
            seq: 0,
        }
    }
}

impl<K: Clone + Eq + Hash + Ord + Grouped> WorkQueue<K> {
    /// A queue that hands out at most `limit` keys of one group at once.
    pub fn with_group_limit(limit: usize) -> Self {
        WorkQueue {
            group_limit: limit.max(1),
            ..WorkQueue::default()
        }
    }

    /// `k` changed: reconcile it soon (a pending retry is brought forward).
    pub fn push(&mut self, k: K) {
        if self.working.contains(&k) {
            self.again.insert(k);
            return;
        }
        if let Some((due, seq)) = self.retry_of.remove(&k) {
            self.retries.remove(&(due, seq, k.clone()));
        }
        if self.queued.insert(k.clone()) {
            let group = k.group().to_string();
            let keys = self.ready.entry(group.clone()).or_default();
            if keys.is_empty() {
                self.turns.push_back(group);
            }
            keys.push_back(k);
        }
    }

    /// The next key to work on (the first of the first group in turn that
    /// has fewer than its limit at work); it is at work until [`Self::done`].
    pub fn pop(&mut self) -> Option<K> {
        let at = self
            .turns
            .iter()
            .position(|g| self.working_in.get(g).copied().unwrap_or(0) < self.group_limit)?;
        let group = self.turns.remove(at)?;
        *self.working_in.entry(group.clone()).or_default() += 1;
        let keys = self.ready.get_mut(&group)?;
        let k = keys.pop_front()?;
        if keys.is_empty() {
            self.ready.remove(&group);
        } else {
            self.turns.push_back(group);
        }
        self.queued.remove(&k);
        self.working.insert(k.clone());
        Some(k)
    }

    /// The work on `k` ended; a failure is retried after the backoff
    /// (unless it was triggered meanwhile: then at once).
    pub fn done(&mut self, k: K, ok: bool, now: Instant) {
        if self.working.remove(&k)
            && let Some(n) = self.working_in.get_mut(k.group())
        {
            *n -= 1;
            if *n == 0 {
                self.working_in.remove(k.group());
            }
        }
        if ok {
            self.failures.remove(&k);
        }
        if self.again.remove(&k) {
            self.push(k);
            return;
        }
        if ok {
            return;
        }
        let n = self.failures.entry(k.clone()).or_default();
        *n = n.saturating_add(1);
        let wait = RETRY_MIN
            .saturating_mul(1u32 << (*n - 1).min(16))
            .min(RETRY_MAX);
        self.seq += 1;
        self.retries.insert((now + wait, self.seq, k.clone()));
        self.retry_of.insert(k, (now + wait, self.seq));
    }

    /// Moves the retries due at `now` to the queue.
    pub fn due(&mut self, now: Instant) {
        while let Some(first) = self.retries.first().cloned() {
            if first.0 > now {
                break;
            }
            self.retries.remove(&first);
            self.retry_of.remove(&first.2);
            self.push(first.2);
        }
    }

    /// When the next retry is due.
    pub fn next_retry(&self) -> Option<Instant> {
        self.retries.first().map(|(t, _, _)| *t)
    }

    /// `k` is gone: forget its failures and pending retry.
    pub fn forget(&mut self, k: &K) {
        self.failures.remove(k);
        if let Some((due, seq)) = self.retry_of.remove(k) {
            self.retries.remove(&(due, seq, k.clone()));
        }
    }

    pub fn is_idle(&self) -> bool {
        self.turns.is_empty() && self.working.is_empty()
    }

    pub fn working(&self) -> usize {
        self.working.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_queued_once_and_worked_on_once() {
        let mut q = WorkQueue::default();
        let t = Instant::now();
        q.push("a");
        q.push("b");
        q.push("a");
        assert_eq!(q.pop(), Some("a"));
        q.push("a");
        assert_eq!(q.pop(), Some("b"), "a is at work: not handed out twice");
        assert_eq!(q.pop(), None);
        q.done("a", true, t);
        assert_eq!(q.pop(), Some("a"), "triggered while at work: again");
        q.done("a", true, t);
        q.done("b", true, t);
        assert!(q.is_idle());
    }

    #[test]
    fn namespaces_take_turns_whatever_one_of_them_queued() {
        let mut q = WorkQueue::default();
        let t = Instant::now();
        let flood: Vec<String> = (0..1000).map(|i| format!("flood/r{i}")).collect();
        for k in &flood {
            q.push(k.as_str());
        }
        q.push("quiet/a");
        q.push("other/b");
        q.push("quiet/c");
        let order: Vec<&str> = (0..6)
            .map(|_| {
                let k = q.pop().unwrap();
                q.done(k, true, t);
                k
            })
            .collect();
        assert_eq!(
            order,
            [
                "flood/r0", "quiet/a", "other/b", "flood/r1", "quiet/c", "flood/r2"
            ]
        );
        let mut rest = 0;
        while let Some(k) = q.pop() {
            assert!(k.starts_with("flood/"), "{k}");
            q.done(k, true, t);
            rest += 1;
        }
        assert_eq!(rest, 997);
        assert!(q.is_idle());
    }

    #[test]
    fn one_group_holds_at_most_its_limit_at_work() {
        let mut q = WorkQueue::with_group_limit(2);
        let t = Instant::now();
        for k in ["flood/a", "flood/b", "flood/c", "flood/d"] {
            q.push(k);
        }
        assert_eq!((q.pop(), q.pop()), (Some("flood/a"), Some("flood/b")));
        assert_eq!(q.pop(), None, "flood holds its two");
        q.push("quiet/x");
        assert_eq!(
            q.pop(),
            Some("quiet/x"),
            "another namespace gets a writer at once"
        );
        q.done("flood/a", true, t);
        assert_eq!(q.pop(), Some("flood/c"));
        q.done("quiet/x", true, t);
        q.done("flood/b", true, t);
        q.done("flood/c", true, t);
        assert_eq!(q.pop(), Some("flood/d"));
        q.done("flood/d", true, t);
        assert!(q.is_idle() && q.working_in.is_empty());
    }

    #[test]
    fn failures_back_off_and_a_trigger_brings_the_retry_forward() {
        let mut q = WorkQueue::default();
        let t = Instant::now();
        q.push("a");
        for (i, want) in [500u64, 1000, 2000, 4000].into_iter().enumerate() {
            let k = q.pop().unwrap_or_else(|| panic!("round {i}"));
            q.done(k, false, t);
            assert_eq!(q.next_retry(), Some(t + Duration::from_millis(want)));
            q.due(t + Duration::from_millis(want - 1));
            assert_eq!(q.pop(), None);
            q.due(t + Duration::from_millis(want));
        }
        let k = q.pop().unwrap();
        q.done(k, false, t);
        q.push("a");
        assert_eq!(q.next_retry(), None, "the retry is replaced by the trigger");
        let k = q.pop().unwrap();
        q.done(k, true, t);
        q.push("a");
        let k = q.pop().unwrap();
        q.done(k, false, t);
        assert_eq!(
            q.next_retry(),
            Some(t + RETRY_MIN),
            "a success resets the backoff"
        );
        for _ in 0..40 {
            q.due(t + Duration::from_secs(3600));
            let k = q.pop().unwrap();
            q.done(k, false, t);
        }
        assert_eq!(q.next_retry(), Some(t + RETRY_MAX));
        q.forget(&"a");
        assert_eq!(q.next_retry(), None);
    }
}
