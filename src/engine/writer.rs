//! The status writer: the only task that writes checker objects on behalf of an
//! owner (status, and the drain acknowledgement).
//!
//! Pending writes live in a map keyed by checker (latest wins), so the queue is
//! bounded by the shard size and a slow or absent API server never blocks the
//! probe engine. Every write carries the resourceVersion this replica last saw
//! (fencing); a conflict is re-checked against the object's current owner and
//! epoch, never retried blindly. Nothing is written while the membership Lease
//! is not known to be ours (except the final flush of a graceful shutdown,
//! after the Lease was released: those writes are fenced by resourceVersion).
//!
//! Retries: drain acknowledgements go before status writes (a checker being
//! handed over is unprobed until its ack lands). A write that failed without
//! a verdict (timeout, 429, 5xx) is retried with a per-checker backoff; a
//! refusal (other 4xx) is dropped and counted; a checker forgotten meanwhile
//! (it moved away) is never retried.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use kube::api::Patch;
use kube::core::DynamicObject;
use kube::discovery::ApiResource;
use kube::{Api, Client};
use serde_json::json;
use tokio::sync::Notify;
use tracing::{debug, error, info, warn};

use crate::api::WebChecker;
use crate::assignment::{self, Assignment};
use crate::coordination::membership::Membership;
use crate::error::api_code;
use crate::kubeio::client::{CALL_DEADLINE, managers, patch_params};
use crate::observe::metrics::family::{ASSIGN_BUCKETS, Family, counter, counter_vec, histogram};
pub use webchecker_core::checker::Op;

#[derive(Clone, Debug)]
struct Pending {
    namespace: String,
    name: String,
    op: Op,
    attempts: u32,
    /// Not before this instant (backoff after a failure without a verdict).
    not_before: Option<Instant>,
    /// When that failure was: a write answered since ends the backoff.
    failed_at: Option<Instant>,
    /// When the checker's first unwritten op was submitted: a newer op for
    /// the same checker keeps its place in the queue.
    since: Instant,
}

impl Pending {
    /// A write succeeded after this one failed.
    fn backoff_over(&self, answered_at: Option<Instant>) -> bool {
        matches!((self.failed_at, answered_at), (Some(f), Some(a)) if a > f)
    }
}

/// Writes a replica has in flight at once. Drain acknowledgements go first,
/// and a rebalance moves only as fast as the old owners acknowledge
/// (docs/benchmarks.md, part 7: 3 -> 10 replicas). Status writes are
/// otherwise few: a settled checker writes none.
pub const STATUS_WRITERS: usize = 8;

/// Backoff after the `attempts`-th failure without a verdict.
fn backoff(attempts: u32) -> Duration {
    let ms = 200u64.saturating_mul(1 << attempts.min(8));
    Duration::from_millis(ms.min(30_000))
}

/// What to do after a write ended with this API status code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum WriteAnswer {
    Done,
    /// Fenced: the object changed; re-check ownership before any retry.
    Conflict,
    Gone,
    /// No verdict (timeout, 429, 5xx): try again later.
    Retry,
    /// The API server refused the write itself: retrying cannot help.
    Refused,
}

fn write_answer(code: Option<u16>) -> WriteAnswer {
    match code {
        Some(200..=299) => WriteAnswer::Done,
        Some(409) => WriteAnswer::Conflict,
        Some(404) => WriteAnswer::Gone,
        Some(429) | Some(500..) | None => WriteAnswer::Retry,
        Some(_) => WriteAnswer::Refused,
    }
}

/// What a write is fenced with: the resourceVersion, and the UID of the
/// object it belongs to (one deleted and recreated under the same name is
/// another checker; a conflict's re-read must not hand it the old status).
#[derive(Clone, Debug)]
struct Version {
    rv: String,
    uid: String,
}

#[derive(Default)]
struct Inner {
    pending: HashMap<String, Pending>,
    /// Last resourceVersion seen per checker (from the watch or our writes).
    versions: HashMap<String, Version>,
    /// Keys whose pending op is a drain ack: they jump every queue.
    acks: HashSet<String>,
    /// Writes taken out of `pending` and not finished yet (graceful
    /// shutdown waits for them too).
    inflight: usize,
    /// When a write last succeeded: the API server answers again, so the
    /// backoffs of writes that failed before are over (else a checker's
    /// backoff, up to 30 s, outlived the trouble by as much).
    answered_at: Option<Instant>,
}

