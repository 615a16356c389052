//! The order in which the resolver reads Secrets and ConfigMaps: at most
//! `per_namespace` reads in flight per namespace and `total` in all, the
//! namespaces with something to read taken in turn, one read each, and
//! within a namespace the reads a checker waits for before the periodic
//! re-reads. A namespace with 24,000 missing Secrets to read thus holds at
//! most its own share of the reads, and another namespace's next read starts
//! as soon as any read ends (at once, while fewer than `total /
//! per_namespace` namespaces are that busy).
//!
//! Pure: the resolver starts what [`ReadQueue::next`] hands out and reports
//! the end of each read with [`ReadQueue::done`].

use std::collections::{HashMap, HashSet, VecDeque};

use super::ObjectId;

/// Why a read is wanted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Urgency {
    /// A checker waits for it (new, or changed): it reaches the engine when
    /// its last read is in.
    Waited,
    /// A value past its TTL, re-read for a checker the engine already has.
    Refresh,
}

#[derive(Default)]
struct Lane {
    waited: VecDeque<ObjectId>,
    refresh: VecDeque<ObjectId>,
    in_flight: usize,
    /// In [`ReadQueue::turn`].
    in_turn: bool,
}

pub struct ReadQueue {
    per_namespace: usize,
    total: usize,
    lanes: HashMap<String, Lane>,
    /// The namespaces with something queued, in the order of their turns.
    turn: VecDeque<String>,
    /// What is queued, at which urgency. A lane's deques may also hold
    /// entries no longer here (read already, through the other deque): they
    /// are skipped when their turn comes.
    queued: HashMap<ObjectId, Urgency>,
    in_flight: HashSet<ObjectId>,
}

impl ReadQueue {
    pub fn new(per_namespace: usize, total: usize) -> Self {
        ReadQueue {
            per_namespace: per_namespace.max(1),
            total: total.max(1),
            lanes: HashMap::new(),
            turn: VecDeque::new(),
            queued: HashMap::new(),
            in_flight: HashSet::new(),
        }
    }

    /// Asks for a read of `obj`. An object in flight is not queued again:
    /// the answer on its way serves. A refresh wanted by a waiting checker
    /// moves to the front of its namespace's queue.
    pub fn push(&mut self, obj: ObjectId, urgency: Urgency) {
        if self.in_flight.contains(&obj) {
            return;
        }
        match (self.queued.get(&obj), urgency) {
            (Some(Urgency::Waited), _) | (Some(Urgency::Refresh), Urgency::Refresh) => return,
            _ => {}
        }
        self.queued.insert(obj.clone(), urgency);
        let ns = obj.namespace.clone();
        let lane = self.lanes.entry(ns.clone()).or_default();
        match urgency {
            Urgency::Waited => lane.waited.push_back(obj),
            Urgency::Refresh => lane.refresh.push_back(obj),
        }
        if !lane.in_turn {
            lane.in_turn = true;
            self.turn.push_back(ns);
        }
    }

    /// The next read to start, if the limits allow one now.
    pub fn next(&mut self) -> Option<ObjectId> {
        if self.in_flight.len() >= self.total {
            return None;
        }
        for _ in 0..self.turn.len() {
            let ns = self.turn.pop_front()?;
            let Some(lane) = self.lanes.get_mut(&ns) else {
                continue;
            };
            if lane.in_flight >= self.per_namespace {
                // Its turn comes again once one of its reads ends.
                self.turn.push_back(ns);
                continue;
            }
            let obj = loop {
                let Some(o) = lane.waited.pop_front().or_else(|| lane.refresh.pop_front()) else {
                    break None;
                };
                if self.queued.remove(&o).is_some() {
                    break Some(o);
                }
            };
            match obj {
                Some(o) => {
                    lane.in_flight += 1;
                    if lane.waited.is_empty() && lane.refresh.is_empty() {
                        lane.in_turn = false;
                    } else {
                        self.turn.push_back(ns);
                    }
                    self.in_flight.insert(o.clone());
                    return Some(o);
                }
                None => {
                    lane.in_turn = false;
                    if lane.in_flight == 0 {
                        self.lanes.remove(&ns);
                    }
                }
            }
        }
        None
    }

