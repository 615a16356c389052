//! Evidence from peers that a member's process is gone.
//!
//! A Lease is a timeout chosen for the worst case; a process that died
//! usually leaves evidence at once. Every member advertises its HTTP
//! server's address and a random incarnation in its Lease
//! ([`crate::api::ADDRESS_ANNOTATION`], [`crate::api::INCARNATION_ANNOTATION`]).
//! The leader looks at every other member's address, a follower at the
//! leader's, every [`PERIOD`]:
//!
//! - connection refused (twice, [`CONFIRM_AFTER`] apart), or a /healthz
//!   answer naming another incarnation: the process is **gone**. The member
//!   may then be proven gone (its Lease deleted with UID and resourceVersion
//!   preconditions, as for an expired Lease) at once;
//! - an answer naming its incarnation: alive;
//! - anything else (timeout, reset, no answer: a paused or busy process, a
//!   lossy path, a lost node): no evidence; the Lease rules apply as before.
//!
//! Evidence can lie: a firewall that rejects, a process whose HTTP server
//! died while its engine runs (the process exits then, see
//! [`crate::observe::server::spawn`]). The deleted Lease fences such a member at its
//! next renewal, within one retry period, so two replicas probe its checkers
//! for at most that long. It then re-joins with its Lease marked
//! `peer-evidence: distrusted`, and a judge whose proof was refuted (the
//! member renewed meanwhile) distrusts that incarnation as well: evidence
//! against one process lies at most once.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;
use tracing::{info, warn};

use super::view::{MemberView, ObservedLease, PeerAddress};
use crate::coordination::look::{Evidence, look};
use crate::error::Error;

/// How often peers are looked at.
pub const PERIOD: Duration = Duration::from_millis(250);
/// A refusal is confirmed by a second one this much later.
pub const CONFIRM_AFTER: Duration = Duration::from_millis(50);
/// How long one look may take (connect plus answer).
const LOOK_LIMIT: Duration = Duration::from_millis(500);

#[derive(Debug, Default)]
struct State {
    /// Holder of the leader Lease as last read, and whether it is us.
    leader: Option<String>,
    leading: bool,
    /// Incarnations whose process the last look found gone.
    gone: HashSet<String>,
    /// Incarnations whose evidence lied once.
    distrusted: HashSet<String>,
}

pub struct Peers {
    me: String,
    enabled: bool,
    state: Mutex<State>,
    /// Woken when a process is newly found gone.
    pub changed: Notify,
}

