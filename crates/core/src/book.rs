//! The sharder's bookkeeping as a plain state machine: the checkers it sees
//! (metadata only), the assignment writes in flight or not yet seen back, the
//! members it proved gone and its retry schedule for proofs. Driven by events
//! (watch, write completion, time) and queried for decisions; no I/O, so each
//! race fixed so far has a millisecond test below.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::ring::Move;
use crate::window::START_WINDOW;
use standing::{Key, Standing};
use state::Names;
pub use state::ObjState;
use webchecker_api::object_key;

/// How long a completed write holds its key while its watch event has not
/// arrived (a later change may come first and the event never show).
pub const WRITTEN_HOLD: Duration = Duration::from_secs(5);

/// A checker whose drain was withdrawn because its owner never acknowledged
/// it (see [`Book::stuck_drains`]) is not drained again for this many times
/// the bound: the refusal (an admission policy, RBAC drift) usually lasts,
/// and each new drain would leave the checker unprobed for the bound again.
pub const STUCK_HOLD_FACTOR: u32 = 20;

/// Why a checker is assigned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cause {
    New,
    Rebalance,
    /// Its owner was proven gone by this sharder.
    Dead,
    /// Its owner released its Lease or restarted under a new epoch.
    Departed,
}

impl Cause {
    pub fn label(self) -> &'static str {
        match self {
            Cause::New => "new",
            Cause::Rebalance => "rebalance",
            Cause::Dead => "dead",
            Cause::Departed => "departed",
        }
    }
}

/// A write the sharder decided on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    Assign {
        key: String,
        to: String,
        cause: Cause,
    },
    SetDrain {
        key: String,
        to: String,
    },
    /// The drain's target left and the best place is the owner itself:
    /// withdraw the drain instead of handing the checker to its own owner.
    ClearDrain {
        key: String,
        owner: String,
    },
}

impl Action {
    pub fn key(&self) -> &str {
        match self {
            Action::Assign { key, .. }
            | Action::SetDrain { key, .. }
            | Action::ClearDrain { key, .. } => key,
        }
    }
    pub fn target(&self) -> &str {
        match self {
            Action::Assign { to, .. } | Action::SetDrain { to, .. } => to,
            Action::ClearDrain { owner, .. } => owner,
        }
    }
}

/// How an assignment write ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteOutcome {
    /// Landed; the resourceVersion it produced.
    Written(String),
    /// 409/404: someone changed the object first; decide again from the watch.
    Raced,
    /// Any other failure (including "not leader any more", a timeout, a panic).
    Failed,
}

/// The members this sharder sees: every member with a Lease (and its epoch),
/// those among them it suspects (stale, not yet proven gone), those that
/// are leaving (asked to stop: they still own and probe their checkers
/// until each is drained away, and take none), and the epochs (Lease
/// UIDs) known to be gone.
pub struct Roster<'a> {
    pub members: &'a BTreeMap<String, String>,
    pub suspects: &'a HashSet<String>,
    pub leaving: &'a HashSet<String>,
    pub retired: &'a HashSet<String>,
}

impl Roster<'_> {
    fn fresh(&self, id: &str) -> bool {
        self.members.contains_key(id) && !self.suspects.contains(id)
    }
    /// A member checkers may be placed on: fresh and not leaving.
    fn placeable(&self, id: &str) -> bool {
        self.fresh(id) && !self.leaving.contains(id)
    }
    /// Draining towards a placeable member under the epoch it holds now (a
    /// drain that names no epoch was written by an earlier sharder).
    fn drain_target<'o>(&self, o: &'o ObjState) -> Option<&'o str> {
        let t = o.drain().filter(|t| self.placeable(t))?;
        match o.drain_epoch() {
            Some(e) if self.epoch_of(t) != Some(e) => None,
            _ => Some(t),
        }
    }
    /// `id`'s Lease UID, if it is a member.
    fn epoch_of(&self, id: &str) -> Option<&str> {
        self.members.get(id).map(String::as_str)
    }
    fn valid_owner(&self, o: &ObjState) -> bool {
        matches!((o.owner.as_deref(), o.epoch.as_deref()), (Some(owner), Some(epoch)) if self.epoch_of(owner) == Some(epoch))
    }
    /// Assigned under an epoch that is not its owner's Lease as the view
    /// knows it, and not known to be gone either: the view may lag (a newer
    /// Lease it has not seen yet). Not proof that the owner's session
    /// ended: such a checker stays until a read settles it.
    fn unverified<'o>(&self, o: &'o ObjState) -> Option<(&'o str, &'o str)> {
        match (o.owner.as_deref(), o.epoch.as_deref()) {
            (Some(owner), Some(epoch))
                if self.epoch_of(owner) != Some(epoch) && !self.retired.contains(epoch) =>
            {
                Some((owner, epoch))
            }
            _ => None,
        }
    }
}

