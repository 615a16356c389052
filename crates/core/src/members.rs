//! The view of the member Leases: who the members are, where they run and
//! are reached, which Leases are known gone, and which members may be
//! judged gone. Pure: the watch (`src/coordination/shard/view.rs`) passes
//! each Lease and the clock.
//!
//! The judge rule: **a judge may count against a member only time during
//! which the judge itself could write.** A member becomes a suspect when its
//! Lease has not changed, as this replica observed it, for a whole lease
//! duration counted from the latest of: when the change was observed, when
//! this replica's own current run of successful renewals began
//! (the membership's `judge_since`), and when this view last
//! (re)started from a list; time while this view's watch was failing does
//! not count (the clocks pause and go on when it delivers again: a resumed
//! watch replays what it missed, so a failure is a pause, not a reason to
//! start over, which a share of failed calls would make endless). An etcd stall
//! lets every API call fail while watches stay open and no Lease changes:
//! without the second term every member looks dead the moment it ends. A
//! replica never judges itself. A suspect is only suspected: its checkers move
//! after it is proven gone (see the sharder), never on silence alone.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;

use webchecker_api::{
    ADDRESS_ANNOTATION, CONFIRM_ADDRESS_ANNOTATION, INCARNATION_ANNOTATION, LEAVING_ANNOTATION,
    NODE_ANNOTATION, PEER_EVIDENCE_ANNOTATION, ZONE_ANNOTATION,
};

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObservedLease {
    pub name: String,
    pub uid: String,
    pub resource_version: String,
    pub observed_at: Instant,
    /// Where the member's HTTP server is reached, and the process behind it
    /// (its Lease's annotations); `None` when it advertises none or asked to
    /// be judged by its Lease alone.
    pub peer: Option<PeerAddress>,
    /// Where it runs and is reached, for confirmations (crate::confirm).
    pub place: MemberPlace,
    /// It was asked to stop and hands its checkers over.
    pub leaving: bool,
}

fn leaving(lease: &Lease) -> bool {
    let a = lease.metadata.annotations.as_ref();
    a.and_then(|a| a.get(LEAVING_ANNOTATION))
        .is_some_and(|v| v == "true")
}

/// A member's advertised address, zone and node (empty when unknown).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MemberPlace {
    pub address: Option<String>,
    /// Where it takes asks (crate::confirm::endpoint).
    pub confirm_address: Option<String>,
    pub zone: String,
    pub node: String,
}

