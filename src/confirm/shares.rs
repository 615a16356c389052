//! How many asks a confirmer works on at once, per namespace and in all, as
//! fairly as the engine's worker pool (webchecker_core::fairness):
//!
//! - **Share.** A namespace below `ceil(limit / namespaces with asks in
//!   work or waiting)` may start an ask whenever the limit has room.
//! - **Borrowing is short.** Beyond its share, a namespace borrows free
//!   room only for probes whose timeout is at most [`BORROW_HOLD`] (a
//!   borrowed share comes back within a second), and only while no
//!   namespace below its share waits.
//! - **Long probes keep room for others.** A probe longer than that starts
//!   only while its namespace holds fewer than `ceil(limit / (namespaces
//!   that asked in the last ten minutes + 1))`: as the engine keeps a
//!   share for every namespace with checkers, room stays for a namespace
//!   that has not asked yet, so targets that hang for ten minutes never
//!   hold every confirmation of a replica.
//!
//! An ask beyond its share waits for one, in bounded numbers, as long as
//! its owner can wait.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use webchecker_core::fairness::BORROW_HOLD;

#[derive(Default)]
struct Space {
    in_work: usize,
    waiting: usize,
}

/// How long a namespace that asked counts as one that may ask again.
const KNOWN_FOR: Duration = Duration::from_secs(600);
/// Namespaces remembered as having asked, at most.
const KNOWN: usize = 4096;

/// Asks in work and waiting, per namespace.
struct Counts {
    limit: usize,
    spaces: HashMap<String, Space>,
    total: usize,
    /// When each namespace last asked.
    known: HashMap<String, Instant>,
}

impl Counts {
    /// Notes that `ns` asks now.
    fn asked(&mut self, ns: &str) {
        let now = Instant::now();
        if self.known.len() >= KNOWN {
            self.known
                .retain(|_, at| now.duration_since(*at) < KNOWN_FOR);
        }
        if self.known.len() < KNOWN || self.known.contains_key(ns) {
            self.known.insert(ns.to_string(), now);
        }
    }

    /// What a namespace's long probes may hold: a share with room kept for
    /// one namespace more than those that asked lately.
    fn guaranteed(&self) -> usize {
        let now = Instant::now();
        let known = self
            .known
            .values()
            .filter(|at| now.duration_since(**at) < KNOWN_FOR)
            .count();
        self.limit.div_ceil(known + 1)
    }

    /// A namespace's share with `ns` counted among the active ones.
    fn share(&self, ns: &str) -> usize {
        let active = self.spaces.len() + usize::from(!self.spaces.contains_key(ns));
        self.limit.div_ceil(active.max(1))
    }

    fn in_work(&self, ns: &str) -> usize {
        self.spaces.get(ns).map_or(0, |s| s.in_work)
    }

    /// Whether one more ask of `ns`, whose probe may take `hold`, may start.
    fn admits(&self, ns: &str, hold: Duration) -> bool {
        if self.total >= self.limit {
            return false;
        }
        let long = hold > BORROW_HOLD;
        if long && self.in_work(ns) >= self.guaranteed() {
            return false;
        }
        if self.in_work(ns) < self.share(ns) {
            return true;
        }
        let share = self.share(ns);
        let starved = self
            .spaces
            .iter()
            .any(|(other, s)| other != ns && s.waiting > 0 && s.in_work < share);
        !long && !starved
    }

    /// Whether one more ask of `ns` may wait: at most twice its share of
    /// one namespace (more could not start in time anyway), the replica's
    /// limit in all.
    fn may_wait(&self, ns: &str) -> bool {
        let mine = self.spaces.get(ns).map_or(0, |s| s.waiting);
        let all: usize = self.spaces.values().map(|s| s.waiting).sum();
        mine < 2 * self.share(ns) && all < self.limit
    }

    fn update(&mut self, ns: &str, f: impl FnOnce(&mut Space)) {
        let space = self.spaces.entry(ns.to_string()).or_default();
        f(space);
        if space.in_work == 0 && space.waiting == 0 {
            self.spaces.remove(ns);
        }
    }
}

/// The shares of one kind of ask (confirmations, or zones' probes).
pub struct Shares {
    counts: Mutex<Counts>,
    /// Woken whenever a share is given back or a waiter leaves.
    freed: Notify,
}

/// A share in work; given back when dropped.
pub struct Share<'a>(&'a Shares, String);

impl Drop for Share<'_> {
    fn drop(&mut self) {
        {
            let mut c = self.0.lock();
            c.total -= 1;
            c.update(&self.1, |s| s.in_work -= 1);
        }
        self.0.freed.notify_waiters();
    }
}

/// Counts an ask as waiting while it lives.
struct Waiting<'a>(&'a Shares, String);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.lock().update(&self.1, |s| s.waiting -= 1);
        self.0.freed.notify_waiters();
    }
}

impl Shares {
    pub fn new(limit: usize) -> Self {
        Shares {
            counts: Mutex::new(Counts {
                limit: limit.max(1),
                spaces: HashMap::new(),
                total: 0,
                known: HashMap::new(),
            }),
            freed: Notify::new(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Counts> {
        self.counts.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A share for an ask of `namespace` whose probe may take `hold`, now,
    /// if one is free.
    pub fn try_take(&self, namespace: &str, hold: Duration) -> Option<Share<'_>> {
        let mut c = self.lock();
        c.asked(namespace);
        if !c.admits(namespace, hold) {
            return None;
        }
        c.total += 1;
        c.update(namespace, |s| s.in_work += 1);
        Some(Share(self, namespace.to_string()))
    }

    /// A share for an ask of `namespace`, waiting up to `wait` for one;
    /// none when the wait ends first or too many of the namespace wait.
    pub async fn take(&self, namespace: &str, hold: Duration, wait: Duration) -> Option<Share<'_>> {
        let deadline = Instant::now() + wait;
        if let Some(share) = self.try_take(namespace, hold) {
            return Some(share);
        }
        let waiting = {
            let mut c = self.lock();
            if !c.may_wait(namespace) {
                return None;
            }
            c.update(namespace, |s| s.waiting += 1);
            Waiting(self, namespace.to_string())
        };
        loop {
            // Registered before the check, so a share given back between
            // the check and the wait still wakes this ask.
            let freed = self.freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            {
                let mut c = self.lock();
                // Counted as waiting only while it waits, so it does not
                // stand in its own way as a starved namespace.
                c.update(namespace, |s| s.waiting -= 1);
                let admitted = c.admits(namespace, hold);
                if admitted {
                    c.total += 1;
                }
                c.update(namespace, |s| {
                    if admitted {
                        s.in_work += 1;
                    }
                    s.waiting += 1;
                });
                if admitted {
                    drop(c);
                    drop(waiting);
                    return Some(Share(self, namespace.to_string()));
                }
            }
            if tokio::time::timeout_at(deadline, freed).await.is_err() {
                return None;
            }
        }
    }

    #[cfg(test)]
    fn in_work(&self, ns: &str) -> usize {
        self.lock().in_work(ns)
    }
}

#[cfg(test)]
mod tests;
