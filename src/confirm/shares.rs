//! How many asks a confirmer works on at once, per namespace and in all: a
//! namespace always gets its own share and borrows more only while under
//! half of the replica's limit is in use, so one team's failing checkers
//! cannot take the confirmations of others. An ask beyond its share waits
//! for one, briefly and in bounded numbers, rather than being refused at
//! once: a replica whose path is cut fails a whole namespace's checkers in
//! the same second, and a refusal would let each failure stand unconfirmed.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

/// Asks in work and waiting, per namespace.
struct Counts {
    /// What a namespace always gets, and the replica's limit.
    per_namespace: usize,
    limit: usize,
    by_namespace: HashMap<String, usize>,
    total: usize,
    /// Asks waiting for a share, by namespace.
    waiting: HashMap<String, usize>,
}

impl Counts {
    /// Whether one more ask of `namespace` may start: within its own share,
    /// or borrowed while fewer than half of all are in use.
    fn admits(&self, namespace: &str) -> bool {
        let n = self.by_namespace.get(namespace).copied().unwrap_or(0);
        let own = n < self.per_namespace && self.total < self.limit;
        let borrowed = self.total < self.limit / 2;
        own || borrowed
    }

    fn take(&mut self, namespace: &str) {
        self.total += 1;
        *self.by_namespace.entry(namespace.to_string()).or_default() += 1;
    }

    fn give_back(&mut self, namespace: &str) {
        self.total -= 1;
        decrement(&mut self.by_namespace, namespace);
    }

    /// Whether one more ask of `namespace` may wait: a namespace has at
    /// most twice its share waiting (more could not start within the wait
    /// anyway), the replica at most its limit.
    fn may_wait(&self, namespace: &str) -> bool {
        let n = self.waiting.get(namespace).copied().unwrap_or(0);
        let all: usize = self.waiting.values().sum();
        n < 2 * self.per_namespace && all < self.limit
    }
}

fn decrement(map: &mut HashMap<String, usize>, key: &str) {
    if let Some(n) = map.get_mut(key) {
        *n -= 1;
        if *n == 0 {
            map.remove(key);
        }
    }
}

/// The shares of one kind of ask (confirmations, or zones' probes).
pub struct Shares {
    counts: Mutex<Counts>,
    /// Woken whenever a share is given back.
    freed: Notify,
}

/// A share in work; given back when dropped.
pub struct Share<'a>(&'a Shares, String);

impl Drop for Share<'_> {
    fn drop(&mut self) {
        self.0.lock().give_back(&self.1);
        self.0.freed.notify_waiters();
    }
}

/// Counts an ask as waiting while it lives.
struct Waiting<'a>(&'a Shares, String);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        decrement(&mut self.0.lock().waiting, &self.1);
    }
}

impl Shares {
    pub fn new(per_namespace: usize, limit: usize) -> Self {
        Shares {
            counts: Mutex::new(Counts {
                per_namespace,
                limit,
                by_namespace: HashMap::new(),
                total: 0,
                waiting: HashMap::new(),
            }),
            freed: Notify::new(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Counts> {
        self.counts.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A share for an ask of `namespace` now, if one is free.
    pub fn try_take(&self, namespace: &str) -> Option<Share<'_>> {
        let mut c = self.lock();
        if !c.admits(namespace) {
            return None;
        }
        c.take(namespace);
        Some(Share(self, namespace.to_string()))
    }

    /// A share for an ask of `namespace`, waiting up to `wait` for one;
    /// none when the wait ends first or too many of the namespace wait.
    pub async fn take(&self, namespace: &str, wait: Duration) -> Option<Share<'_>> {
        let deadline = Instant::now() + wait;
        if let Some(share) = self.try_take(namespace) {
            return Some(share);
        }
        let _waiting = {
            let mut c = self.lock();
            if !c.may_wait(namespace) {
                return None;
            }
            *c.waiting.entry(namespace.to_string()).or_default() += 1;
            Waiting(self, namespace.to_string())
        };
        loop {
            // Registered before the check, so a share given back between
            // the check and the wait still wakes this ask.
            let freed = self.freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            if let Some(share) = self.try_take(namespace) {
                return Some(share);
            }
            if tokio::time::timeout_at(deadline, freed).await.is_err() {
                return None;
            }
        }
    }

    #[cfg(test)]
    fn in_work(&self) -> usize {
        self.lock().total
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PER: usize = 8;
    const ALL: usize = 64;

    #[test]
    fn one_namespace_borrows_half_and_every_other_keeps_its_own_share() {
        let s = Shares::new(PER, ALL);
        let mut held = Vec::new();
        while let Some(share) = s.try_take("busy") {
            held.push(share);
        }
        assert_eq!(
            s.in_work(),
            ALL / 2,
            "alone, a namespace borrows up to half"
        );
        for ns in ["a", "b", "c", "d"] {
            for _ in 0..PER {
                held.push(s.try_take(ns).expect("a namespace gets its own share"));
            }
            assert!(
                s.try_take(ns).is_none(),
                "{ns} borrows nothing while half are in use"
            );
        }
        assert_eq!(s.in_work(), ALL);
        assert!(s.try_take("e").is_none(), "the replica's total holds");
        assert!(s.try_take("busy").is_none());
        drop(held);
        assert_eq!(s.in_work(), 0, "every share given back");
    }

    #[tokio::test(start_paused = true)]
    async fn an_ask_beyond_its_share_waits_for_one_given_back() {
        let s = Shares::new(PER, ALL);
        let mut held: Vec<_> = std::iter::from_fn(|| s.try_take("busy")).collect();
        assert_eq!(held.len(), ALL / 2);
        let waiter = s.take("busy", Duration::from_secs(1));
        tokio::pin!(waiter);
        // Nothing given back: it waits.
        assert!(
            tokio::time::timeout(Duration::from_millis(300), waiter.as_mut())
                .await
                .is_err()
        );
        held.pop();
        let share = tokio::time::timeout(Duration::from_millis(100), waiter)
            .await
            .expect("woken by the share given back")
            .expect("and given it");
        assert_eq!(s.in_work(), ALL / 2);
        drop(share);
    }

    #[tokio::test(start_paused = true)]
    async fn the_wait_is_bounded_in_time_and_in_numbers() {
        let s = Shares::new(PER, ALL);
        let _held: Vec<_> = std::iter::from_fn(|| s.try_take("busy")).collect();
        let started = Instant::now();
        assert!(s.take("busy", Duration::from_secs(1)).await.is_none());
        assert_eq!(
            started.elapsed(),
            Duration::from_secs(1),
            "refused at the end of the wait"
        );

        // Twice its share waiting: the next is refused at once, while
        // another namespace still starts within its own share.
        let mut waiters: Vec<_> = (0..2 * PER)
            .map(|_| Box::pin(s.take("busy", Duration::from_secs(5))))
            .collect();
        for w in &mut waiters {
            assert!(futures::poll!(w.as_mut()).is_pending());
        }
        let started = Instant::now();
        assert!(s.take("busy", Duration::from_secs(5)).await.is_none());
        assert_eq!(started.elapsed(), Duration::ZERO, "refused without waiting");
        assert!(s.take("quiet", Duration::from_secs(5)).await.is_some());
        drop(waiters);
        assert!(s.lock().waiting.is_empty(), "a dropped ask waits no more");
    }
}