fn member_place(lease: &Lease) -> MemberPlace {
    let a = lease.metadata.annotations.as_ref();
    let get = |k: &str| a.and_then(|a| a.get(k)).cloned();
    MemberPlace {
        address: get(ADDRESS_ANNOTATION),
        confirm_address: get(CONFIRM_ADDRESS_ANNOTATION),
        zone: get(ZONE_ANNOTATION).unwrap_or_default(),
        node: get(NODE_ANNOTATION).unwrap_or_default(),
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PeerAddress {
    pub address: String,
    pub incarnation: String,
}

fn peer_address(lease: &Lease) -> Option<PeerAddress> {
    let a = lease.metadata.annotations.as_ref()?;
    if a.get(PEER_EVIDENCE_ANNOTATION).map(String::as_str) == Some("distrusted") {
        return None;
    }
    Some(PeerAddress {
        address: a.get(ADDRESS_ANNOTATION)?.clone(),
        incarnation: a.get(INCARNATION_ANNOTATION)?.clone(),
    })
}

/// The view as plain state, driven by watch events; every rule is a method
/// that takes `now`.
#[derive(Debug)]
pub struct Members {
    leases: HashMap<String, ObservedLease>,
    synced: bool,
    /// False from a watch error until the next event: changes may be missing.
    watch_ok: bool,
    /// Clocks count from no earlier than this (the last list).
    fresh_since: Instant,
    /// Since when the watch has been failing (the clocks are paused).
    blind_since: Option<Instant>,
    /// UIDs of member Leases known to be gone (deleted, proven gone, or
    /// replaced under their name). Only these prove that an assignment's
    /// epoch ended: an epoch the view does not know may be a newer Lease
    /// than it has seen (a lagging or failing watch).
    /// Shared with the sharder's decisions (copied only when changed while shared).
    retired: Arc<HashSet<String>>,
}

/// Retired UIDs kept at most; forgetting them is safe (an unknown epoch is
/// checked with a read, see the sharder), only slower.
const RETIRED_MAX: usize = 4096;

impl Members {
    pub fn new(now: Instant) -> Self {
        Members {
            leases: HashMap::new(),
            synced: false,
            watch_ok: false,
            fresh_since: now,
            blind_since: None,
            retired: Arc::default(),
        }
    }

    /// The Lease `uid` is gone for good (UIDs never come back).
    pub fn retire(&mut self, uid: &str) {
        if self.retired.contains(uid) {
            return;
        }
        let retired = Arc::make_mut(&mut self.retired);
        if retired.len() >= RETIRED_MAX {
            retired.clear();
        }
        retired.insert(uid.to_string());
    }

    /// UIDs of member Leases known to be gone.
    pub fn retired(&self) -> Arc<HashSet<String>> {
        self.retired.clone()
    }

    /// A watch event other than an error arrived at `now`: the clocks go on
    /// from where they paused.
    fn watch_healthy(&mut self, now: Instant) {
        if !self.watch_ok {
            self.watch_ok = true;
            if let Some(since) = self.blind_since.take() {
                let gap = now.saturating_duration_since(since);
                for l in self.leases.values_mut() {
                    l.observed_at = (l.observed_at + gap).min(now);
                }
                self.fresh_since = (self.fresh_since + gap).min(now);
            }
        }
    }

    /// A full list replaced the view.
    pub fn listed(&mut self, leases: &[Lease], now: Instant) {
        // A list is a fresh read: a Lease known before and not listed now is gone.
        let listed: HashSet<&str> = leases
            .iter()
            .filter_map(|l| l.metadata.uid.as_deref())
            .collect();
        let gone: Vec<String> = self
            .leases
            .values()
            .filter(|l| !listed.contains(l.uid.as_str()))
            .map(|l| l.uid.clone())
            .collect();
        for uid in gone {
            self.retire(&uid);
        }
        self.leases.clear();
        self.synced = true;
        self.watch_ok = true;
        self.blind_since = None;
        // Fresh clocks for everyone: we may have been the one cut off.
        self.fresh_since = now;
        for l in leases {
            self.apply(l, now);
        }
    }

    pub fn apply(&mut self, lease: &Lease, now: Instant) {
        self.watch_healthy(now);
        let (Some(name), Some(uid), Some(rv)) = (
            lease.metadata.name.clone(),
            lease.metadata.uid.clone(),
            lease.metadata.resource_version.clone(),
        ) else {
            return;
        };
        let Some(holder) = lease.spec.as_ref().and_then(|s| s.holder_identity.clone()) else {
            return;
        };
        if self.retired.contains(&uid) {
            // A replayed version of a Lease already gone (proven gone by us).
            return;
        }
        match self.leases.get(&holder) {
            Some(l) if l.resource_version == rv && l.uid == uid => {}
            prev => {
                // Another UID under the same name: the earlier Lease is gone.
                if let Some(p) = prev.filter(|p| p.uid != uid && p.name == name) {
                    let old = p.uid.clone();
                    self.retire(&old);
                }
                self.leases.insert(
                    holder,
                    ObservedLease {
                        name,
                        uid,
                        resource_version: rv,
                        observed_at: now,
                        peer: peer_address(lease),
                        place: member_place(lease),
                        leaving: leaving(lease),
                    },
                );
            }
        }
    }

    /// A Lease was deleted (released, or proven gone by the sharder).
    pub fn delete_uid(&mut self, uid: &str, now: Instant) {
        self.watch_healthy(now);
        self.leases.retain(|_, l| l.uid != uid);
        self.retire(uid);
    }

    /// The watch failed at `now`: keep what we know (a resumed watch replays
    /// what we missed), judge nobody and pause the clocks until it delivers
    /// again.
    pub fn watch_failed(&mut self, now: Instant) {
        if self.watch_ok || self.blind_since.is_none() {
            self.blind_since.get_or_insert(now);
        }
        self.watch_ok = false;
    }

    /// Every member with a Lease and its epoch (the Lease UID); `None` until
    /// the first list.
    pub fn members(&self) -> Option<BTreeMap<String, String>> {
        self.synced.then(|| {
            self.leases
                .iter()
                .map(|(id, l)| (id.clone(), l.uid.clone()))
                .collect()
        })
    }

    /// Members whose Lease says they are leaving.
    pub fn leaving(&self) -> HashSet<String> {
        self.leases
            .iter()
            .filter(|(_, l)| l.leaving)
            .map(|(id, _)| id.clone())
            .collect()
    }

    /// Every member's place, as last seen (also while the watch is failing:
    /// a confirmer that is gone does not answer, which is safe).
    pub fn places(&self) -> Vec<(String, MemberPlace)> {
        self.leases
            .iter()
            .map(|(id, l)| (id.clone(), l.place.clone()))
            .collect()
    }

    /// Every member's Lease as observed (for evidence, see `super::peers`),
    /// `None` unless the view is synced and its watch healthy.
    pub fn observed(&self) -> Option<Vec<(String, ObservedLease)>> {
        (self.synced && self.watch_ok).then(|| {
            let mut v: Vec<_> = self
                .leases
                .iter()
                .map(|(id, l)| (id.clone(), l.clone()))
                .collect();
            v.sort_by(|a, b| a.0.cmp(&b.0));
            v
        })
    }

    /// Members whose Lease stood still for a whole `lease_duration` of time
    /// this judge could count (see the module doc). `judge_since` is `None`
    /// while the judge itself cannot write: then nobody is suspect.
    pub fn suspects(
        &self,
        me: &str,
        lease_duration: Duration,
        judge_since: Option<Instant>,
        now: Instant,
    ) -> Vec<(String, ObservedLease)> {
        let Some(judge_since) = judge_since else {
            return Vec::new();
        };
        if !self.synced || !self.watch_ok {
            return Vec::new();
        }
        let counted_from = judge_since.max(self.fresh_since);
        let mut out: Vec<(String, ObservedLease)> = self
            .leases
            .iter()
            .filter(|(id, l)| {
                id.as_str() != me
                    && now.saturating_duration_since(l.observed_at.max(counted_from))
                        > lease_duration
            })
            .map(|(id, l)| (id.clone(), l.clone()))
            .collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::coordination::v1::LeaseSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    const LEASE: Duration = Duration::from_secs(3);

    fn lease(holder: &str, rv: &str) -> Lease {
        Lease {
            metadata: ObjectMeta {
                name: Some(format!("webchecker-member-{holder}")),
                uid: Some(format!("uid-{holder}")),
                resource_version: Some(rv.into()),
                ..Default::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(holder.into()),
                ..Default::default()
            }),
        }
    }

    fn ids(s: &[(String, ObservedLease)]) -> Vec<&str> {
        s.iter().map(|(id, _)| id.as_str()).collect()
    }

    #[test]
    fn a_stalled_judge_suspects_nobody_when_the_stall_ends() {
        // etcd froze for 25 s: no Lease changed, every renewal (ours too) failed.
        let t0 = Instant::now();
        let mut m = Members::new(t0);
        m.listed(&[lease("a", "1"), lease("b", "1"), lease("c", "1")], t0);
        let end = t0 + Duration::from_secs(25);
        // Our first renewal after the stall succeeded just now.
        assert!(m.suspects("a", LEASE, Some(end), end).is_empty());
        // The others renew within a lease: still nobody.
        m.apply(&lease("b", "2"), end + Duration::from_secs(1));
        m.apply(&lease("c", "2"), end + Duration::from_secs(1));
        assert!(
            m.suspects("a", LEASE, Some(end), end + Duration::from_secs(3))
                .is_empty()
        );
        // c dies after the stall: suspected one lease after its last renewal.
        m.apply(&lease("b", "3"), end + Duration::from_secs(3));
        let later = end + Duration::from_secs(4) + Duration::from_millis(100);
        assert_eq!(ids(&m.suspects("a", LEASE, Some(end), later)), ["c"]);
    }

    #[test]
    fn without_the_judge_rule_every_member_would_be_suspect() {
        // The bug this guards against: clocks counted from the observation alone.
        let t0 = Instant::now();
        let mut m = Members::new(t0);
        m.listed(&[lease("a", "1"), lease("b", "1")], t0);
        let end = t0 + Duration::from_secs(25);
        assert_eq!(ids(&m.suspects("a", LEASE, Some(t0), end)), ["b"]);
        assert!(m.suspects("a", LEASE, Some(end), end).is_empty());
    }

    #[test]
    fn a_judge_that_cannot_write_judges_nobody_and_never_itself() {
        let t0 = Instant::now();
        let mut m = Members::new(t0);
        m.listed(&[lease("a", "1"), lease("b", "1")], t0);
        let late = t0 + Duration::from_secs(60);
        assert!(m.suspects("a", LEASE, None, late).is_empty());
        assert_eq!(ids(&m.suspects("a", LEASE, Some(t0), late)), ["b"]);
        assert_eq!(ids(&m.suspects("b", LEASE, Some(t0), late)), ["a"]);
    }

    #[test]
    fn a_watch_error_keeps_the_view_and_pauses_the_clocks() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut m = Members::new(t0);
        m.listed(&[lease("a", "1"), lease("b", "1")], t0);
        // b has been silent for 2 s when the watch fails.
        m.watch_failed(t0 + ms(2000));
        // The view stays usable for decisions (the sharder must not freeze)...
        assert_eq!(m.members().map(|x| x.len()), Some(2));
        // ...but nobody is judged while changes may be missing.
        let late = t0 + Duration::from_secs(10);
        assert!(m.suspects("a", LEASE, Some(t0), late).is_empty());
        // The resumed watch delivers a (replayed) renewal of a; b stays
        // silent: the 2 s before the failure count, the 8 s blind do not.
        m.apply(&lease("a", "2"), late);
        assert!(m.suspects("a", LEASE, Some(t0), late + ms(900)).is_empty());
        assert_eq!(
            ids(&m.suspects("a", LEASE, Some(t0), late + ms(1100))),
            ["b"]
        );
    }

    #[test]
    fn a_watch_failing_often_delays_a_verdict_only_by_its_blind_time() {
        // A busy API server: the watch fails every 500 ms and resumes 100 ms
        // later. Were the clocks restarted on each, b would never be judged.
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut m = Members::new(t0);
        m.listed(&[lease("a", "1"), lease("b", "1")], t0);
        let mut at = t0;
        let mut renewals = 1;
        while at < t0 + ms(3000) {
            m.watch_failed(at + ms(400));
            renewals += 1;
            m.apply(&lease("a", &renewals.to_string()), at + ms(500));
            at += ms(500);
        }
        // 6 spans of 100 ms blind: b is suspect after 3 s + 0.6 s.
        assert!(m.suspects("a", LEASE, Some(t0), t0 + ms(3500)).is_empty());
        assert_eq!(ids(&m.suspects("a", LEASE, Some(t0), t0 + ms(3700))), ["b"]);
    }

    fn with_uid(mut l: Lease, uid: &str) -> Lease {
        l.metadata.uid = Some(uid.into());
        l
    }

    #[test]
    fn leases_seen_go_are_retired_and_never_come_back() {
        let t0 = Instant::now();
        let mut m = Members::new(t0);
        m.listed(&[lease("a", "1"), lease("b", "1"), lease("c", "1")], t0);
        // Replaced under its name (a restart): the old UID is gone.
        m.apply(&with_uid(lease("a", "2"), "uid-a2"), t0);
        assert!(m.retired().contains("uid-a"));
        // Deleted (released, or proven gone).
        m.delete_uid("uid-b", t0);
        assert!(m.retired().contains("uid-b"));
        // A replayed version of a retired Lease does not bring it back.
        m.apply(&lease("b", "1"), t0);
        assert_eq!(m.members().unwrap().get("b"), None);
        // Missing from a re-list.
        m.listed(&[with_uid(lease("a", "3"), "uid-a2")], t0);
        assert!(m.retired().contains("uid-c"));
        assert!(!m.retired().contains("uid-a2"));
    }

    #[test]
    fn nothing_is_a_member_before_the_first_list() {
        let t0 = Instant::now();
        let mut m = Members::new(t0);
        m.apply(&lease("a", "1"), t0);
        assert_eq!(m.members(), None);
        m.listed(&[lease("a", "1")], t0);
        assert_eq!(m.members().map(|x| x.len()), Some(1));
        m.delete_uid("uid-a", t0);
        assert_eq!(m.members().map(|x| x.len()), Some(0));
    }
}
