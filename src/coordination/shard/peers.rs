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

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::Notify;
use tracing::{info, warn};

use super::view::{MemberView, ObservedLease, PeerAddress};
use crate::api::INCARNATION_HEADER;
use crate::error::Error;

/// How often peers are looked at.
pub const PERIOD: Duration = Duration::from_millis(250);
/// A refusal is confirmed by a second one this much later.
pub const CONFIRM_AFTER: Duration = Duration::from_millis(50);
/// How long one look may take (connect plus answer).
const LOOK_LIMIT: Duration = Duration::from_millis(500);

/// What one look at a peer's address says of its process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Evidence {
    Alive,
    Gone,
    Unknown,
}

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

/// One look at a peer's /healthz: a fresh connection, so a refusal is seen.
pub async fn look(address: &str, incarnation: &str, limit: Duration) -> Evidence {
    let attempt = async {
        let mut s = match TcpStream::connect(address).await {
            Ok(s) => s,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                return Evidence::Gone;
            }
            Err(_) => return Evidence::Unknown,
        };
        let req = format!("GET /healthz HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n");
        if s.write_all(req.as_bytes()).await.is_err() {
            return Evidence::Unknown;
        }
        let mut head = Vec::with_capacity(512);
        let mut buf = [0u8; 512];
        while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 4096 {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => head.extend_from_slice(&buf[..n]),
            }
        }
        evidence_of_head(&String::from_utf8_lossy(&head), incarnation)
    };
    tokio::time::timeout(limit, attempt)
        .await
        .unwrap_or(Evidence::Unknown)
}

/// Reads the incarnation header of a /healthz answer.
fn evidence_of_head(head: &str, incarnation: &str) -> Evidence {
    if !head.starts_with("HTTP/1.") || !head.contains("\r\n\r\n") {
        return Evidence::Unknown;
    }
    let named = head.lines().skip(1).find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.trim()
            .eq_ignore_ascii_case(INCARNATION_HEADER)
            .then(|| v.trim().to_string())
    });
    match named {
        Some(v) if v == incarnation => Evidence::Alive,
        // Another process answers at that address: ours is gone.
        Some(v) if !v.is_empty() => Evidence::Gone,
        _ => Evidence::Unknown,
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
            },
        )
    }

    #[test]
    fn the_head_names_the_process() {
        let ok = "HTTP/1.1 200 OK\r\nwebchecker-incarnation: abc\r\ncontent-length: 3\r\n\r\n";
        assert_eq!(evidence_of_head(ok, "abc"), Evidence::Alive);
        assert_eq!(evidence_of_head(ok, "def"), Evidence::Gone);
        let other = "HTTP/1.1 503 Service Unavailable\r\nWebchecker-Incarnation: abc\r\n\r\n";
        assert_eq!(evidence_of_head(other, "abc"), Evidence::Alive);
        // An older version, a foreign server, a cut answer: no evidence.
        assert_eq!(
            evidence_of_head("HTTP/1.1 200 OK\r\n\r\n", "abc"),
            Evidence::Unknown
        );
        assert_eq!(
            evidence_of_head("HTTP/1.1 200 OK\r\nwebchecker-inc", "abc"),
            Evidence::Unknown
        );
        assert_eq!(evidence_of_head("", "abc"), Evidence::Unknown);
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

    #[tokio::test]
    async fn a_closed_port_is_gone_a_silent_one_is_unknown() {
        let closed = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().to_string()
        };
        let limit = Duration::from_millis(300);
        assert_eq!(look(&closed, "x", limit).await, Evidence::Gone);
        // Accepts (the kernel does, even for a stopped process) and never answers.
        let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = silent.local_addr().unwrap().to_string();
        assert_eq!(look(&addr, "x", limit).await, Evidence::Unknown);
        drop(silent);
    }

    #[tokio::test]
    async fn the_real_server_answers_with_its_incarnation() {
        let health = Arc::new(crate::observe::server::HealthFlags {
            incarnation: "inc-1".into(),
            ..Default::default()
        });
        let metrics = Arc::new(crate::observe::metrics::Metrics::new("r1", false));
        let (addr, _stopped) =
            crate::observe::server::spawn("127.0.0.1:0".parse().unwrap(), metrics, health).unwrap();
        let addr = addr.to_string();
        let limit = Duration::from_secs(2);
        assert_eq!(look(&addr, "inc-1", limit).await, Evidence::Alive);
        assert_eq!(look(&addr, "inc-0", limit).await, Evidence::Gone);
    }
}
