//! Where the response checks run (`headerChecks`, `bodyMatch`, `jsonChecks`):
//! a small pool of OS threads of their own, fed by one queue per namespace
//! taken in turn.
//!
//! A regular expression search is CPU work that no deadline interrupts: a
//! pattern such as `(?s:.){0,1000}zzz` against 64 KiB takes hundreds of
//! milliseconds. On the async runtime it would hold a thread that dispatches
//! everybody's probes (and, before coordination had a runtime of its own,
//! Lease renewals). Here it holds one matching thread at most; the probe
//! waits for its turn and its result under its own deadline, and gives up
//! with reason `CheckTimeout` when the deadline comes first. Namespaces take
//! turns, so a namespace whose checks are slow waits behind its own checks,
//! not others behind it: another namespace's check waits at most for the
//! searches already running.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Condvar, Mutex};

use tokio::sync::oneshot;

type Job = Box<dyn FnOnce() + Send>;

#[derive(Default)]
struct Queues {
    by_namespace: HashMap<String, VecDeque<Job>>,
    /// Namespaces with jobs, in the order they take turns.
    turns: VecDeque<String>,
    closed: bool,
}

impl Queues {
    fn push(&mut self, namespace: &str, job: Job) {
        let q = self.by_namespace.entry(namespace.to_string()).or_default();
        if q.is_empty() {
            self.turns.push_back(namespace.to_string());
        }
        q.push_back(job);
    }

    /// The next job: the first of the namespace whose turn it is.
    fn pop(&mut self) -> Option<Job> {
        let ns = self.turns.pop_front()?;
        let q = self.by_namespace.get_mut(&ns)?;
        let job = q.pop_front();
        if q.is_empty() {
            self.by_namespace.remove(&ns);
        } else {
            self.turns.push_back(ns);
        }
        job
    }
}

struct Shared {
    queues: Mutex<Queues>,
    ready: Condvar,
}

/// The matching pool. Dropping the last handle stops its threads once their
/// current job is done.
pub struct Matcher {
    shared: Arc<Shared>,
}

impl Matcher {
    /// A pool of `threads` (at least one).
    pub fn new(threads: usize) -> Self {
        let shared = Arc::new(Shared {
            queues: Mutex::new(Queues::default()),
            ready: Condvar::new(),
        });
        for i in 0..threads.max(1) {
            let shared = shared.clone();
            std::thread::Builder::new()
                .name(format!("matcher-{i}"))
                .spawn(move || work(&shared))
                .expect("a matching thread");
        }
        Matcher { shared }
    }

    /// Runs `f` on the pool in `namespace`'s turn; `None` if the pool is
    /// stopped. A caller that stops waiting (its probe's deadline passed)
    /// drops the future, and `f` is skipped if it has not started.
    pub async fn run<T: Send + 'static>(
        &self,
        namespace: &str,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> Option<T> {
        let (tx, rx) = oneshot::channel();
        let job: Job = Box::new(move || {
            if !tx.is_closed() {
                let _ = tx.send(f());
            }
        });
        {
            let mut q = self.shared.queues.lock().unwrap_or_else(|e| e.into_inner());
            if q.closed {
                return None;
            }
            q.push(namespace, job);
        }
        self.shared.ready.notify_one();
        rx.await.ok()
    }
}

impl Drop for Matcher {
    fn drop(&mut self) {
        self.shared
            .queues
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .closed = true;
        self.shared.ready.notify_all();
    }
}

fn work(shared: &Shared) {
    loop {
        let job = {
            let mut q = shared.queues.lock().unwrap_or_else(|e| e.into_inner());
            loop {
                if q.closed {
                    return;
                }
                if let Some(job) = q.pop() {
                    break job;
                }
                q = shared.ready.wait(q).unwrap_or_else(|e| e.into_inner());
            }
        };
        // A panic in a check must not take the thread (and every later
        // check) with it: the probe sees its answer dropped.
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::{Duration, Instant};

    #[test]
    fn namespaces_take_turns() {
        let mut q = Queues::default();
        let order = Arc::new(Mutex::new(Vec::new()));
        for (ns, n) in [("a", 1), ("a", 2), ("a", 3), ("b", 1), ("c", 1), ("b", 2)] {
            let order = order.clone();
            q.push(
                ns,
                Box::new(move || order.lock().unwrap().push(format!("{ns}{n}"))),
            );
        }
        while let Some(job) = q.pop() {
            job();
        }
        assert_eq!(*order.lock().unwrap(), ["a1", "b1", "c1", "a2", "b2", "a3"]);
        assert!(q.by_namespace.is_empty() && q.turns.is_empty());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_slow_namespace_waits_behind_itself_not_others_behind_it() {
        let m = Arc::new(Matcher::new(1));
        let release = Arc::new(AtomicBool::new(false));
        // Namespace a: a search that runs until released, then nine more queued.
        let slow = |release: Arc<AtomicBool>| {
            move || {
                while !release.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
        };
        let mut waiting = Vec::new();
        for _ in 0..10 {
            let (m, r) = (m.clone(), release.clone());
            waiting.push(tokio::spawn(async move { m.run("a", slow(r)).await }));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        // Namespace b's check runs as soon as the search in progress ends,
        // before a's nine others.
        let m2 = m.clone();
        let b =
            tokio::spawn(async move { m2.run("b", Instant::now).await.expect("b's check ran") });
        tokio::time::sleep(Duration::from_millis(50)).await;
        let released = Instant::now();
        release.store(true, Ordering::Relaxed);
        let b_ran = b.await.unwrap();
        assert!(b_ran >= released);
        for w in waiting {
            assert!(w.await.unwrap().is_some());
        }
    }

    #[tokio::test]
    async fn a_check_whose_probe_gave_up_is_skipped() {
        let m = Arc::new(Matcher::new(1));
        let release = Arc::new(AtomicBool::new(false));
        let r = release.clone();
        let m1 = m.clone();
        let busy = tokio::spawn(async move {
            m1.run("a", move || {
                while !r.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(1));
                }
            })
            .await
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        let ran = Arc::new(AtomicBool::new(false));
        let flag = ran.clone();
        // The probe's deadline passes while its check waits.
        let gave_up = tokio::time::timeout(
            Duration::from_millis(20),
            m.run("b", move || flag.store(true, Ordering::Relaxed)),
        )
        .await;
        assert!(gave_up.is_err());
        release.store(true, Ordering::Relaxed);
        busy.await.unwrap();
        // A later check of b runs; the abandoned one never did.
        m.run("b", || ()).await.unwrap();
        assert!(!ran.load(Ordering::Relaxed));
    }
}
