//! The classes the sharder's book keeps up to date change by change:
//! where the plan counts each checker under the roster last seen, the
//! members each checker names (so that a member's change reclassifies only
//! its checkers), and bringing them up to date with a new roster.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Instant;

use super::{Book, Key, ObjState, Roster, Seen};

impl Book {
    /// Before a change of `key`'s object or pending write: forgets what it
    /// names.
    pub(super) fn unlink(&mut self, key: &str) {
        let Some(o) = self.objects.get(key) else {
            return;
        };
        let pending = pending_target(&self.inflight, &self.written, key);
        for name in named(o, pending) {
            if let Some(keys) = self.naming.get_mut(name) {
                keys.remove(key);
                if keys.is_empty() {
                    self.naming.remove(name);
                }
            }
        }
        if let Some(owner) = &o.owner {
            let pair = (owner.clone(), o.epoch.clone());
            if let Some(n) = self.epochs.get_mut(&pair) {
                *n -= 1;
                if *n == 0 {
                    self.epochs.remove(&pair);
                }
            }
        }
        if o.drain().is_some() {
            self.draining.remove(key);
        }
    }

    /// After a change of `key`'s object or pending write: records what it
    /// names, and its class.
    pub(super) fn link(&mut self, key: &str) {
        if let Some((k, o)) = self.objects.get_key_value(key) {
            let pending = pending_target(&self.inflight, &self.written, key);
            for name in named(o, pending) {
                match self.naming.get_mut(name) {
                    Some(keys) => {
                        keys.insert(k.clone());
                    }
                    None => {
                        self.naming
                            .insert(Arc::from(name), HashSet::from([k.clone()]));
                    }
                }
            }
            if let Some(owner) = &o.owner {
                *self
                    .epochs
                    .entry((owner.clone(), o.epoch.clone()))
                    .or_default() += 1;
            }
            if o.drain().is_some() {
                self.draining.insert(k.clone());
            }
        }
        self.classify(key);
    }

    /// Where the plan counts `key`, under the roster last seen.
    pub(super) fn classify(&mut self, key: &str) {
        let Some((k, o)) = self.objects.get_key_value(key) else {
            self.standing.remove(key);
            self.handovers.remove(key);
            self.unserved.remove(key);
            return;
        };
        let m = self.seen.roster();
        if m.valid_owner(o) && o.owner.as_deref().is_some_and(|id| m.fresh(id)) {
            self.unserved.remove(key);
            if o.orphan_since().is_some() {
                self.served_again.insert(k.clone());
            }
        } else if !self.unserved.contains(key) {
            self.unserved.insert(k.clone());
        }
        let pending = pending_target(&self.inflight, &self.written, key);
        match class_of(o, pending, &self.seen.roster(), &self.proving) {
            Class::Skip => {
                self.standing.remove(key);
                self.handovers.remove(key);
            }
            Class::Held(h) => {
                self.standing.put(k, h);
                self.handovers.remove(key);
            }
            Class::HandOver(t) => {
                self.standing.put(k, Some(t));
                if self.handovers.get(key).map(|t| &**t) != Some(t) {
                    self.handovers.insert(k.clone(), self.names.get(t));
                }
            }
        }
    }

    /// Brings every class up to date with the roster `m`: those of the
    /// checkers that name a member whose standing changed since the last
    /// decision (came, went, new epoch, suspect, leaving, proof under way or
    /// over, an epoch of its found gone).
    pub(super) fn sync(&mut self, m: &Roster<'_>) {
        let mut touched = std::mem::take(&mut self.touched);
        let seen = &self.seen;
        for (id, epoch) in m.members {
            if seen.members.get(id) != Some(epoch) {
                touched.insert(id.clone());
            }
        }
        for id in seen.members.keys() {
            if !m.members.contains_key(id) {
                touched.insert(id.clone());
            }
        }
        touched.extend(m.suspects.symmetric_difference(&seen.suspects).cloned());
        touched.extend(m.leaving.symmetric_difference(&seen.leaving).cloned());
        let gone: HashSet<&str> = m
            .retired
            .symmetric_difference(&seen.retired)
            .map(String::as_str)
            .collect();
        if !gone.is_empty() {
            touched.extend(
                self.epochs
                    .keys()
                    .filter(|(_, e)| e.as_deref().is_some_and(|e| gone.contains(e)))
                    .map(|(owner, _)| owner.to_string()),
            );
        }
        if !touched.is_empty() || !gone.is_empty() {
            self.seen = Seen::of(m);
        }
        for id in touched {
            let keys: Vec<Key> = self
                .naming
                .get(id.as_str())
                .map(|k| k.iter().cloned().collect())
                .unwrap_or_default();
            for k in keys {
                self.classify(&k);
            }
        }
    }
}

/// Where the plan counts a checker.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Class<'a> {
    /// Nowhere: its owner is suspect, being proven gone, or unverified.
    Skip,
    /// Against this ring member (`None`: it has no live holder).
    Held(Option<&'a str>),
    /// Its owner acknowledged the drain: it is assigned to the target, and
    /// counts there.
    HandOver(&'a str),
}

/// A checker's class under roster `m`, with `pending` the target of a write
/// of ours in flight or not yet seen back.
pub(super) fn class_of<'a>(
    o: &'a ObjState,
    pending: Option<&'a str>,
    m: &Roster<'_>,
    proving: &HashSet<String>,
) -> Class<'a> {
    if let Some(t) = pending {
        return Class::Held(Some(t).filter(|t| m.placeable(t)));
    }
    let valid = m.valid_owner(o);
    let owner = o.owner.as_deref();
    if valid && owner.is_some_and(|id| m.suspects.contains(id)) {
        return Class::Skip;
    }
    if owner.is_some_and(|id| proving.contains(id)) || m.unverified(o).is_some() {
        return Class::Skip;
    }
    let holder = match (valid, m.drain_target(o)) {
        // A drain in progress counts against its target.
        (true, Some(t)) => Some(t),
        (true, None) if o.drain().is_none() => owner,
        // Draining towards a member that left, is suspect or holds
        // another Lease than the drain names: re-target.
        (true, None) => None,
        // The old owner acknowledged the drain: hand over to the target.
        (false, Some(t)) if o.owner.is_none() => return Class::HandOver(t),
        (false, _) => None,
    };
    // A leaving owner is in no ring: its checkers have no holder there.
    Class::Held(holder.filter(|h| m.placeable(h)))
}

/// The target of a write for `key` in flight or not yet seen back.
pub(super) fn pending_target<'a>(
    inflight: &'a HashMap<Key, Arc<str>>,
    written: &'a HashMap<Key, (Box<str>, Arc<str>, Instant)>,
    key: &str,
) -> Option<&'a str> {
    inflight
        .get(key)
        .or_else(|| written.get(key).map(|w| &w.1))
        .map(|t| &**t)
}

/// The members `o` names, and the target of its pending write.
pub(super) fn named<'a>(o: &'a ObjState, pending: Option<&'a str>) -> Vec<&'a str> {
    let mut names: Vec<&str> = [o.owner.as_deref(), o.drain(), pending]
        .into_iter()
        .flatten()
        .collect();
    names.sort_unstable();
    names.dedup();
    names
}
