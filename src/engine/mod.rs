//! The probe engine of one replica: checker table, timer wheel, bounded worker
//! pool, and the status reducer's effects.
//!
//! One task owns all per-checker state; it never blocks on a full queue:
//! commands arrive on a bounded channel, results come back on a channel sized
//! to the pool (so a worker never waits long), status writes go to a map keyed by
//! checker, and events wait in a bounded queue with a share per namespace,
//! dropped (and counted) rather than queued unboundedly.
//! At most one probe per checker is in flight: the next one is scheduled only
//! when the previous one finished.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use futures::StreamExt;
use kube::runtime::events::{Event as KubeEvent, EventType};
use kube::{Resource, ResourceExt};
use rand::Rng;
use tokio::sync::{Semaphore, mpsc, oneshot};
use tokio::task::AbortHandle;
use tokio_util::time::DelayQueue;
use tokio_util::time::delay_queue::Key as DelayKey;
use tracing::{debug, info, warn};

use crate::api::{WebChecker, WebCheckerSpec};
use crate::coordination::membership::Membership;
use crate::intake::secrets::Resolved;
use crate::kubeio::writer::{LAST_PROBE_ANNOTATION, Op, StatusWriter};
use crate::observe::metrics::Metrics;
use crate::probe::{Compiled, Outcome, PatternError, ProbePlan, Prober};
use fairness::FairQueue;
use status::{CheckerStatus, Context, NotProbed, Transition, Truth};

mod arrival;
mod events;
pub(crate) mod fairness;
mod intake;
pub mod status;

use crate::observe::events::EventSender;

/// A checker as the watch delivers it, or why it could not be read.
#[derive(Debug)]
pub enum Incoming {
    /// With the values of the Secret and ConfigMap keys it references
    /// (resolved off the feed by crate::intake::resolver) and its compiled patterns
    /// (crate::intake::compiler; `None` only before the feeder attached them).
    Valid(Box<WebChecker>, Resolved, Option<Compiled>),
    /// Does not deserialise (for example written under an older schema).
    Malformed {
        namespace: String,
        name: String,
        resource_version: String,
        generation: Option<i64>,
        error: String,
    },
}

#[derive(Debug)]
pub enum Command {
    /// A checker of our shard, added or changed. `initial` during a (re)list;
    /// `seen` when the watch delivered it (a new checker's first probe is
    /// measured from there).
    Upsert {
        checker: Incoming,
        initial: bool,
        seen: Instant,
    },
    /// The sharder asks us to hand this checker over.
    Drain {
        key: String,
        namespace: String,
        name: String,
        resource_version: String,
    },
    /// Deleted, or no longer ours.
    Remove { key: String },
    /// The Secret/ConfigMap values a checker references changed (rotation).
    Refresh { key: String, resolved: Resolved },
    /// A checker's patterns changed without a new spec: its namespace's
    /// budget made room for them, or no longer does (crate::intake::budget).
    Patterns { key: String, compiled: Compiled },
    /// A re-list finished: keys not in the set are no longer ours.
    Resync { present: HashSet<String> },
    /// Our Lease is gone: drop every checker at once.
    Fence { done: oneshot::Sender<()> },
    /// Graceful shutdown: stop dispatching, wait for in-flight probes.
    Shutdown { done: oneshot::Sender<()> },
}

impl Command {
    /// The checker that a feeder's per-checker cache forgets on this command:
    /// it is no longer handed over as a valid checker (removed, draining or
    /// malformed).
    pub(crate) fn forgotten_key(&self) -> Option<String> {
        match self {
            Command::Remove { key } | Command::Drain { key, .. } => Some(key.clone()),
            Command::Upsert {
                checker:
                    Incoming::Malformed {
                        namespace, name, ..
                    },
                ..
            } => Some(crate::api::object_key(namespace, name)),
            _ => None,
        }
    }
}

struct Done {
    key: String,
    seq: u64,
    /// `None` when the probe was held back at the last moment (gate closed).
    outcome: Option<Outcome>,
    finished_wall: SystemTime,
}

struct Entry {
    seq: u64,
    namespace: String,
    name: String,
    generation: Option<i64>,
    spec: Option<WebCheckerSpec>,
    resolved: Resolved,
    patterns: Option<Compiled>,
    plan: Option<Arc<ProbePlan>>,
    object_ref: k8s_openapi::api::core::v1::ObjectReference,
    delay: Option<DelayKey>,
    due: Instant,
    inflight: Option<AbortHandle>,
    draining: bool,
    status: CheckerStatus,
    last_probe_wall: Option<SystemTime>,
    /// A new arrival not yet probed: when the watch delivered it.
    first_probe_since: Option<Instant>,
    /// URL and allowlisted labels (`webchecker_checker_info`).
    info: Arc<crate::observe::metrics::CheckerInfo>,
}

