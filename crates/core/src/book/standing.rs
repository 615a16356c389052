//! The ring's input kept up to date one change at a time, so that a decision
//! costs what changed and not the whole fleet: every checker's holder, each
//! member's checkers in the order it sheds them, and the checkers it sheds
//! now in the order the plan places them.
//!
//! [`Standing::plan`] makes the same moves as [`ring::plan_refs`] over the
//! same placements, in the same order (the book's tests hold it to that), and
//! stops as soon as the rest could not change what the caller takes: once it
//! wants no more drains and every unplaced checker is placed. A window of
//! handovers thus costs the window, not the members' whole surplus.

use std::collections::{BTreeSet, HashMap};
use std::ops::Bound::{Excluded, Unbounded};
use std::sync::Arc;

use crate::ring::{self, Move, Targets};

pub(super) type Key = Arc<str>;

/// One member's checkers.
struct Shelf {
    name: Arc<str>,
    hash: u64,
    /// (its score, key hash, key) of every checker it holds: the order it
    /// sheds them in, least preferred first. The score is a bijection of the
    /// key hash for one member, so this orders as (score, key) does.
    by_score: BTreeSet<(u64, u64, Key)>,
    /// The first `shed.len()` entries of `by_score`, as (key hash, key): the
    /// order the plan places them in.
    shed: BTreeSet<(u64, Key)>,
    /// The last entry of that prefix.
    edge: Option<(u64, u64, Key)>,
}

impl Shelf {
    fn new(name: &str) -> Self {
        Shelf {
            name: name.into(),
            hash: ring::member_hash(name),
            by_score: BTreeSet::new(),
            shed: BTreeSet::new(),
            edge: None,
        }
    }

    fn entry(&self, kh: u64, key: &Key) -> (u64, u64, Key) {
        (ring::score_hashed(self.hash, kh), kh, key.clone())
    }

    fn insert(&mut self, kh: u64, key: &Key) {
        let e = self.entry(kh, key);
        if self.edge.as_ref().is_some_and(|edge| e < *edge) {
            self.shed.insert((kh, key.clone()));
        }
        self.by_score.insert(e);
    }

    fn remove(&mut self, kh: u64, key: &Key) {
        let e = self.entry(kh, key);
        self.by_score.remove(&e);
        let Some(edge) = &self.edge else { return };
        if e <= *edge {
            self.shed.remove(&(kh, key.clone()));
            if e == *edge {
                self.edge = self.by_score.range(..e).next_back().cloned();
            }
        }
    }

    /// Makes the `want` least preferred checkers the shed ones.
    fn shed_first(&mut self, want: usize) {
        while self.shed.len() < want {
            let next = match &self.edge {
                Some(e) => self.by_score.range((Excluded(e), Unbounded)).next(),
                None => self.by_score.iter().next(),
            };
            let Some(next) = next.cloned() else { break };
            self.shed.insert((next.1, next.2.clone()));
            self.edge = Some(next);
        }
        while self.shed.len() > want {
            let Some(edge) = self.edge.take() else { break };
            self.shed.remove(&(edge.1, edge.2.clone()));
            self.edge = self.by_score.range(..edge).next_back().cloned();
        }
    }
}

/// Every placed checker's key hash and holder (`None`: no live holder).
#[derive(Default)]
pub struct Standing {
    spots: HashMap<Key, (u64, Option<Arc<str>>)>,
    shelves: HashMap<Arc<str>, Shelf>,
    /// Checkers without a live holder, as (key hash, key).
    orphans: BTreeSet<(u64, Key)>,
}

impl Standing {
    /// The holder the plan counts `key` against, if it counts it.
    pub fn holder(&self, key: &str) -> Option<Option<&str>> {
        self.spots.get(key).map(|(_, h)| h.as_deref())
    }

    pub fn clear(&mut self) {
        *self = Standing::default();
    }

    /// Counts `key` against `holder` (a member of the ring), or as a checker
    /// without a live holder. Keeps the book's allocation of the key.
    pub fn put(&mut self, key: &Key, holder: Option<&str>) {
        if self.holder(key) == Some(holder) {
            return;
        }
        let (kh, key) = match self.spots.get_key_value(&**key) {
            Some((k, (kh, _))) => (*kh, k.clone()),
            None => (ring::fnv1a64(key.as_bytes()), key.clone()),
        };
        self.unplace(&key);
        let holder = holder.map(|h| {
            let shelf = self
                .shelves
                .entry(Arc::from(h))
                .or_insert_with(|| Shelf::new(h));
            shelf.insert(kh, &key);
            shelf.name.clone()
        });
        if holder.is_none() {
            self.orphans.insert((kh, key.clone()));
        }
        self.spots.insert(key, (kh, holder));
    }

