//! Per-namespace share of the Event publisher: the queue between the engine,
//! which must never wait, and the one task that writes Events to the API
//! server.
//!
//! One FIFO per namespace, taken in turn (round robin): while several
//! namespaces have Events waiting, each gets the same share of the
//! publisher's writes, however fast it produces them. The queue holds at most
//! `capacity` Events in all, so it stays bounded however many namespaces
//! there are. When it is full, the namespace with the most Events waiting
//! loses its newest one (longest-queue drop): a namespace that floods the
//! queue loses its own Events, and a namespace below its share always gets
//! its Event in, at the flooder's expense. A single namespace may use the
//! whole queue when nobody else needs it.
//!
//! Pure (no clock, no I/O); tested below.

use std::collections::{HashMap, VecDeque};

pub(crate) struct EventQueue<T> {
    capacity: usize,
    len: usize,
    queues: HashMap<String, VecDeque<T>>,
    /// Namespaces with Events waiting, in turn order.
    turn: VecDeque<String>,
}

impl<T> EventQueue<T> {
    pub fn new(capacity: usize) -> Self {
        EventQueue {
            capacity: capacity.max(1),
            len: 0,
            queues: HashMap::new(),
            turn: VecDeque::new(),
        }
    }

    /// Queues an Event of namespace `ns`. Returns the namespace that lost an
    /// Event to make room (`ns` itself when the new Event was refused), or
    /// `None` when nothing was dropped.
    pub fn push(&mut self, ns: &str, item: T) -> Option<String> {
        let mine = self.queues.get(ns).map_or(0, VecDeque::len);
        let mut dropped = None;
        if self.len >= self.capacity {
            // The longest queue pays, counting the new Event as ours: on a tie
            // the newcomer is refused, so shares converge to equal and a
            // namespace never takes another's place to stand above it. At most
            // `capacity` namespaces hold Events: the scan is bounded.
            let longest = self
                .queues
                .iter()
                .filter(|(n, q)| n.as_str() != ns && q.len() > mine + 1)
                .max_by_key(|(_, q)| q.len())
                .map(|(n, _)| n.clone());
            match longest {
                None => return Some(ns.to_string()),
                Some(victim) => {
                    // Longer than ours plus one: it keeps at least one Event
                    // and its place in the turn.
                    if let Some(q) = self.queues.get_mut(&victim) {
                        q.pop_back();
                    }
                    self.len -= 1;
                    dropped = Some(victim);
                }
            }
        }
        let q = self.queues.entry(ns.to_string()).or_default();
        if q.is_empty() {
            self.turn.push_back(ns.to_string());
        }
        q.push_back(item);
        self.len += 1;
        dropped
    }