impl Entry {
    /// How long a probe of this checker may hold a worker.
    fn hold(&self) -> Duration {
        self.plan.as_ref().map_or(Duration::ZERO, |p| p.timeout)
    }
}

pub struct EngineSettings {
    pub identity: String,
    pub workers: usize,
    pub heartbeat: Duration,
}

pub struct Engine {
    settings: EngineSettings,
    prober: Arc<Prober>,
    metrics: Arc<Metrics>,
    membership: Arc<Membership>,
    writer: Arc<StatusWriter>,
    events: EventSender,
    entries: HashMap<String, Entry>,
    queue: DelayQueue<String>,
    /// Due probes, handed to the pool fairly between namespaces.
    ready: FairQueue,
    pool: Arc<Semaphore>,
    next_seq: u64,
    stopping: Option<oneshot::Sender<()>>,
    /// Whether listed checkers fill an empty table (their first probes spread).
    arrivals: arrival::Arrivals,
}

fn now_wall() -> String {
    chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ").to_string()
}

fn unix_ms(t: SystemTime) -> i64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

impl Engine {
    pub fn new(
        settings: EngineSettings,
        prober: Arc<Prober>,
        metrics: Arc<Metrics>,
        membership: Arc<Membership>,
        writer: Arc<StatusWriter>,
        events: EventSender,
    ) -> Self {
        metrics.pool_size.set(settings.workers as i64);
        let workers = settings.workers;
        Engine {
            pool: Arc::new(Semaphore::new(settings.workers)),
            settings,
            prober,
            metrics,
            membership,
            writer,
            events,
            entries: HashMap::new(),
            queue: DelayQueue::new(),
            ready: FairQueue::new(workers),
            next_seq: 0,
            stopping: None,
            arrivals: Default::default(),
        }
    }
}

/// Why a checker has no plan: the Ready reason and message.
type Refusal = (NotProbed, String);

fn invalid(message: String) -> Refusal {
    (NotProbed::InvalidSpec, message)
}

/// The plan of a spec, with the patterns the feed compiled (compiled here
/// only if it did not, which the feed never lets happen).
fn plan_of(
    prober: &Prober,
    spec: &WebCheckerSpec,
    resolved: &Resolved,
    patterns: Option<&Compiled>,
) -> Result<ProbePlan, Refusal> {
    if let Some(m) = resolved.quota_exceeded() {
        return Err((NotProbed::QuotaExceeded, m.to_string()));
    }
    let resolve = |v: &crate::probe::ValueRef| resolved.get(v);
    let roots = prober.roots();
    let patterns = match patterns.map(|c| c.as_ref()) {
        Some(Ok(p)) => Ok(p.clone()),
        Some(Err(PatternError::Invalid(m))) => Err(m.clone()),
        Some(Err(PatternError::OverBudget(m))) => {
            return Err((NotProbed::QuotaExceeded, m.clone()));
        }
        None => crate::probe::compile_patterns(spec),
    };
    crate::probe::plan_trusting(spec, &resolve, &patterns, roots).map_err(invalid)
}

fn make_ctx<'a>(
    settings: &'a EngineSettings,
    generation: Option<i64>,
    plan: Option<&ProbePlan>,
) -> Context<'a> {
    Context {
        generation,
        owner: &settings.identity,
        now_wall: now_wall(),
        now: Instant::now(),
        heartbeat: settings.heartbeat,
        success_threshold: plan.map(|p| p.success_threshold).unwrap_or(1),
        failure_threshold: plan.map(|p| p.failure_threshold).unwrap_or(1),
        certificate_warning_days: plan.and_then(|p| p.tls.expiry_warning_days),
    }
}

impl Engine {
    pub async fn run(mut self, mut commands: mpsc::Receiver<Command>) {
        let (done_tx, mut done_rx) = mpsc::channel::<Done>(self.settings.workers.max(1));
        let mut blocked_since: Option<Instant> = None;
        loop {
            let gate_open = self.dispatch(&done_tx);
            if gate_open {
                blocked_since = None;
            } else if blocked_since.is_none() {
                blocked_since = Some(Instant::now());
            }
            if let Some(done) = self.stopping.take() {
                if self.entries.values().all(|e| e.inflight.is_none()) {
                    let _ = done.send(());
                    return;
                }
                self.stopping = Some(done);
            }
            tokio::select! {
                biased;
                Some(d) = done_rx.recv() => self.finished(d),
                cmd = commands.recv() => match cmd {
                    Some(c) => self.command(c).await,
                    None => return,
                },
                Some(exp) = self.queue.next(), if !self.queue.is_empty() => {
                    let key = exp.into_inner();
                    if let Some(e) = self.entries.get_mut(&key) {
                        e.delay = None;
                        self.ready.push(&e.namespace, key, e.due, e.hold());
                    }
                }
                _ = tokio::time::sleep(Duration::from_millis(50)), if !gate_open && self.ready.has_ready() => {}
            }
        }
    }

