//! What the sharder's book keeps of each checker: a leader holds it for
//! every checker of the fleet, so it is kept small.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Instant;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use webchecker_api::assignment::Assignment;

/// What the sharder keeps of a checker. Member names and Lease UIDs are
/// shared ([`Names`]): a leader holds this for every checker of the fleet.
#[derive(Clone, Debug)]
pub struct ObjState {
    pub resource_version: Box<str>,
    pub owner: Option<Arc<str>>,
    pub epoch: Option<Arc<str>>,
    /// What a settled checker does not have: boxed, `None` when all is.
    pub(super) passing: Option<Box<Passing>>,
}

/// A checker's drain and clocks, while it has any.
#[derive(Clone, Debug, Default, PartialEq)]
pub(super) struct Passing {
    drain: Option<Arc<str>>,
    /// The drain target's Lease UID, as the sharder wrote it beside the drain.
    drain_epoch: Option<Arc<str>>,
    first_seen_unassigned: Option<Instant>,
    drain_since: Option<Instant>,
    /// Since when no valid, unsuspected owner probes it (see [`Book::census`]).
    orphan_since: Option<Instant>,
}

impl Passing {
    fn boxed(self) -> Option<Box<Passing>> {
        (self != Passing::default()).then(|| Box::new(self))
    }
}

impl ObjState {
    pub fn drain(&self) -> Option<&str> {
        self.passing.as_ref()?.drain.as_deref()
    }
    pub fn drain_epoch(&self) -> Option<&str> {
        self.passing.as_ref()?.drain_epoch.as_deref()
    }
    pub fn first_seen_unassigned(&self) -> Option<Instant> {
        self.passing.as_ref()?.first_seen_unassigned
    }
    pub fn drain_since(&self) -> Option<Instant> {
        self.passing.as_ref()?.drain_since
    }
    pub fn orphan_since(&self) -> Option<Instant> {
        self.passing.as_ref()?.orphan_since
    }
    pub(super) fn set_orphan_since(&mut self, at: Option<Instant>) {
        if self.orphan_since() == at {
            return;
        }
        let mut p = self.passing.take().map(|p| *p).unwrap_or_default();
        p.orphan_since = at;
        self.passing = p.boxed();
    }

    pub(super) fn from_meta(
        meta: &ObjectMeta,
        prev: Option<&ObjState>,
        now: Instant,
        names: &mut Names,
    ) -> Self {
        let Assignment {
            owner,
            epoch,
            drain,
            drain_epoch,
            ..
        } = Assignment::of(meta);
        let since = |was: Option<Instant>, is: bool| is.then(|| was.unwrap_or(now));
        let first_seen_unassigned = since(
            prev.and_then(|p| p.first_seen_unassigned()),
            owner.is_none() && drain.is_none(),
        );
        let drain_since = since(prev.and_then(|p| p.drain_since()), drain.is_some());
        let mut name = |v: Option<String>| v.map(|v| names.get(&v));
        let passing = Passing {
            drain: name(drain),
            drain_epoch: name(drain_epoch),
            first_seen_unassigned,
            drain_since,
            orphan_since: prev.and_then(|p| p.orphan_since()),
        };
        ObjState {
            resource_version: meta.resource_version.as_deref().unwrap_or_default().into(),
            owner: name(owner),
            epoch: name(epoch),
            passing: passing.boxed(),
        }
    }
}

/// Member names and Lease UIDs, one allocation each however many checkers
/// name them.
#[derive(Default)]
pub(super) struct Names {
    pub(super) set: HashSet<Arc<str>>,
    /// The set's size after its last sweep: it sweeps again at twice that.
    swept: usize,
}

impl Names {
    pub(super) fn get(&mut self, s: &str) -> Arc<str> {
        if let Some(a) = self.set.get(s) {
            return a.clone();
        }
        if self.set.len() >= 2 * self.swept.max(32) {
            // Names nothing holds any more: members gone, epochs replaced.
            self.set.retain(|a| Arc::strong_count(a) > 1);
            self.swept = self.set.len();
        }
        let a: Arc<str> = Arc::from(s);
        self.set.insert(a.clone());
        a
    }
}