#[derive(Debug)]
struct ProofRetry {
    next_at: Instant,
    delay: Duration,
}

/// What the leader reports about coverage.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Census {
    /// Checkers without a valid, unsuspected owner for longer than the grace.
    pub orphaned: usize,
}

/// Keys are shared: every map of the book that names a checker holds the
/// one allocation [`Book::objects`] made for it.
#[derive(Default)]
pub struct Book {
    objects: HashMap<Key, ObjState>,
    listing: HashMap<Key, ObjState>,
    names: Names,
    synced: bool,
    /// Members this sharder proved gone (for the `dead` move cause).
    dead: HashSet<String>,
    inflight: HashMap<Key, Arc<str>>,
    written: HashMap<Key, (Box<str>, Arc<str>, Instant)>,
    seen_while_inflight: HashMap<Key, HashSet<String>>,
    /// Keys whose pending write (in flight or not yet seen back) sets a drain.
    drain_writes: HashSet<Key>,
    proofs: HashMap<String, ProofRetry>,
    /// Checkers whose stuck drain was withdrawn, and until when they are
    /// not drained again.
    held_back: HashMap<Key, Instant>,
    /// Members whose proof is under way: their checkers wait for its
    /// verdict (the Lease's deletion, our own proof's, may be seen by the
    /// view before the verdict comes back).
    proving: HashSet<String>,
    /// Handovers in progress at most ([`super::window`]); the start width
    /// until the sharder sets one.
    window: Option<usize>,
    /// The ring's input, kept up to date with every change of the fields
    /// above, so that a decision costs what changed.
    standing: Standing,
    /// Acknowledged drains, by key: the target to assign.
    handovers: BTreeMap<Key, Arc<str>>,
    /// The checkers naming each member (as owner, drain target or a pending
    /// write's target): those to classify again when its standing changes.
    naming: HashMap<Arc<str>, HashSet<Key>>,
    /// How many checkers name each (owner, epoch).
    epochs: HashMap<(Arc<str>, Option<Arc<str>>), usize>,
    /// Checkers with a drain requested.
    draining: HashSet<Key>,
    /// The roster the classes follow.
    seen: Seen,
    /// Members whose proof started or ended since the last decision.
    touched: HashSet<String>,
    /// Checkers without a valid, unsuspected owner, under the roster seen.
    unserved: HashSet<Key>,
    /// Served checkers whose orphan clock runs: the census stops it.
    served_again: HashSet<Key>,
}

impl Book {
    pub fn synced(&self) -> bool {
        self.synced
    }

    pub fn object(&self, key: &str) -> Option<&ObjState> {
        self.objects.get(key)
    }

    pub fn list_begin(&mut self) {
        self.listing.clear();
    }

    pub fn list_item(&mut self, meta: &ObjectMeta, now: Instant) {
        let Some((key, prev)) = entry_of(&self.objects, meta) else {
            return;
        };
        let s = ObjState::from_meta(meta, prev, now, &mut self.names);
        self.listing.insert(key, s);
    }

    /// The book's allocation of `key`, or a new one.
    fn shared_key(&self, key: &str) -> Key {
        self.objects
            .get_key_value(key)
            .map_or_else(|| Key::from(key), |(k, _)| k.clone())
    }