    /// The next Event to publish: the oldest of the namespace whose turn it
    /// is; that namespace goes to the back of the turn.
    pub fn pop(&mut self) -> Option<(String, T)> {
        let ns = self.turn.pop_front()?;
        let q = self
            .queues
            .get_mut(&ns)
            .expect("a namespace in turn has a queue");
        let item = q.pop_front().expect("a namespace in turn has Events");
        self.len -= 1;
        if q.is_empty() {
            self.queues.remove(&ns);
        } else {
            self.turn.push_back(ns.clone());
        }
        Some((ns, item))
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.len
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drain(q: &mut EventQueue<u32>) -> Vec<(String, u32)> {
        std::iter::from_fn(|| q.pop()).collect()
    }

    #[test]
    fn namespaces_take_turns_and_each_keeps_its_order() {
        let mut q = EventQueue::new(100);
        for i in 0..4 {
            assert_eq!(q.push("a", i), None);
        }
        assert_eq!(q.push("b", 10), None);
        assert_eq!(q.push("b", 11), None);
        assert_eq!(q.push("c", 20), None);
        let order: Vec<(String, u32)> = drain(&mut q);
        let want = [
            ("a", 0),
            ("b", 10),
            ("c", 20),
            ("a", 1),
            ("b", 11),
            ("a", 2),
            ("a", 3),
        ];
        assert_eq!(
            order,
            want.iter()
                .map(|(n, i)| (n.to_string(), *i))
                .collect::<Vec<_>>()
        );
        assert_eq!(q.len(), 0);
        assert!(
            q.queues.is_empty() && q.turn.is_empty(),
            "nothing left over"
        );
    }

    #[test]
    fn alone_a_namespace_may_fill_the_queue_then_loses_its_newest() {
        let mut q = EventQueue::new(4);
        for i in 0..4 {
            assert_eq!(q.push("a", i), None);
        }
        assert_eq!(q.push("a", 4), Some("a".to_string()), "full: refused");
        assert_eq!(q.len(), 4);
        let got: Vec<u32> = drain(&mut q).into_iter().map(|(_, i)| i).collect();
        assert_eq!(got, vec![0, 1, 2, 3]);
    }

    #[test]
    fn a_flooding_namespace_pays_for_a_quiet_one() {
        let mut q = EventQueue::new(8);
        for i in 0..8 {
            q.push("flood", i);
        }
        // Each of the quiet namespace's Events takes the flooder's newest.
        for i in 0..3 {
            assert_eq!(q.push("quiet", 100 + i), Some("flood".to_string()));
        }
        assert_eq!(q.len(), 8);
        let got = drain(&mut q);
        let quiet: Vec<u32> = got
            .iter()
            .filter(|(n, _)| n == "quiet")
            .map(|(_, i)| *i)
            .collect();
        let flood: Vec<u32> = got
            .iter()
            .filter(|(n, _)| n == "flood")
            .map(|(_, i)| *i)
            .collect();
        assert_eq!(quiet, vec![100, 101, 102]);
        assert_eq!(flood, vec![0, 1, 2, 3, 4], "the flooder's newest went");
        // And the quiet namespace's Events went out within its turns.
        let positions: Vec<usize> = got
            .iter()
            .enumerate()
            .filter(|(_, (n, _))| n == "quiet")
            .map(|(p, _)| p)
            .collect();
        assert_eq!(positions, vec![1, 3, 5]);
    }

    #[test]
    fn shares_converge_to_equal_and_ties_refuse_the_newcomer() {
        let mut q = EventQueue::new(6);
        for i in 0..6 {
            q.push("a", i);
        }
        // b takes from a until they are level...
        for i in 0..3 {
            assert_eq!(q.push("b", i), Some("a".into()));
        }
        // ...then b, at its share, pays for its own.
        assert_eq!(q.push("b", 3), Some("b".into()));
        assert_eq!(q.push("a", 9), Some("a".into()));
        // A third namespace takes from the longest (either), never from itself.
        let victim = q.push("c", 0).expect("full");
        assert!(victim == "a" || victim == "b", "{victim}");
        assert_eq!(q.len(), 6);
    }

    /// The publisher's throughput is shared: with a flood that never stops
    /// and a namespace that sends one Event per publish slot or less, the
    /// quiet namespace loses nothing and waits at most one turn.
    #[test]
    fn a_steady_flood_takes_no_events_from_a_slower_namespace() {
        let mut q = EventQueue::new(64);
        let mut quiet_sent = 0;
        let mut quiet_got = 0;
        let mut flood_dropped = 0;
        for tick in 0..10_000u32 {
            // The flood produces 10 Events per published one.
            for _ in 0..10 {
                if q.push("flood", tick).is_some() {
                    flood_dropped += 1;
                }
            }
            if tick % 3 == 0 {
                // Never its own: the flood's newest makes room, if any must.
                assert_ne!(q.push("quiet", tick), Some("quiet".into()), "tick {tick}");
                quiet_sent += 1;
            }
            if let Some((ns, _)) = q.pop()
                && ns == "quiet"
            {
                quiet_got += 1;
            }
            assert!(q.len() <= 64);
        }
        quiet_got += drain(&mut q).iter().filter(|(n, _)| n == "quiet").count();
        assert_eq!(quiet_got, quiet_sent);
        assert!(flood_dropped > 80_000, "{flood_dropped}");
    }

    #[test]
    fn many_namespaces_stay_within_the_capacity() {
        let mut q = EventQueue::new(16);
        let mut dropped = 0;
        for i in 0..1000u32 {
            if q.push(&format!("ns{}", i % 100), i).is_some() {
                dropped += 1;
            }
            assert!(q.len() <= 16);
        }
        assert_eq!(dropped, 1000 - 16);
        let got = drain(&mut q);
        assert_eq!(got.len(), 16);
        // No namespace holds more than two of the 16 places among 100.
        let mut per: HashMap<String, usize> = HashMap::new();
        for (n, _) in got {
            *per.entry(n).or_default() += 1;
        }
        assert!(per.values().all(|n| *n <= 2), "{per:?}");
    }
}