    /// Starts as many ready probes as the pool, the namespaces' fair shares
    /// (crate::engine::fairness) and the membership gate allow. Returns false when the
    /// gate held probes back.
    fn dispatch(&mut self, done_tx: &mpsc::Sender<Done>) -> bool {
        if self.stopping.is_some() {
            self.ready.clear_ready();
            return true;
        }
        while self.ready.has_ready() {
            if !self.membership.dispatch_allowed() {
                return false;
            }
            let Ok(permit) = self.pool.clone().try_acquire_owned() else {
                return true;
            };
            // Free workers, counting the one just taken.
            let free = self.pool.available_permits() + 1;
            let Some((ns, key, due)) = self.ready.pop(free) else {
                // The waiting namespaces wait for a worker to come back.
                return true;
            };
            let Some(entry) = self.entries.get_mut(&key) else {
                continue;
            };
            if entry.draining || entry.inflight.is_some() || entry.plan.is_none() {
                continue;
            }
            let plan = entry.plan.clone().expect("checked above");
            let namespace = entry.namespace.clone();
            let now = Instant::now();
            let lag = now.saturating_duration_since(due);
            self.metrics.schedule_lag.observe(lag.as_secs_f64());
            if let Some(seen) = entry.first_probe_since.take() {
                self.metrics
                    .first_probe_delay
                    .observe(now.saturating_duration_since(seen).as_secs_f64());
            }
            let inflight = InflightGuard::new(self.metrics.clone());
            let prober = self.prober.clone();
            let tx = done_tx.clone();
            let seq = entry.seq;
            let membership = self.membership.clone();
            let task = tokio::spawn(async move {
                // The process may be paused at any point after dispatch: check
                // again before connecting, and let the prober check right before
                // it writes each request.
                let gate = || membership.dispatch_allowed();
                let outcome = if gate() {
                    prober.probe(&plan, &namespace, &gate).await
                } else {
                    None
                };
                drop(permit);
                drop(inflight);
                let _ = tx
                    .send(Done {
                        key,
                        seq,
                        outcome,
                        finished_wall: SystemTime::now(),
                    })
                    .await;
            });
            entry.inflight = Some(task.abort_handle());
            self.ready.started(&ns);
        }
        true
    }

    fn schedule(&mut self, key: &str, at: Instant) {
        let Some(e) = self.entries.get_mut(key) else {
            return;
        };
        if let Some(k) = e.delay.take() {
            self.queue.remove(&k);
        }
        e.due = at;
        let now = Instant::now();
        e.delay = Some(
            self.queue
                .insert(key.to_string(), at.saturating_duration_since(now)),
        );
    }

    fn finished(&mut self, d: Done) {
        let Some(e) = self.entries.get_mut(&d.key) else {
            return;
        };
        if e.seq != d.seq {
            return;
        }
        e.inflight = None;
        self.ready.finished(&e.namespace);
        if d.outcome.is_some() {
            e.last_probe_wall = Some(d.finished_wall);
        }
        if e.draining {
            // The in-flight probe (done or held back at the last moment) was all
            // the drain waited for: hand over now. A held-back probe must not go
            // back to the ready queue, which skips draining checkers: the
            // handshake would never complete and the checker would stay unowned.
            let last = e.last_probe_wall.map(unix_ms);
            self.writer.submit(
                &d.key,
                &e.namespace,
                &e.name,
                Op::AckDrain {
                    last_probe_unix_ms: last,
                },
            );
            return;
        }
        let Some(outcome) = d.outcome else {
            // Held back: try again once the gate opens, same due time.
            self.ready.push(&e.namespace, d.key, e.due, e.hold());
            return;
        };
        let Some(plan) = e.plan.clone() else { return };
        let ctx = make_ctx(&self.settings, e.generation, Some(&plan));
        let effects = e.status.observe(&outcome, &ctx);
        self.metrics.record_probe(
            &e.namespace,
            &e.name,
            &e.info,
            &outcome,
            e.status.is_ready(),
        );
        debug!(checker = %d.key, reason = outcome.reason.as_str(), ms = outcome.duration.as_millis() as u64, "probe done");
        self.apply_effects(&d.key, effects);
        let Some(e) = self.entries.get_mut(&d.key) else {
            return;
        };
        // Keep the cadence; skip whole intervals the checker could not make.
        let now = Instant::now();
        let mut next = e.due + plan.interval;
        let mut missed = 0;
        while next < now {
            next += plan.interval;
            missed += 1;
        }
        if missed > 0 {
            self.metrics.missed_intervals.inc_by(missed);
        }
        let key = d.key.clone();
        self.schedule(&key, next);
    }