    /// A read that [`ReadQueue::next`] handed out has ended.
    pub fn done(&mut self, obj: &ObjectId) {
        if !self.in_flight.remove(obj) {
            return;
        }
        if let Some(lane) = self.lanes.get_mut(&obj.namespace) {
            lane.in_flight -= 1;
            if lane.in_flight == 0 && !lane.in_turn {
                self.lanes.remove(&obj.namespace);
            }
        }
    }

    /// Reads queued, not yet started.
    #[cfg(test)]
    pub fn queued(&self) -> usize {
        self.queued.len()
    }

    /// Reads started, not yet done.
    #[cfg(test)]
    pub fn in_flight(&self) -> usize {
        self.in_flight.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(ns: &str, name: &str) -> ObjectId {
        ObjectId {
            namespace: ns.into(),
            kind: "Secret",
            name: name.into(),
        }
    }

    fn drain(q: &mut ReadQueue) -> Vec<ObjectId> {
        std::iter::from_fn(|| q.next()).collect()
    }

    #[test]
    fn a_busy_namespace_holds_only_its_share_and_others_go_at_once() {
        let mut q = ReadQueue::new(2, 5);
        for i in 0..1000 {
            q.push(obj("a", &format!("s{i}")), Urgency::Waited);
        }
        let started = drain(&mut q);
        assert_eq!(started, vec![obj("a", "s0"), obj("a", "s1")], "A's share");
        // B arrives behind 998 of A's reads and starts at once.
        q.push(obj("b", "t0"), Urgency::Waited);
        q.push(obj("b", "t1"), Urgency::Waited);
        q.push(obj("b", "t2"), Urgency::Waited);
        q.push(obj("c", "u0"), Urgency::Refresh);
        assert_eq!(
            drain(&mut q),
            vec![obj("b", "t0"), obj("c", "u0"), obj("b", "t1")],
            "B and C in turn, up to the total of 5"
        );
        // When one of A's reads ends, turns go on in order: B has one left,
        // and A's next read waits for B's turn.
        q.done(&obj("a", "s0"));
        assert_eq!(drain(&mut q), vec![obj("a", "s2")]);
        q.done(&obj("b", "t0"));
        assert_eq!(drain(&mut q), vec![obj("b", "t2")]);
        assert_eq!((q.in_flight(), q.queued()), (5, 997));
    }

    #[test]
    fn turns_alternate_between_namespaces_one_read_each() {
        let mut q = ReadQueue::new(1, 1);
        for i in 0..3 {
            q.push(obj("a", &format!("s{i}")), Urgency::Waited);
            q.push(obj("b", &format!("t{i}")), Urgency::Waited);
        }
        let mut order = Vec::new();
        while let Some(o) = q.next() {
            assert_eq!(q.next(), None, "one read at a time");
            q.done(&o);
            order.push(format!("{}/{}", o.namespace, o.name));
        }
        assert_eq!(order, ["a/s0", "b/t0", "a/s1", "b/t1", "a/s2", "b/t2"]);
        assert!(q.lanes.is_empty() && q.turn.is_empty(), "nothing left over");
    }

    #[test]
    fn waited_reads_go_before_refreshes_and_nothing_is_read_twice() {
        let mut q = ReadQueue::new(1, 4);
        q.push(obj("a", "old1"), Urgency::Refresh);
        q.push(obj("a", "old2"), Urgency::Refresh);
        q.push(obj("a", "new"), Urgency::Waited);
        // A refresh a checker now waits for moves up; asked twice, queued once.
        q.push(obj("a", "old2"), Urgency::Waited);
        q.push(obj("a", "new"), Urgency::Waited);
        q.push(obj("a", "new"), Urgency::Refresh);
        let mut order = Vec::new();
        while let Some(o) = q.next() {
            // Asked again while in flight: the answer on its way serves.
            q.push(o.clone(), Urgency::Waited);
            q.done(&o);
            order.push(o.name);
        }
        assert_eq!(order, ["new", "old2", "old1"]);
        assert_eq!((q.in_flight(), q.queued()), (0, 0));
        assert!(q.lanes.is_empty() && q.turn.is_empty(), "nothing left over");
        // An object read and done may be asked for again.
        q.push(obj("a", "new"), Urgency::Refresh);
        assert_eq!(q.next(), Some(obj("a", "new")));
    }
}