    pub fn list_done(&mut self) {
        self.objects = std::mem::take(&mut self.listing);
        self.synced = true;
        self.standing.clear();
        self.handovers.clear();
        self.naming.clear();
        self.epochs.clear();
        self.draining.clear();
        self.unserved.clear();
        let keys: Vec<Key> = self.objects.keys().cloned().collect();
        for k in keys {
            self.link(&k);
        }
    }

    /// Folds a watched change in. When it completed a handover (the old
    /// owner assigned the drain's target itself): how long since the drain
    /// was first seen.
    pub fn applied(&mut self, meta: &ObjectMeta, now: Instant) -> Option<Duration> {
        let (k, prev) = entry_of(&self.objects, meta)?;
        let s = ObjState::from_meta(meta, prev, now, &mut self.names);
        let handed_over = prev
            .filter(|p| {
                p.owner.is_some()
                    && p.owner != s.owner
                    && p.drain().is_some()
                    && p.drain() == s.owner.as_deref()
                    && s.drain().is_none()
            })
            .map(|p| now.saturating_duration_since(p.drain_since().unwrap_or(now)));
        self.unlink(&k);
        if self
            .written
            .get(&k)
            .is_some_and(|(rv, _, _)| *rv == s.resource_version)
        {
            self.written.remove(&k);
            self.drain_writes.remove(&k);
        }
        // The event of our own write may arrive before the write's response.
        if let Some(seen) = self.seen_while_inflight.get_mut(&k) {
            seen.insert(s.resource_version.to_string());
        }
        self.objects.insert(k.clone(), s);
        self.link(&k);
        handed_over
    }

    /// Sets how many handovers may be in progress at once.
    pub fn set_window(&mut self, width: usize) {
        self.window = Some(width);
    }

    pub fn deleted(&mut self, meta: &ObjectMeta) {
        if let Some(key) = key_of(meta) {
            let key = key.as_str();
            self.unlink(key);
            self.objects.remove(key);
            self.written.remove(key);
            self.drain_writes.remove(key);
            self.link(key);
            crate::shrink_if_sparse(&mut self.objects);
        }
    }

    /// Is a write for `key` in flight or not yet seen back?
    pub fn pending(&self, key: &str) -> bool {
        self.inflight.contains_key(key) || self.written.contains_key(key)
    }

    pub fn write_started(&mut self, action: &Action) {
        let key = self.shared_key(action.key());
        self.unlink(&key);
        if matches!(action, Action::SetDrain { .. }) {
            self.drain_writes.insert(key.clone());
        }
        let target = self.names.get(action.target());
        self.inflight.insert(key.clone(), target);
        self.seen_while_inflight.insert(key.clone(), HashSet::new());
        self.link(&key);
    }

    pub fn write_finished(&mut self, key: &str, outcome: &WriteOutcome, now: Instant) {
        self.unlink(key);
        let target = self.inflight.remove(key);
        let seen = self.seen_while_inflight.remove(key).unwrap_or_default();
        if let WriteOutcome::Written(rv) = outcome
            && !seen.contains(rv)
        {
            let target = target.unwrap_or_else(|| Arc::from(""));
            let key = self.shared_key(key);
            self.written.insert(key, (rv.as_str().into(), target, now));
        }
        self.link(key);
        self.forget_settled_drain_writes();
    }

    fn forget_settled_drain_writes(&mut self) {
        let (inflight, written) = (&self.inflight, &self.written);
        self.drain_writes
            .retain(|k| inflight.contains_key(k) || written.contains_key(k));
    }

    /// Handovers in progress: drains requested (acknowledged or not, until
    /// the assignment clears them) and drain writes not yet seen back.
    pub fn handovers_in_progress(&self) -> usize {
        let annotated = self.draining.len();
        let unseen = self
            .drain_writes
            .iter()
            .filter(|k| self.objects.get(&***k).is_none_or(|o| o.drain().is_none()))
            .count();
        annotated + unseen
    }