    /// The plan no longer counts `key`.
    pub fn remove(&mut self, key: &str) {
        if let Some((key, _)) = self.spots.get_key_value(key) {
            let key = key.clone();
            self.unplace(&key);
            self.spots.remove(&key);
        }
    }

    fn unplace(&mut self, key: &Key) {
        let Some((kh, holder)) = self.spots.get(key) else {
            return;
        };
        let kh = *kh;
        match holder {
            Some(h) => {
                let h = h.clone();
                if let Some(shelf) = self.shelves.get_mut(&h) {
                    shelf.remove(kh, key);
                    if shelf.by_score.is_empty() {
                        self.shelves.remove(&h);
                    }
                }
            }
            None => {
                self.orphans.remove(&(kh, key.clone()));
            }
        }
    }

    /// The moves of [`ring::plan_refs`] over the ring `members` and these
    /// placements, handed to `take` in the plan's order. `take` answers
    /// whether it wants more drains; once it does not (or `drains` is false
    /// from the start) and every checker without a holder has its move, the
    /// plan stops.
    pub fn plan(&mut self, members: &[String], drains: bool, mut take: impl FnMut(Move) -> bool) {
        let mut names: Vec<&str> = members.iter().map(String::as_str).collect();
        names.sort_unstable();
        names.dedup();
        if names.is_empty() || (!drains && self.orphans.is_empty()) {
            return;
        }
        let mut load: Vec<usize> = names
            .iter()
            .map(|m| self.shelves.get(*m).map_or(0, |s| s.by_score.len()))
            .collect();
        let Targets {
            target,
            flexible,
            mut extras,
        } = ring::targets(&names, &load, self.spots.len());
        for (i, m) in names.iter().enumerate() {
            if let Some(shelf) = self.shelves.get_mut(*m) {
                shelf.shed_first(load[i].saturating_sub(target[i]));
            }
            load[i] = load[i].min(target[i]);
        }
        let shelves: Vec<Option<&Shelf>> = names.iter().map(|m| self.shelves.get(*m)).collect();
        let mut queue = Queue::new(&self.orphans, &shelves);
        let has_room = |i: usize, load: &[usize], extras: usize| {
            load[i] < target[i] || (flexible[i] && extras > 0 && load[i] == target[i])
        };
        let mut room: Vec<usize> = (0..names.len())
            .filter(|&i| has_room(i, &load, extras))
            .collect();
        let hashes: Vec<u64> = names.iter().map(|m| ring::member_hash(m)).collect();
        let mut orphans_left = self.orphans.len();
        let mut want_drains = drains;
        while want_drains || orphans_left > 0 {
            let Some((kh, key, from)) = queue.next() else {
                break;
            };
            let to = *room
                .iter()
                .max_by_key(|&&i| (ring::score_hashed(hashes[i], kh), names[i]))
                .expect("the targets add up to the number of checkers");
            if load[to] == target[to] {
                extras -= 1;
            }
            load[to] += 1;
            room.retain(|&i| has_room(i, &load, extras));
            let (key, to) = (key.to_string(), names[to].to_string());
            let mv = match from {
                None => {
                    orphans_left -= 1;
                    Move::Assign { key, to }
                }
                Some(from) => Move::Drain {
                    key,
                    from: names[from].to_string(),
                    to,
                },
            };
            want_drains = take(mv) && want_drains;
        }
    }
}

type Stream<'a> = std::iter::Peekable<std::collections::btree_set::Iter<'a, (u64, Key)>>;

/// The checkers to place, in the plan's order (key hash, key): those
/// without a holder and those each member sheds, merged.
struct Queue<'a> {
    /// Each stream, with the member it sheds from (`None`: no holder).
    streams: Vec<(Stream<'a>, Option<usize>)>,
}

impl<'a> Queue<'a> {
    fn new(orphans: &'a BTreeSet<(u64, Key)>, shelves: &[Option<&'a Shelf>]) -> Self {
        let mut streams = vec![(orphans.iter().peekable(), None)];
        for (i, s) in shelves.iter().enumerate() {
            if let Some(s) = s.filter(|s| !s.shed.is_empty()) {
                streams.push((s.shed.iter().peekable(), Some(i)));
            }
        }
        Queue { streams }
    }

    fn next(&mut self) -> Option<(u64, &'a str, Option<usize>)> {
        let (mut best, mut at) = (None::<&(u64, Key)>, 0);
        for (j, (s, _)) in self.streams.iter_mut().enumerate() {
            if let Some(head) = s.peek()
                && best.is_none_or(|b| (head.0, &*head.1) < (b.0, &*b.1))
            {
                best = Some(*head);
                at = j;
            }
        }
        best?;
        let (s, from) = &mut self.streams[at];
        let (kh, key) = s.next()?;
        Some((*kh, &**key, *from))
    }
}