    async fn command(&mut self, c: Command) {
        match c {
            Command::Upsert {
                checker,
                initial,
                seen,
            } => self.upsert(checker, initial, seen),
            Command::Drain {
                key,
                namespace,
                name,
                resource_version,
            } => {
                self.writer.observe_version(&key, &resource_version);
                let (inflight, last) = match self.entries.get_mut(&key) {
                    Some(e) => {
                        e.draining = true;
                        if let Some(k) = e.delay.take() {
                            self.queue.remove(&k);
                        }
                        (e.inflight.is_some(), e.last_probe_wall)
                    }
                    None => (false, None),
                };
                self.metrics.forget_checker(&namespace, &name);
                if !inflight {
                    self.writer.submit(
                        &key,
                        &namespace,
                        &name,
                        Op::AckDrain {
                            last_probe_unix_ms: last.map(unix_ms),
                        },
                    );
                }
                self.update_owned();
            }
            Command::Remove { key } => {
                self.remove(&key);
                self.shrink_if_sparse();
                self.update_owned();
            }
            Command::Refresh { key, resolved } => self.refresh(&key, resolved),
            Command::Patterns { key, compiled } => self.repattern(&key, compiled),
            Command::Resync { present } => {
                self.arrivals.listed();
                let gone: Vec<String> = self
                    .entries
                    .keys()
                    .filter(|k| !present.contains(*k))
                    .cloned()
                    .collect();
                for k in gone {
                    self.remove(&k);
                }
                self.shrink_if_sparse();
                self.update_owned();
            }
            Command::Fence { done } => {
                let keys: Vec<String> = self.entries.keys().cloned().collect();
                for k in keys {
                    self.remove(&k);
                }
                self.writer.forget_all();
                self.ready.clear_ready();
                self.arrivals.emptied();
                self.shrink_if_sparse();
                self.update_owned();
                let _ = done.send(());
            }
            Command::Shutdown { done } => {
                self.ready.clear_ready();
                let keys: Vec<String> = self.entries.keys().cloned().collect();
                for k in &keys {
                    if let Some(e) = self.entries.get_mut(k)
                        && let Some(d) = e.delay.take()
                    {
                        self.queue.remove(&d);
                    }
                }
                self.stopping = Some(done);
            }
        }
    }

    fn remove(&mut self, key: &str) {
        if let Some(mut e) = self.entries.remove(key) {
            if let Some(h) = e.inflight.take() {
                h.abort();
                self.ready.finished(&e.namespace);
            }
            self.ready.remove_checker(&e.namespace);
            if let Some(k) = e.delay.take() {
                self.queue.remove(&k);
            }
            self.metrics.forget_checker(&e.namespace, &e.name);
        }
        self.writer.forget(key);
    }

    /// Gives memory back after the shard shrank a lot (the entries are large).
    fn shrink_if_sparse(&mut self) {
        if crate::shrink_if_sparse(&mut self.entries) {
            self.queue.compact();
        }
    }

    fn update_owned(&self) {
        self.metrics
            .owned
            .set(self.entries.values().filter(|e| !e.draining).count() as i64);
    }

    fn apply_effects(&self, key: &str, fx: crate::engine::status::Effects) {
        let Some(e) = self.entries.get(key) else {
            return;
        };
        if let Some(status) = fx.write {
            self.writer
                .submit(key, &e.namespace, &e.name, Op::Status(Box::new(status)));
        }
        if let Some(t) = fx.transition {
            self.emit(key, &t);
        }
        if let Some(message) = fx.certificate_expiring {
            self.emit_certificate(key, &message);
        }
    }
}

/// Counts a probe in flight for as long as its task lives (also when aborted).
struct InflightGuard(Arc<Metrics>);

impl InflightGuard {
    fn new(metrics: Arc<Metrics>) -> Self {
        metrics.inflight.inc();
        InflightGuard(metrics)
    }
}

impl Drop for InflightGuard {
    fn drop(&mut self) {
        self.0.inflight.dec();
    }
}
