//! The resolver task, between the checker feed and the engine: it attaches
//! the Secret and ConfigMap values a checker references to its Upsert, and
//! never makes the feed, or a checker of another namespace, wait for a read.
//!
//! The feed hands over every command in watch order. One that needs no read
//! (an Upsert of a checker that references nothing or whose values are all
//! fresh in the cache, a Remove, a Drain, a Resync) goes on to the engine at
//! once. An Upsert that needs reads is held, its reads are queued in its
//! namespace's lane (secrets/queue.rs), and it goes on when the last of them
//! is in. The newest command for a checker wins: a later command for the
//! same checker drops a held Upsert (a newer Upsert replaces it; a Remove, a
//! Drain, a malformed Upsert or a Resync without it forgets it), so a stale
//! Upsert never overtakes what came after it. This task is the engine's
//! only source of checker commands (replica.rs sends only Fence and
//! Shutdown), which is what makes that hold. A held Upsert whose object was
//! meanwhile assigned elsewhere (another replica, or an earlier incarnation
//! of this one after a fence) goes on as the Remove the feed would make of it.
//!
//! It also owns the cache of values and re-reads, every REFRESH, those past
//! their TTL for the checkers it tracks: a Refresh goes to the engine for
//! each checker whose values changed (a rotation, a Secret created or
//! deleted). The resolver and the engine's commands meet here only; the
//! values themselves are secrets.rs's business.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::time::Instant;

use kube::ResourceExt;
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tracing::debug;

use crate::api::WebChecker;
use crate::checker::Change;
use crate::engine::Command;
use crate::intake::found::{Found, Step, forgotten};
use crate::intake::secrets::queue::{ReadQueue, Urgency};
use crate::intake::secrets::{Fetch, ObjectId, REFRESH, Read, Reader, Resolved, ValueCache};
use crate::probe::{Compiled, ValueRef, references};
use webchecker_core::namespace_budget::{Admission, Budgets, Kind, Order};

/// Reads in flight per namespace: a namespace's missing or slow objects
/// hold at most these.
pub const READS_PER_NAMESPACE: usize = 4;
/// Reads in flight in all.
pub const READS: usize = 16;
/// Commands from the feed not yet taken (the resolver takes each at once,
/// without waiting for a read).
pub const INPUT: usize = 256;

/// A checker that references values: its references and the values last
/// handed to the engine (`None` while its first Upsert is held).
struct Tracked {
    namespace: String,
    refs: Vec<ValueRef>,
    last: Option<Resolved>,
}

/// An Upsert waiting for reads.
struct Held {
    found: Box<Found>,
    compiled: Compiled,
    values: Resolved,
    waiting: HashSet<ObjectId>,
}

/// Whether a checker is still assigned to this replica's incarnation.
pub type Assigned = Box<dyn Fn(&WebChecker) -> bool + Send>;

pub struct ValueResolver {
    reader: Reader,
    assigned: Assigned,
    cache: ValueCache,
    queue: ReadQueue,
    tracked: HashMap<String, Tracked>,
    held: HashMap<String, Held>,
    /// The tracked checkers that reference each object.
    users: HashMap<ObjectId, HashSet<String>>,
    reads: JoinSet<Read>,
    reading: HashMap<tokio::task::Id, ObjectId>,
    /// Each namespace's budget of values on this replica.
    budgets: Budgets,
    /// Refreshes of checkers that a change of budget use moved over or
    /// under their namespace's budget, to send after the current command.
    moved: Vec<Command>,
}

impl ValueResolver {
    /// `budget`: the bytes of one namespace's values on this replica.
    pub fn new(
        reader: Reader,
        ttl: std::time::Duration,
        assigned: Assigned,
        budget: usize,
    ) -> Self {
        ValueResolver {
            reader,
            assigned,
            cache: ValueCache::new(ttl),
            queue: ReadQueue::new(READS_PER_NAMESPACE, READS),
            tracked: HashMap::new(),
            held: HashMap::new(),
            users: HashMap::new(),
            reads: JoinSet::new(),
            reading: HashMap::new(),
            budgets: Budgets::new(Kind::Values, budget),
            moved: Vec::new(),
        }
    }