    /// Releases keys whose write was never seen back. Returns whether any was.
    pub fn expire_written(&mut self, now: Instant) -> bool {
        let expired: Vec<Key> = self
            .written
            .iter()
            .filter(|(_, (_, _, at))| now.saturating_duration_since(*at) >= WRITTEN_HOLD)
            .map(|(k, _)| k.clone())
            .collect();
        for k in &expired {
            self.unlink(k);
            self.written.remove(k);
            self.link(k);
        }
        self.forget_settled_drain_writes();
        !expired.is_empty()
    }

    /// May we try to prove `id` gone now (retries are backed off)?
    pub fn proof_due(&self, id: &str, now: Instant) -> bool {
        self.proofs.get(id).is_none_or(|p| now >= p.next_at)
    }

    /// A proof got no verdict (429, 5xx, timeout): back off, from `base` doubling to `max`.
    pub fn proof_failed(&mut self, id: &str, now: Instant, base: Duration, max: Duration) {
        self.proof_over(id);
        let delay = self.proofs.get(id).map_or(base, |p| (p.delay * 2).min(max));
        self.proofs.insert(
            id.to_string(),
            ProofRetry {
                next_at: now + delay,
                delay,
            },
        );
    }

    /// The API server shed the proof (429, 503): busy, not down. Try again
    /// `soon` without growing the backoff, so a busy API server delays a
    /// dead member's checkers by a few shed calls, not by a doubled backoff.
    pub fn proof_shed(&mut self, id: &str, now: Instant, soon: Duration) {
        self.proof_over(id);
        let delay = self.proofs.get(id).map_or(soon, |p| p.delay);
        self.proofs.insert(
            id.to_string(),
            ProofRetry {
                next_at: now + soon,
                delay,
            },
        );
    }

    /// The member renewed meanwhile (409 on the proof): it is alive.
    pub fn proof_refuted(&mut self, id: &str) {
        self.proofs.remove(id);
        self.proof_over(id);
    }

    pub fn proven(&mut self, id: &str) {
        self.proofs.remove(id);
        self.proof_over(id);
        self.dead.insert(id.to_string());
    }

    /// A proof of `id` started: its checkers wait for the verdict.
    pub fn proof_started(&mut self, id: &str) {
        if self.proving.insert(id.to_string()) {
            self.touched.insert(id.to_string());
        }
    }

    /// The proof of `id` is no longer under way: its checkers count again.
    fn proof_over(&mut self, id: &str) {
        if self.proving.remove(id) {
            self.touched.insert(id.to_string());
        }
    }

    /// Whether a proof of `id` is under way.
    pub fn proving(&self, id: &str) -> bool {
        self.proving.contains(id)
    }

    /// Every proof's task died: none is under way any more.
    pub fn proofs_abandoned(&mut self) {
        self.touched.extend(self.proving.drain());
    }

    /// Forgets bookkeeping of members that no checker names any more.
    pub fn prune(&mut self, members: &BTreeMap<String, String>) {
        if self.dead.is_empty() && self.proofs.is_empty() {
            return;
        }
        let owners: HashSet<&str> = self.epochs.keys().map(|(o, _)| &**o).collect();
        self.dead.retain(|id| owners.contains(id.as_str()));
        self.proofs.retain(|id, _| members.contains_key(id));
    }

    /// Decides what to write. Keys with a write pending are left alone and count
    /// against that write's target; checkers of a suspect (stale, unproven)
    /// member are left alone and count nowhere: they move only after proof.
    ///
    /// Costs what changed since the last decision (members whose standing
    /// changed, checkers whose state did, the window's drains), not the fleet.
    pub fn decide(&mut self, m: &Roster<'_>) -> Vec<Action> {
        self.sync(m);
        self.tidy();
        // A leaving member is in no ring: its checkers are drained away
        // (it owns them validly until each handover), none placed on it.
        let ring_members: Vec<String> = m
            .members
            .keys()
            .filter(|id| m.placeable(id))
            .cloned()
            .collect();
        if ring_members.is_empty() {
            return Vec::new();
        }
        // In key order: BTreeMap.
        let mut actions: Vec<Action> = self
            .handovers
            .iter()
            .map(|(key, to)| Action::Assign {
                key: key.to_string(),
                to: to.to_string(),
                cause: Cause::Rebalance,
            })
            .collect();
        let width = self.window.unwrap_or(START_WINDOW);
        let window = width.saturating_sub(self.handovers_in_progress());
        let mut emit = Emit {
            book: Snapshot {
                objects: &self.objects,
                inflight: &self.inflight,
                written: &self.written,
                handovers: &self.handovers,
                held_back: &self.held_back,
                dead: &self.dead,
            },
            roster: m,
            window,
            actions: &mut actions,
        };
        self.standing
            .plan(&ring_members, window > 0, |mv| emit.take(mv));
        actions
    }