const STATUS_WRITES: Family = ("webchecker_status_writes_total", "Status writes by result");
const STATUS_WRITE_DELAY: Family = (
    "webchecker_status_write_delay_seconds",
    "Status writes that landed: from the probe result that changed the status to the API server's answer (how late a change shows in kubectl)",
);
const DRAINS: Family = (
    "webchecker_drains_total",
    "Drain handshakes this replica completed as the old owner",
);

pub struct WriterMetrics {
    status_writes: prometheus::IntCounterVec,
    status_write_delay: prometheus::Histogram,
    drains: prometheus::IntCounter,
}

impl WriterMetrics {
    pub fn register(r: &prometheus::Registry) -> Self {
        WriterMetrics {
            status_writes: counter_vec(
                r,
                STATUS_WRITES,
                &["result"],
                &["ok", "conflict", "error", "fenced", "refused"],
            ),
            status_write_delay: histogram(r, STATUS_WRITE_DELAY, ASSIGN_BUCKETS),
            drains: counter(r, DRAINS),
        }
    }
}

pub struct StatusWriter {
    inner: Mutex<Inner>,
    wake: Notify,
    /// Woken when the pending map drains (graceful shutdown waits on it).
    idle: Notify,
    membership: Arc<Membership>,
    metrics: WriterMetrics,
    concurrency: usize,
    /// Graceful shutdown released the Lease: flush anyway (fenced by rv).
    final_flush: AtomicBool,
}