    /// Takes the feed's commands until the feed or the engine is gone.
    pub async fn run(
        mut self,
        mut input: mpsc::Receiver<Step<Compiled>>,
        engine: mpsc::Sender<Command>,
    ) {
        let start = tokio::time::Instant::now() + REFRESH;
        let mut refresh = tokio::time::interval_at(start, REFRESH);
        refresh.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            self.start_reads();
            let mut out: Vec<Command> = tokio::select! {
                c = input.recv() => match c {
                    Some(c) => self.take(c, Instant::now()).into_iter().collect(),
                    None => return,
                },
                Some(r) = self.reads.join_next_with_id() => {
                    let (id, read) = match r {
                        Ok((id, read)) => (id, read),
                        Err(e) => (e.id(), Err(Fetch::Transient("the read failed".into()))),
                    };
                    match self.reading.remove(&id) {
                        Some(obj) => self.read_done(obj, read, Instant::now()),
                        None => Vec::new(),
                    }
                }
                _ = refresh.tick() => {
                    self.refresh(Instant::now());
                    Vec::new()
                }
            };
            out.append(&mut self.moved);
            for c in out {
                if engine.send(c).await.is_err() {
                    return;
                }
            }
        }
    }

    /// A step from the feed: what goes on to the engine now.
    fn take(&mut self, step: Step<Compiled>, now: Instant) -> Option<Command> {
        let cmd = match step {
            Step::Found(found, compiled) => return self.take_found(found, compiled, now),
            Step::Command(cmd) => cmd,
        };
        match cmd {
            Command::Change(Change::Resync { present }) => {
                let gone: Vec<String> = self
                    .tracked
                    .keys()
                    .filter(|k| !present.contains(*k))
                    .cloned()
                    .collect();
                for k in gone {
                    self.untrack(&k);
                }
                Some(Command::Change(Change::Resync { present }))
            }
            // New patterns for a checker whose Upsert waits for its reads:
            // they go with it (on their own they would reach the engine
            // first, find no checker, and the Upsert would bring the old
            // ones).
            Command::Change(Change::Patterns { key, compiled }) => match self.held.get_mut(&key) {
                Some(h) => {
                    h.compiled = compiled;
                    None
                }
                None => Some(Command::Change(Change::Patterns { key, compiled })),
            },
            other => {
                if let Some(key) = forgotten(&other) {
                    self.untrack(&key);
                }
                Some(other)
            }
        }
    }

    /// A valid checker with its patterns: on to the engine with its values
    /// when they are all fresh in the cache, else held until they are in.
    fn take_found(
        &mut self,
        found: Box<Found>,
        compiled: Compiled,
        now: Instant,
    ) -> Option<Command> {
        let namespace = found.namespace();
        let key = found.key();
        // Newer than any held Upsert of this checker.
        self.held.remove(&key);
        let refs = references(&found.wc.spec);
        if refs.is_empty() {
            self.untrack(&key);
            return Some(found.upsert(Resolved::default(), compiled));
        }
        self.track(&key, &namespace, &refs);
        let mut values = Resolved::default();
        let mut waiting = HashSet::new();
        for r in &refs {
            match self.cache.fresh(&namespace, r, now) {
                Some(v) => values.set(r.clone(), v),
                None => {
                    waiting.insert(ObjectId::of(&namespace, r));
                }
            }
        }
        if waiting.is_empty() {
            let order = (
                found.wc.metadata.creation_timestamp.clone(),
                found.wc.name_any(),
            );
            let values = self.admit(&key, &namespace, Some(order), values);
            if let Some(t) = self.tracked.get_mut(&key) {
                t.last = Some(values.clone());
            }
            return Some(found.upsert(values, compiled));
        }
        for obj in &waiting {
            self.queue.push(obj.clone(), Urgency::Waited);
        }
        self.held.insert(
            key,
            Held {
                found,
                compiled,
                values,
                waiting,
            },
        );
        None
    }

    /// A read ended: the Upserts it completes and the Refreshes it causes.
    fn read_done(&mut self, obj: ObjectId, read: Read, now: Instant) -> Vec<Command> {
        self.queue.done(&obj);
        let Some(users) = self.users.get(&obj) else {
            return Vec::new();
        };
        let mut users: Vec<String> = users.iter().cloned().collect();
        users.sort();
        let holds = |t: &Tracked| -> Vec<ValueRef> {
            t.refs.iter().filter(|r| obj.holds(r)).cloned().collect()
        };
        let keys: BTreeSet<String> = users
            .iter()
            .filter_map(|k| self.tracked.get(k))
            .flat_map(|t| holds(t).into_iter().map(|r| r.key().to_string()))
            .collect();
        self.cache.store(&obj, &read, &keys, now);
        let mut out = Vec::new();
        for key in users {
            let Some(t) = self.tracked.get_mut(&key) else {
                continue;
            };
            let here = holds(t);
            if let Some(h) = self.held.get_mut(&key) {
                for r in here {
                    h.values.set(r.clone(), self.cache.last(&obj.namespace, &r));
                }
                h.waiting.remove(&obj);
                if h.waiting.is_empty()
                    && let Some(h) = self.held.remove(&key)
                {
                    out.push(self.deliver(key, h));
                }
            } else if let Some(last) = t.last.clone() {
                let (namespace, refs) = (t.namespace.clone(), t.refs.clone());
                let values = self.values_of(&namespace, &refs);
                let values = self.admit(&key, &namespace, None, values);
                if values != last {
                    debug!(checker = %key, "referenced Secret/ConfigMap values changed");
                    if let Some(t) = self.tracked.get_mut(&key) {
                        t.last = Some(values.clone());
                    }
                    out.push(Command::Change(Change::Refresh {
                        key,
                        resolved: values,
                    }));
                }
            }
        }
        out
    }

    /// A held Upsert whose values are all in.
    fn deliver(&mut self, key: String, h: Held) -> Command {
        if !(self.assigned)(&h.found.wc) {
            self.untrack(&key);
            return Command::Change(Change::Remove { key });
        }
        let namespace = h.found.namespace();
        let wc = &h.found.wc;
        let order = (wc.metadata.creation_timestamp.clone(), wc.name_any());
        let values = self.admit(&key, &namespace, Some(order), h.values);
        if let Some(t) = self.tracked.get_mut(&key) {
            t.last = Some(values.clone());
        }
        h.found.upsert(values, h.compiled)
    }

    /// The last values read of `refs`.
    fn values_of(&self, namespace: &str, refs: &[ValueRef]) -> Resolved {
        refs.iter()
            .map(|r| (r.clone(), self.cache.last(namespace, r)))
            .collect()
    }

    /// What the engine gets for a checker's values: them, or the
    /// QuotaExceeded marker when they do not fit in what its namespace's
    /// older checkers leave of the budget. Queues a Refresh for each other
    /// checker of the namespace moved over or under the budget.
    fn admit(
        &mut self,
        key: &str,
        namespace: &str,
        order: Option<Order>,
        values: Resolved,
    ) -> Resolved {
        let order = order
            .or_else(|| self.budgets.order_of(key))
            .unwrap_or_else(|| (None, key.to_string()));
        let (verdict, moved) = self.budgets.set(key, namespace, order, values.bytes());
        self.settle(moved);
        match verdict {
            Admission::Admitted => values,
            Admission::Over(m) => Resolved::over_budget(m),
        }
    }

    /// Refreshes for the checkers whose side of the budget changed (a held
    /// one is judged again when its values are in).
    fn settle(&mut self, moved: Vec<(String, Admission)>) {
        for (key, verdict) in moved {
            if self.held.contains_key(&key) {
                continue;
            }
            let Some(t) = self.tracked.get(&key) else {
                continue;
            };
            let resolved = match verdict {
                Admission::Admitted => self.values_of(&t.namespace, &t.refs),
                Admission::Over(m) => Resolved::over_budget(m),
            };
            if let Some(t) = self.tracked.get_mut(&key) {
                t.last = Some(resolved.clone());
            }
            self.moved
                .push(Command::Change(Change::Refresh { key, resolved }));
        }
    }

    /// Queues a re-read of every tracked value past its TTL.
    fn refresh(&mut self, now: Instant) {
        self.cache.purge(now);
        for (key, t) in &self.tracked {
            if self.held.contains_key(key) {
                continue;
            }
            for r in &t.refs {
                if self.cache.fresh(&t.namespace, r, now).is_none() {
                    self.queue
                        .push(ObjectId::of(&t.namespace, r), Urgency::Refresh);
                }
            }
        }
    }

    /// Starts the reads the queue allows, skipping objects nobody
    /// references any more.
    fn start_reads(&mut self) {
        while let Some(obj) = self.queue.next() {
            if !self.users.contains_key(&obj) {
                self.queue.done(&obj);
                continue;
            }
            let handle = self.reads.spawn((self.reader)(obj.clone()));
            self.reading.insert(handle.id(), obj);
        }
    }

    fn track(&mut self, key: &str, namespace: &str, refs: &[ValueRef]) {
        let last = self.tracked.get(key).and_then(|t| t.last.clone());
        self.unlink(key);
        for r in refs {
            self.users
                .entry(ObjectId::of(namespace, r))
                .or_default()
                .insert(key.to_string());
        }
        self.tracked.insert(
            key.to_string(),
            Tracked {
                namespace: namespace.to_string(),
                refs: refs.to_vec(),
                last,
            },
        );
    }

    /// Forgets a checker, and any Upsert of it held; its values no longer
    /// count against its namespace's budget.
    fn untrack(&mut self, key: &str) {
        self.unlink(key);
        let moved = self.budgets.remove(key);
        self.settle(moved);
    }

    /// Forgets a checker's references and any Upsert of it held.
    fn unlink(&mut self, key: &str) {
        self.held.remove(key);
        let Some(t) = self.tracked.remove(key) else {
            return;
        };
        for r in &t.refs {
            let obj = ObjectId::of(&t.namespace, r);
            if let Some(u) = self.users.get_mut(&obj) {
                u.remove(key);
                if u.is_empty() {
                    self.users.remove(&obj);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