    /// (owner, epoch) of every checker whose epoch is neither its owner's
    /// Lease nor known to be gone ([`Roster::unverified`]): the sharder reads
    /// those owners' Leases before it moves anything of theirs.
    pub fn unverified(&self, m: &Roster<'_>) -> BTreeSet<(String, String)> {
        self.epochs
            .keys()
            .filter_map(|(owner, epoch)| {
                let epoch = epoch.as_deref()?;
                let gone = m.epoch_of(owner) != Some(epoch) && !m.retired.contains(epoch);
                gone.then(|| (owner.to_string(), epoch.to_string()))
            })
            .collect()
    }

    /// Drains the owner has not acknowledged within `bound` while it stayed
    /// the valid owner (its ack refused by admission, say, or lost): the
    /// owner holds the checker without probing it, so the drain is withdrawn
    /// (the owner resumes at once) and the checker is not drained again for
    /// [`STUCK_HOLD_FACTOR`] times the bound. A drain towards a target that
    /// left is re-targeted by [`Book::decide`] instead.
    pub fn stuck_drains(&mut self, m: &Roster<'_>, now: Instant, bound: Duration) -> Vec<Action> {
        self.held_back.retain(|_, until| *until > now);
        let mut actions = Vec::new();
        for key in &self.draining {
            let Some(o) = self.objects.get(&**key) else {
                continue;
            };
            let stuck = o
                .drain_since()
                .is_some_and(|t| now.saturating_duration_since(t) > bound);
            let target_fresh = m.drain_target(o).is_some();
            if !stuck || !target_fresh || !m.valid_owner(o) || self.pending(key) {
                continue;
            }
            let Some(owner) = o.owner.as_deref() else {
                continue;
            };
            actions.push(Action::ClearDrain {
                key: key.to_string(),
                owner: owner.to_string(),
            });
        }
        for a in &actions {
            let key = self.shared_key(a.key());
            self.held_back.insert(key, now + bound * STUCK_HOLD_FACTOR);
        }
        actions.sort_by(|a, b| a.key().cmp(b.key()));
        actions
    }

    /// Updates every checker's orphan clock and counts those without a valid,
    /// unsuspected owner (unowned, owner gone or suspect, handover not done)
    /// for longer than `grace`, or draining for longer than `drain_bound`.
    /// Visits the unserved and the draining only.
    pub fn census(
        &mut self,
        m: &Roster<'_>,
        now: Instant,
        grace: Duration,
        drain_bound: Duration,
    ) -> Census {
        self.sync(m);
        self.tidy();
        for key in std::mem::take(&mut self.served_again) {
            if !self.unserved.contains(&key)
                && let Some(o) = self.objects.get_mut(&key)
            {
                o.set_orphan_since(None);
            }
        }
        let mut orphaned = 0;
        let stuck_drain = |o: &ObjState| {
            o.drain_since()
                .is_some_and(|t| now.saturating_duration_since(t) > drain_bound)
        };
        for key in &self.unserved {
            let Some(o) = self.objects.get_mut(&**key) else {
                continue;
            };
            let since = o.orphan_since().unwrap_or(now);
            o.set_orphan_since(Some(since));
            if now.saturating_duration_since(since) > grace || stuck_drain(o) {
                orphaned += 1;
            }
        }
        for key in &self.draining {
            if !self.unserved.contains(key) && self.objects.get(&**key).is_some_and(stuck_drain) {
                orphaned += 1;
            }
        }
        Census { orphaned }
    }

