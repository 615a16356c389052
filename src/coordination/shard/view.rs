//! The watched view of the member Leases: one watch of every member Lease,
//! in bursts, feeding the pure view (`webchecker_core::members`, where the
//! judge rule lives) that the sharder, the elector and the peers read.

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::stream::FusedStream;
use futures::{FutureExt, StreamExt};
use k8s_openapi::api::coordination::v1::Lease;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client};
use tracing::{info, warn};

use crate::coordination::LeaseNames;

use super::metrics::ShardMetrics;
use crate::api::MEMBER_LABEL;
use crate::error::Error;
use crate::observe::metrics::WatchMetrics;

pub use webchecker_core::members::{MemberPlace, Members, ObservedLease, PeerAddress};

/// Watch events taken as one change at most.
const BURST_MAX: usize = 256;

/// The next event and every event ready behind it (at most [`BURST_MAX`]);
/// `None` when the stream has ended. Members that leave together delete
/// their Leases in a burst: seen one at a time, a decision between two
/// deletions hands a checker to a member that leaves next, which moves it
/// a second time.
async fn next_burst<S: FusedStream + Unpin>(stream: &mut S) -> Option<Vec<S::Item>> {
    let mut burst = vec![stream.next().await?];
    while burst.len() < BURST_MAX {
        match stream.next().now_or_never() {
            Some(Some(ev)) => burst.push(ev),
            _ => break,
        }
    }
    Some(burst)
}

/// The shared, watched view.
pub struct MemberView {
    pub lease_duration: Duration,
    state: Mutex<Members>,
    pub changed: tokio::sync::Notify,
}

impl MemberView {
    pub fn new(lease_duration: Duration) -> Arc<Self> {
        Arc::new(MemberView {
            lease_duration,
            state: Mutex::new(Members::new(Instant::now())),
            changed: tokio::sync::Notify::new(),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Members> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn members(&self) -> Option<BTreeMap<String, String>> {
        self.lock().members()
    }

    pub fn suspects(&self, me: &str, judge_since: Option<Instant>) -> Vec<(String, ObservedLease)> {
        self.lock()
            .suspects(me, self.lease_duration, judge_since, Instant::now())
    }

    pub fn observed(&self) -> Option<Vec<(String, ObservedLease)>> {
        self.lock().observed()
    }

    pub fn places(&self) -> Vec<(String, MemberPlace)> {
        self.lock().places()
    }

    /// Members that are leaving (asked to stop, handing their checkers over).
    pub fn leaving(&self) -> HashSet<String> {
        self.lock().leaving()
    }

    /// UIDs of member Leases known to be gone (see [`Members::retired`]).
    pub fn retired(&self) -> Arc<HashSet<String>> {
        self.lock().retired()
    }

    /// A read of the API server found the Lease `uid` gone.
    pub fn retire(&self, uid: &str) {
        self.lock().retire(uid);
        self.changed.notify_waiters();
    }

    /// The sharder proved a member gone: drop it now, before the watch says so.
    pub fn forget(&self, uid: &str) {
        self.lock().delete_uid(uid, Instant::now());
        self.changed.notify_waiters();
    }

    /// Watches the membership Leases.
    pub async fn run(
        self: Arc<Self>,
        client: Client,
        namespace: String,
        names: LeaseNames,
        (metrics, watches): (Arc<ShardMetrics>, Arc<WatchMetrics>),
    ) -> Result<(), Error> {
        let api: Api<Lease> = Api::namespaced(client, &namespace);
        let cfg = watcher::Config::default()
            .labels(&format!("{MEMBER_LABEL}=true"))
            .timeout(crate::kubeio::client::WATCH_TIMEOUT_SECS);
        let mut stream = watcher::watcher(api, cfg)
            .backoff(crate::kubeio::client::WatchBackoff::default())
            .boxed()
            .fuse();
        let mut listing: Vec<Lease> = Vec::new();
        while let Some(mut burst) = next_burst(&mut stream).await {
            // Another install's members (another --lease-prefix) are not ours.
            burst.retain(|ev| match ev {
                Ok(Event::InitApply(l) | Event::Apply(l) | Event::Delete(l)) => names.is_member(l),
                _ => true,
            });
            self.apply_burst(burst, &mut listing, (&metrics, &watches));
            self.changed.notify_waiters();
        }
        Err(Error::TaskDied("membership lease watch"))
    }

    /// Applies a burst of watch events under one lock: the sharder sees it
    /// whole or not at all.
    fn apply_burst(
        &self,
        burst: Vec<Result<Event<Lease>, watcher::Error>>,
        listing: &mut Vec<Lease>,
        (metrics, watches): (&ShardMetrics, &WatchMetrics),
    ) {
        let now = Instant::now();
        let mut m = self.lock();
        for ev in burst {
            match ev {
                Ok(Event::Init) => listing.clear(),
                Ok(Event::InitApply(l)) => listing.push(l),
                Ok(Event::InitDone) => {
                    m.listed(&std::mem::take(listing), now);
                    info!("membership Leases listed");
                }
                Ok(Event::Apply(l)) => m.apply(&l, now),
                Ok(Event::Delete(l)) => {
                    if let Some(uid) = l.metadata.uid.as_deref() {
                        m.delete_uid(uid, now);
                    }
                }
                Err(e) => {
                    watches.failed("leases", &e);
                    warn!(error = %e, "membership Lease watch failed; nobody is judged until it delivers again");
                    m.watch_failed(now);
                }
            }
        }
        if let Some(members) = m.members() {
            metrics.ring_members.set(members.len() as i64);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn events_ready_together_are_one_burst() {
        let (tx, rx) = futures::channel::mpsc::unbounded();
        let mut rx = rx.fuse();
        for i in 0..3 {
            tx.unbounded_send(i).unwrap();
        }
        assert_eq!(next_burst(&mut rx).await, Some(vec![0, 1, 2]));
        tx.unbounded_send(3).unwrap();
        assert_eq!(next_burst(&mut rx).await, Some(vec![3]));
        for i in 0..BURST_MAX + 1 {
            tx.unbounded_send(i).unwrap();
        }
        assert_eq!(next_burst(&mut rx).await.map(|b| b.len()), Some(BURST_MAX));
        assert_eq!(next_burst(&mut rx).await, Some(vec![BURST_MAX]));
        drop(tx);
        assert_eq!(next_burst(&mut rx).await, None);
        assert_eq!(next_burst(&mut rx).await, None);
    }
}