impl Peers {
    pub fn new(me: &str, enabled: bool) -> Arc<Self> {
        Arc::new(Peers {
            me: me.to_string(),
            enabled,
            state: Mutex::new(State::default()),
            changed: Notify::new(),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The elector tells who leads (a follower looks at the leader only).
    pub fn set_leader(&self, holder: Option<&str>, leading: bool) {
        let mut s = self.lock();
        s.leader = holder.filter(|h| !h.is_empty()).map(str::to_string);
        s.leading = leading;
    }

    /// Is this member's process proven gone by evidence?
    pub fn gone(&self, lease: &ObservedLease) -> bool {
        let s = self.lock();
        lease.peer.as_ref().is_some_and(|p| {
            s.gone.contains(&p.incarnation) && !s.distrusted.contains(&p.incarnation)
        })
    }

    /// The evidence against this member lied (it renewed after all).
    pub fn distrust(&self, lease: &ObservedLease) {
        if let Some(p) = &lease.peer {
            warn!(address = %p.address, "a member found gone by its address renewed its Lease: its address is not evidence any more");
            self.lock().distrusted.insert(p.incarnation.clone());
        }
    }

    /// Whom to look at: every other member when leading, else the leader.
    fn targets(&self, members: &[(String, ObservedLease)]) -> Vec<PeerAddress> {
        let s = self.lock();
        members
            .iter()
            .filter(|(id, _)| *id != self.me)
            .filter(|(id, _)| s.leading || s.leader.as_deref() == Some(id.as_str()))
            .filter_map(|(_, l)| l.peer.clone())
            .filter(|p| !s.distrusted.contains(&p.incarnation))
            .collect()
    }

    /// Records one round of looks; returns whether a process is newly gone.
    fn record(&self, looked: Vec<(PeerAddress, Evidence)>) -> bool {
        let mut s = self.lock();
        let mut newly = false;
        let mut gone = HashSet::new();
        for (p, e) in looked {
            if e == Evidence::Gone {
                if !s.gone.contains(&p.incarnation) {
                    info!(address = %p.address, "a peer's process is gone (its address refuses connections)");
                    newly = true;
                }
                gone.insert(p.incarnation);
            }
        }
        s.gone = gone;
        newly
    }

    /// Looks at the peers every [`PERIOD`] (never returns when disabled).
    pub async fn run(self: Arc<Self>, view: Arc<MemberView>) -> Result<(), Error> {
        if !self.enabled {
            std::future::pending::<()>().await;
        }
        let mut tick = tokio::time::interval(PERIOD);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let Some(members) = view.observed() else {
                continue;
            };
            let targets = self.targets(&members);
            let looked = futures::future::join_all(targets.into_iter().map(|p| async move {
                let e = look_twice(&p).await;
                (p, e)
            }))
            .await;
            if self.record(looked) {
                self.changed.notify_waiters();
            }
        }
    }
}

/// A refusal counts only when a second look confirms it.
async fn look_twice(p: &PeerAddress) -> Evidence {
    match look(&p.address, &p.incarnation, LOOK_LIMIT).await {
        Evidence::Gone => {
            tokio::time::sleep(CONFIRM_AFTER).await;
            look(&p.address, &p.incarnation, LOOK_LIMIT).await
        }
        e => e,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    fn observed(id: &str, inc: &str) -> (String, ObservedLease) {
        (
            id.to_string(),
            ObservedLease {
                name: format!("webchecker-member-{id}"),
                uid: format!("uid-{id}"),
                resource_version: "1".into(),
                observed_at: Instant::now(),
                peer: Some(PeerAddress {
                    address: format!("{id}:80"),
                    incarnation: inc.to_string(),
                }),
                place: Default::default(),
                leaving: false,
            },
        )
    }

    #[test]
    fn the_leader_looks_at_everyone_a_follower_at_the_leader() {
        let p = Peers::new("a", true);
        let m = vec![observed("a", "1"), observed("b", "2"), observed("c", "3")];
        let addrs = |v: Vec<PeerAddress>| v.into_iter().map(|p| p.address).collect::<Vec<_>>();
        assert!(p.targets(&m).is_empty(), "no leader known yet");
        p.set_leader(Some("b"), false);
        assert_eq!(addrs(p.targets(&m)), ["b:80"]);
        p.set_leader(Some("a"), true);
        assert_eq!(addrs(p.targets(&m)), ["b:80", "c:80"]);
    }

    #[test]
    fn evidence_that_lied_once_is_never_used_again() {
        let p = Peers::new("a", true);
        p.set_leader(Some("a"), true);
        let (_, b) = observed("b", "2");
        assert!(p.record(vec![(b.peer.clone().unwrap(), Evidence::Gone)]));
        assert!(p.gone(&b));
        // Seen again: not news.
        assert!(!p.record(vec![(b.peer.clone().unwrap(), Evidence::Gone)]));
        p.distrust(&b);
        assert!(!p.gone(&b));
        assert!(p.targets(&[observed("b", "2")]).is_empty());
        // A restarted process (new incarnation) is judged afresh.
        let (_, b2) = observed("b", "3");
        p.record(vec![(b2.peer.clone().unwrap(), Evidence::Gone)]);
        assert!(p.gone(&b2));
        // Alive again (or no evidence): not gone.
        p.record(vec![(b2.peer.clone().unwrap(), Evidence::Unknown)]);
        assert!(!p.gone(&b2));
    }
}