    /// Gives back what a mass placement left: the maps of pending writes
    /// and of unserved checkers hold every checker for a while then, a
    /// handful after.
    fn tidy(&mut self) {
        use crate::shrink_if_sparse as shrink;
        shrink(&mut self.inflight);
        shrink(&mut self.written);
        shrink(&mut self.seen_while_inflight);
        shrink(&mut self.drain_writes);
        shrink(&mut self.held_back);
        shrink(&mut self.draining);
        shrink(&mut self.unserved);
        shrink(&mut self.served_again);
        for keys in self.naming.values_mut() {
            shrink(keys);
        }
    }
}

/// What the moves of a decision are checked against.
struct Snapshot<'a> {
    objects: &'a HashMap<Key, ObjState>,
    inflight: &'a HashMap<Key, Arc<str>>,
    written: &'a HashMap<Key, (Box<str>, Arc<str>, Instant)>,
    handovers: &'a BTreeMap<Key, Arc<str>>,
    held_back: &'a HashMap<Key, Instant>,
    dead: &'a HashSet<String>,
}

/// Turns the plan's moves into actions, drains within the window.
struct Emit<'a, 'r> {
    book: Snapshot<'a>,
    roster: &'a Roster<'r>,
    window: usize,
    actions: &'a mut Vec<Action>,
}

impl Emit<'_, '_> {
    /// Takes one move; whether more drains are wanted.
    fn take(&mut self, mv: Move) -> bool {
        let b = &self.book;
        let m = self.roster;
        match mv {
            Move::Assign { key, .. } | Move::Drain { key, .. }
                if b.inflight.contains_key(key.as_str())
                    || b.written.contains_key(key.as_str())
                    || b.handovers.contains_key(key.as_str()) => {}
            Move::Assign { key, to } => {
                let o = &b.objects[key.as_str()];
                if m.valid_owner(o) && o.owner.as_deref() == Some(to.as_str()) {
                    self.actions.push(Action::ClearDrain { key, owner: to });
                } else if m.valid_owner(o) {
                    self.drain(key, to);
                } else {
                    let cause = match o.owner.as_deref() {
                        None if o.drain().is_some() => Cause::Rebalance,
                        None => Cause::New,
                        Some(owner) if b.dead.contains(owner) => Cause::Dead,
                        Some(_) => Cause::Departed,
                    };
                    self.actions.push(Action::Assign { key, to, cause });
                }
            }
            Move::Drain { key, to, .. } => self.drain(key, to),
        }
        self.window > 0
    }

    fn drain(&mut self, key: String, to: String) {
        if self.window > 0 && !self.book.held_back.contains_key(key.as_str()) {
            self.window -= 1;
            self.actions.push(Action::SetDrain { key, to });
        }
    }
}

/// `meta`'s key, the book's allocation of it if it has one, and what the
/// book holds of it.
fn entry_of<'a>(
    objects: &'a HashMap<Key, ObjState>,
    meta: &ObjectMeta,
) -> Option<(Key, Option<&'a ObjState>)> {
    let k = key_of(meta)?;
    Some(match objects.get_key_value(k.as_str()) {
        Some((key, o)) => (key.clone(), Some(o)),
        None => (Key::from(k), None),
    })
}

fn key_of(meta: &ObjectMeta) -> Option<String> {
    Some(object_key(
        meta.namespace.as_deref()?,
        meta.name.as_deref()?,
    ))
}

/// The roster the classes were last brought up to date with.
#[derive(Default)]
struct Seen {
    members: BTreeMap<String, String>,
    suspects: HashSet<String>,
    leaving: HashSet<String>,
    retired: HashSet<String>,
}

impl Seen {
    fn of(m: &Roster<'_>) -> Self {
        Seen {
            members: m.members.clone(),
            suspects: m.suspects.clone(),
            leaving: m.leaving.clone(),
            retired: m.retired.clone(),
        }
    }

    fn roster(&self) -> Roster<'_> {
        Roster {
            members: &self.members,
            suspects: &self.suspects,
            leaving: &self.leaving,
            retired: &self.retired,
        }
    }
}

mod classes;
mod standing;
mod state;
#[cfg(test)]
mod tests;