impl StatusWriter {
    pub fn new(
        membership: Arc<Membership>,
        metrics: WriterMetrics,
        concurrency: usize,
    ) -> Arc<Self> {
        Arc::new(StatusWriter {
            inner: Mutex::new(Inner::default()),
            wake: Notify::new(),
            idle: Notify::new(),
            membership,
            metrics,
            concurrency,
            final_flush: AtomicBool::new(false),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn observe_version(&self, key: &str, rv: &str, uid: &str) {
        self.lock().versions.insert(
            key.to_string(),
            Version {
                rv: rv.to_string(),
                uid: uid.to_string(),
            },
        );
    }

    pub fn submit(&self, key: &str, namespace: &str, name: &str, op: Op) {
        let mut g = self.lock();
        // A queued drain acknowledgement outranks a status write: the checker is
        // being handed over, and losing the ack would leave it with no owner.
        if matches!(op, Op::Status(_))
            && g.pending
                .get(key)
                .is_some_and(|p| matches!(p.op, Op::AckDrain { .. }))
        {
            return;
        }
        if matches!(op, Op::AckDrain { .. }) {
            g.acks.insert(key.to_string());
        }
        let since = g.pending.get(key).map_or_else(Instant::now, |p| p.since);
        g.pending.insert(
            key.to_string(),
            Pending {
                namespace: namespace.to_string(),
                name: name.to_string(),
                op,
                attempts: 0,
                not_before: None,
                failed_at: None,
                since,
            },
        );
        drop(g);
        self.wake.notify_one();
    }

    /// The drain was withdrawn before its ack was written: drop the ack.
    pub fn withdraw_ack(&self, key: &str) {
        let mut g = self.lock();
        if g.acks.remove(key) {
            g.pending.remove(key);
        }
    }

    /// Drops everything queued for a checker this replica no longer owns.
    pub fn forget(&self, key: &str) {
        let mut g = self.lock();
        g.pending.remove(key);
        g.acks.remove(key);
        g.versions.remove(key);
        crate::shrink_if_sparse(&mut g.versions);
        crate::shrink_if_sparse(&mut g.pending);
    }

    pub fn forget_all(&self) {
        let mut g = self.lock();
        g.pending = HashMap::new();
        g.versions = HashMap::new();
        g.acks = HashSet::new();
    }

    pub fn pending_len(&self) -> usize {
        self.lock().pending.len()
    }

    /// Whether nothing is pending nor being written.
    fn drained(&self) -> bool {
        let g = self.lock();
        g.pending.is_empty() && g.inflight == 0
    }

    /// Waits until nothing is pending nor being written (or the timeout
    /// passes); whether it got there. A batch already taken is still being
    /// written when the map is empty: the last transitions before a shutdown
    /// are in it.
    pub async fn flush(&self, timeout: Duration) -> bool {
        tokio::time::timeout(timeout, async {
            while !self.drained() {
                self.wake.notify_one();
                tokio::select! {
                    _ = self.idle.notified() => {}
                    _ = tokio::time::sleep(Duration::from_millis(50)) => {}
                }
            }
        })
        .await
        .is_ok()
    }

    fn api(client: &Client, namespace: &str) -> Api<DynamicObject> {
        Api::namespaced_with(
            client.clone(),
            namespace,
            &ApiResource::erase::<WebChecker>(&()),
        )
    }

    async fn write_once(
        &self,
        client: &Client,
        key: &str,
        p: &Pending,
        rv: Option<String>,
    ) -> Result<String, kube::Error> {
        let api = Self::api(client, &p.namespace);
        let r = match &p.op {
            Op::Status(status) => {
                let mut body = json!(status);
                // A merge patch keeps what it does not name: without spec.slo,
                // status.slo goes.
                // The same for status.diagnosis once Ready is no longer False.
                if let Some(fields) = body.as_object_mut() {
                    if status.slo.is_none() {
                        fields.insert("slo".into(), serde_json::Value::Null);
                    }
                    if status.diagnosis.is_none() {
                        fields.insert("diagnosis".into(), serde_json::Value::Null);
                    }
                }
                let patch = json!({
                    "metadata": { "resourceVersion": rv },
                    "status": body,
                });
                api.patch_status(
                    &p.name,
                    &patch_params(managers::STATUS),
                    &Patch::Merge(&patch),
                )
                .await?
            }
            Op::AckDrain {
                last_probe_unix_ms,
                handover,
            } => {
                let patch = assignment::acknowledge_drain(
                    rv.as_deref(),
                    *last_probe_unix_ms,
                    handover.as_ref(),
                    &self.membership.identity,
                );
                api.patch(
                    &p.name,
                    &patch_params(managers::STATUS),
                    &Patch::Merge(&patch),
                )
                .await?
            }
        };
        let _ = key;
        Ok(r.metadata.resource_version.unwrap_or_default())
    }

    /// Is the object still ours to write? (owner and epoch match, and for status
    /// writes no drain requested.)
    fn still_ours(&self, obj: &DynamicObject, op: &Op) -> bool {
        let a = Assignment::of(&obj.metadata);
        let mine = a.held_by(
            &self.membership.identity,
            self.membership.epoch().as_deref(),
        );
        match op {
            Op::Status(_) => mine && !a.draining(),
            Op::AckDrain { .. } => mine && a.draining(),
        }
    }

    /// One write with a deadline; a timeout is a failure without a verdict.
    async fn attempt(
        &self,
        client: &Client,
        key: &str,
        p: &Pending,
        rv: Option<String>,
    ) -> Result<String, Option<u16>> {
        match tokio::time::timeout(CALL_DEADLINE, self.write_once(client, key, p, rv)).await {
            Ok(Ok(rv)) => Ok(rv),
            Ok(Err(e)) => {
                if write_answer(api_code(&e)) != WriteAnswer::Conflict {
                    warn!(checker = %key, error = %e, "status write failed");
                }
                Err(api_code(&e))
            }
            Err(_) => {
                warn!(checker = %key, "status write got no answer in time");
                Err(None)
            }
        }
    }

    fn count(&self, result: &str) {
        self.metrics
            .status_writes
            .with_label_values(&[result])
            .inc();
    }

    async fn write(&self, client: &Client, key: String, mut p: Pending) {
        // Fencing needs the resourceVersion we last saw; a checker forgotten
        // meanwhile (moved away) has none and is not ours to write.
        let Some(Version { rv, uid }) = self.lock().versions.get(&key).cloned() else {
            return;
        };
        let mut result = self.attempt(client, &key, &p, Some(rv)).await;
        if let Err(code) = result
            && write_answer(code) == WriteAnswer::Conflict
        {
            self.count("conflict");
            // Fencing: re-read and retry only if the checker is still ours.
            let api = Self::api(client, &p.namespace);
            result = match tokio::time::timeout(CALL_DEADLINE, api.get_opt(&p.name)).await {
                Ok(Ok(Some(obj)))
                    if obj.metadata.uid.as_deref() == Some(uid.as_str())
                        && self.still_ours(&obj, &p.op) =>
                {
                    // The sharder may have re-targeted the drain meanwhile:
                    // hand over to the target of the version we write on.
                    if let Op::AckDrain { handover, .. } = &mut p.op {
                        *handover = Assignment::of(&obj.metadata).handover();
                    }
                    self.attempt(client, &key, &p, obj.metadata.resource_version.clone())
                        .await
                }
                Ok(Ok(_)) => Err(Some(409)),
                Ok(Err(e)) => Err(api_code(&e)),
                Err(_) => Err(None),
            };
        }
        match result.map_err(write_answer) {
            Ok(rv) => {
                self.count("ok");
                let mut g = self.lock();
                g.answered_at = Some(Instant::now());
                if matches!(p.op, Op::AckDrain { .. }) {
                    self.metrics.drains.inc();
                    debug!(checker = %key, "drain acknowledged");
                    // Handed over: the checker is no longer ours. Keeping the
                    // version our own ack produced would let a later status
                    // write pass the resourceVersion fence.
                    g.versions.remove(&key);
                    g.pending.remove(&key);
                    g.acks.remove(&key);
                } else if let Some(v) = g.versions.get_mut(&key)
                    && v.uid == uid
                {
                    self.metrics
                        .status_write_delay
                        .observe(p.since.elapsed().as_secs_f64());
                    // Only if still ours: `forget` may have run while we wrote.
                    v.rv = rv;
                }
            }
            Err(WriteAnswer::Done) => unreachable!("an error is never a success"),
            Err(WriteAnswer::Gone) => debug!(checker = %key, "checker deleted before its write"),
            Err(WriteAnswer::Conflict) => {
                self.count("fenced");
                info!(checker = %key, "write fenced: the checker is no longer ours");
            }
            Err(WriteAnswer::Refused) => {
                self.count("refused");
                error!(checker = %key, "the API server refused a status write; dropped (see the error above)");
            }
            Err(WriteAnswer::Retry) => {
                self.count("error");
                p.attempts += 1;
                let now = Instant::now();
                p.not_before = Some(now + backoff(p.attempts));
                p.failed_at = Some(now);
                let mut g = self.lock();
                // Re-queue only if still ours and nothing newer was queued.
                if g.versions.contains_key(&key) {
                    if matches!(p.op, Op::AckDrain { .. }) {
                        g.acks.insert(key.clone());
                    }
                    g.pending.entry(key).or_insert(p);
                }
            }
        }
    }

    /// Lets the final flush of a graceful shutdown write after the Lease was
    /// released (each write is still fenced by resourceVersion).
    pub fn allow_final_flush(&self) {
        self.final_flush.store(true, Ordering::SeqCst);
        self.wake.notify_one();
    }

    /// Takes up to `max` writes that are due: drain acks first, then the
    /// namespaces in turn, each oldest first. Another namespace's flood of
    /// status changes (checkers flipping on every probe, each rewritten
    /// before it was written) delays a namespace's writes by one turn, never
    /// behind the whole flood; within a namespace nothing waits forever.
    fn take_batch(&self, max: usize, now: Instant) -> (Vec<(String, Pending)>, Option<Instant>) {
        let mut g = self.lock();
        let mut acks: Vec<&String> = Vec::new();
        let mut spaces: HashMap<&str, Vec<(Instant, &String)>> = HashMap::new();
        let mut next: Option<Instant> = None;
        for (k, p) in &g.pending {
            match p.not_before {
                Some(t) if t > now && !p.backoff_over(g.answered_at) => {
                    next = Some(next.map_or(t, |n| n.min(t)))
                }
                _ if matches!(p.op, Op::AckDrain { .. }) => acks.push(k),
                _ => spaces
                    .entry(p.namespace.as_str())
                    .or_default()
                    .push((p.since, k)),
            }
        }
        let mut queues: Vec<Vec<(Instant, &String)>> = spaces.into_values().collect();
        for q in &mut queues {
            // Oldest last: popped first.
            q.sort_unstable_by(|a, b| b.cmp(a));
        }
        // The namespace waiting longest goes first.
        queues.sort_unstable_by_key(|q| q.last().map(|(t, _)| *t));
        let mut keys: Vec<String> = acks.into_iter().take(max).cloned().collect();
        while keys.len() < max && !queues.is_empty() {
            queues.retain_mut(|q| match q.pop() {
                Some((_, k)) if keys.len() < max => {
                    keys.push(k.clone());
                    !q.is_empty()
                }
                _ => false,
            });
        }
        let batch: Vec<(String, Pending)> = keys
            .into_iter()
            .filter_map(|k| {
                g.acks.remove(&k);
                g.pending.remove(&k).map(|p| (k, p))
            })
            .collect();
        g.inflight += batch.len();
        (batch, next)
    }

    /// A drain ack that is due, if any (checked before every write of a batch,
    /// so an ack never waits behind a batch of status writes).
    fn take_ack(&self, now: Instant) -> Option<(String, Pending)> {
        let mut g = self.lock();
        let key = g
            .acks
            .iter()
            .find(|k| {
                g.pending.get(*k).is_some_and(|p| {
                    p.not_before.is_none_or(|t| t <= now) || p.backoff_over(g.answered_at)
                })
            })?
            .clone();
        g.acks.remove(&key);
        let taken = g.pending.remove(&key).map(|p| (key, p));
        g.inflight += taken.is_some() as usize;
        taken
    }

    /// Writes a taken op if this replica may still write (its Lease is
    /// held, or the final flush of a graceful shutdown), else puts it back:
    /// the gate is asked before each write, not once per batch, so a replica
    /// that lost its Lease stops writing at once instead of finishing a batch
    /// of up to 256 writes fenced only by resourceVersion.
    async fn write_if_allowed(&self, client: &Client, key: String, p: Pending) {
        if self.membership.can_write() || self.final_flush.load(Ordering::SeqCst) {
            self.write(client, key, p).await;
        } else {
            let mut g = self.lock();
            if g.versions.contains_key(&key) {
                if matches!(p.op, Op::AckDrain { .. }) {
                    g.acks.insert(key.clone());
                }
                g.pending.entry(key).or_insert(p);
            }
        }
        self.lock().inflight -= 1;
    }

    pub async fn run(self: Arc<Self>, client: Client) {
        loop {
            if self.pending_len() == 0 {
                self.idle.notify_waiters();
                self.wake.notified().await;
                continue;
            }
            if !self.membership.can_write() && !self.final_flush.load(Ordering::SeqCst) {
                // Outage or lost Lease: keep the latest desired status, write later.
                tokio::select! {
                    _ = self.membership.changed.notified() => {}
                    _ = tokio::time::sleep(Duration::from_millis(200)) => {}
                }
                continue;
            }
            let (batch, next) = self.take_batch(256, Instant::now());
            if batch.is_empty() {
                let wait = next.map_or(Duration::from_millis(200), |t| {
                    t.saturating_duration_since(Instant::now())
                });
                tokio::select! {
                    _ = self.wake.notified() => {}
                    _ = tokio::time::sleep(wait) => {}
                }
                continue;
            }
            let this = self.clone();
            let queue: VecDeque<(String, Pending)> = batch.into();
            futures::stream::unfold(queue, move |mut queue| {
                let next = this.take_ack(Instant::now()).or_else(|| queue.pop_front());
                async move { next.map(|item| (item, queue)) }
            })
            .for_each_concurrent(self.concurrency, |(k, p)| {
                let this = self.clone();
                let client = client.clone();
                async move { this.write_if_allowed(&client, k, p).await }
            })
            .await;
        }
    }
}

#[cfg(test)]
mod tests;
