//! The probe engine of one replica: a thin async shell around the checker
//! table (`webchecker_core::table`), which decides everything; the shell
//! carries the table's effects out. It owns the timers (a DelayQueue), the bounded worker pool (a
//! Semaphore), the probe tasks and their abort handles, the prober, and the
//! handles of the status writer, the Event queue and the metrics.
//!
//! One task runs it, and it never blocks on a full queue: commands arrive on
//! a bounded channel, results come back on a channel sized to the pool (so a
//! worker never waits long), status writes go to a map keyed by checker, and
//! Events wait in a bounded queue with a share per namespace, dropped (and
//! counted) rather than queued unboundedly.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use futures::StreamExt;
use kube::runtime::events::{Event as KubeEvent, EventType};
use rand::Rng;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};
use tokio::task::AbortHandle;
use tokio_util::time::DelayQueue;
use tokio_util::time::delay_queue::Key as DelayKey;

use crate::ask::Verdict;
use crate::ask::asker::Asker;
use crate::ask::zones::ZoneAnswer;
use crate::coordination::membership::Membership;
use crate::engine::writer::StatusWriter;
use crate::observe::events::EventSender;
use crate::observe::metrics::Metrics;
use crate::probe::{Outcome, ProbePlan, Prober};
use table::{Clock, Effect, Input, Metric, Notice, Table, ToWriter};

pub use webchecker_core::status;
use webchecker_core::table;
pub(crate) mod metrics;
pub(crate) mod writer;

use metrics::{EngineMetrics, InflightGuard};

pub use crate::checker::{Change, Checker, Command, Definition};

pub struct EngineSettings {
    pub identity: String,
    pub workers: usize,
    pub heartbeat: Duration,
    /// Asks other replicas to confirm failures and to probe from their
    /// zones (crate::confirm); `None`: the owner's probes alone decide.
    /// Where checkers that fall are diagnosed; none: they are not.
    pub diagnoser: Option<crate::diagnosis::Diagnoser>,
    pub asker: Option<Arc<Asker>>,
    /// Failures are confirmed before they turn a checker Ready=False.
    pub confirm_failures: bool,
}

/// Other replicas' word, as an ask's task reports it.
struct Heard {
    key: String,
    seq: u64,
    said: Said,
}

enum Said {
    /// On a failure (crate::confirm).
    Verdict(Verdict),
    /// Each other zone's probe (spec.locations).
    Zones(Vec<ZoneAnswer>),
}

/// A probe that ended, as its task reports it.
struct Done {
    key: String,
    seq: u64,
    /// `None` when the probe was held back at the last moment (gate closed).
    outcome: Option<Outcome>,
    finished: SystemTime,
}

/// A probe the table asked for.
struct Start {
    key: String,
    seq: u64,
    namespace: String,
    plan: Arc<ProbePlan>,
    /// Another replica's probe: who waits for its outcome.
    foreign: Option<ForeignReply>,
}

type ForeignReply = tokio::sync::oneshot::Sender<Option<Outcome>>;

/// The keys of other replicas' probes, apart from every checker's.
const FOREIGN: &str = "\u{0}probe/";

pub struct Engine {
    table: Table,
    workers: usize,
    prober: Arc<Prober>,
    /// The per-checker series.
    series: Arc<Metrics>,
    metrics: Arc<EngineMetrics>,
    membership: Arc<Membership>,
    writer: Arc<StatusWriter>,
    events: EventSender,
    timers: DelayQueue<String>,
    /// Each armed timer's key in `timers`.
    armed: HashMap<String, DelayKey>,
    /// Each probe in flight: its checker's seq and its task.
    probes: HashMap<String, (u64, AbortHandle)>,
    pool: Arc<Semaphore>,
    asker: Option<Arc<Asker>>,
    /// Where checkers that fall are sent to be diagnosed, if they are.
    diagnoser: Option<crate::diagnosis::Diagnoser>,
    /// Where asks report back (a checker has at most one ask out; its task
    /// waits for room rather than drop the answer).
    heard: (mpsc::Sender<Heard>, Option<mpsc::Receiver<Heard>>),
    /// Other replicas' probes waiting for a worker: their plan, namespace
    /// and who waits.
    foreign: HashMap<String, (Arc<ProbePlan>, String, ForeignReply)>,
    foreign_seq: u64,
    /// Graceful shutdown: answered once the table has stopped.
    stopping: Option<tokio::sync::oneshot::Sender<()>>,
    stopped: bool,
}

impl Engine {
    pub fn new(
        settings: EngineSettings,
        prober: Arc<Prober>,
        (series, metrics): (Arc<Metrics>, Arc<EngineMetrics>),
        membership: Arc<Membership>,
        writer: Arc<StatusWriter>,
        events: EventSender,
    ) -> Self {
        metrics.pool_size.set(settings.workers as i64);
        let place = settings
            .asker
            .as_ref()
            .map(|a| a.place())
            .unwrap_or_default();
        let table = Table::new(table::Settings {
            identity: settings.identity,
            workers: settings.workers,
            heartbeat: settings.heartbeat,
            roots: prober.roots().clone(),
            place,
            confirm: settings.asker.is_some() && settings.confirm_failures,
            zones: settings.asker.is_some(),
            diagnosis: settings.diagnoser.is_some(),
        });
        let (heard_tx, heard_rx) = mpsc::channel(256);
        Engine {
            table,
            workers: settings.workers,
            pool: Arc::new(Semaphore::new(settings.workers)),
            asker: settings.asker,
            diagnoser: settings.diagnoser,
            heard: (heard_tx, Some(heard_rx)),
            prober,
            series,
            metrics,
            membership,
            writer,
            events,
            timers: DelayQueue::new(),
            armed: HashMap::new(),
            probes: HashMap::new(),
            foreign: HashMap::new(),
            foreign_seq: 0,
            stopping: None,
            stopped: false,
        }
    }

    pub async fn run(mut self, mut commands: mpsc::Receiver<Command>) {
        let (done_tx, mut done_rx) = mpsc::channel::<Done>(self.workers.max(1));
        let mut heard_rx = self.heard.1.take().expect("run once");
        loop {
            let gate_open = self.dispatch(&done_tx);
            if self.stopped {
                if let Some(done) = self.stopping.take() {
                    let _ = done.send(());
                }
                return;
            }
            tokio::select! {
                biased;
                Some(d) = done_rx.recv() => {
                    if d.key.starts_with(FOREIGN) {
                        self.step(Input::ForeignDone { key: d.key });
                        continue;
                    }
                    if self.probes.get(&d.key).is_some_and(|(seq, _)| *seq == d.seq) {
                        self.probes.remove(&d.key);
                    }
                    self.step(Input::Done {
                        key: d.key,
                        seq: d.seq,
                        outcome: d.outcome,
                        finished: d.finished,
                    });
                }
                Some(h) = heard_rx.recv() => {
                    let (key, seq) = (h.key, h.seq);
                    self.step(match h.said {
                        Said::Verdict(verdict) => Input::Confirmed { key, seq, verdict },
                        Said::Zones(answers) => Input::Zones { key, seq, answers },
                    });
                }
                cmd = commands.recv() => match cmd {
                    Some(c) => self.command(c),
                    None => return,
                },
                Some(exp) = self.timers.next(), if !self.timers.is_empty() => {
                    let key = exp.into_inner();
                    self.armed.remove(&key);
                    self.step(Input::Due { key });
                }
                _ = tokio::time::sleep(Duration::from_millis(50)), if !gate_open && self.table.has_ready() => {}
            }
        }
    }

    fn command(&mut self, c: Command) {
        if !c.current(self.membership.epoch().as_deref()) {
            if let Command::Change(Change::Upsert { checker, .. }) = &c {
                tracing::debug!(checker = %checker.key, "dropped: found under an earlier epoch of this replica");
            }
            return;
        }
        let input = match c {
            Command::Change(change) => Input::Change(change),
            Command::Calendar(calendar) => Input::Calendar(calendar),
            Command::Dependencies(d) => Input::Dependencies(d),
            Command::Diagnosis {
                key,
                seq,
                diagnosis,
            } => Input::Diagnosis {
                key,
                seq,
                diagnosis,
            },
            Command::Fence { done } => {
                self.step(Input::Fence);
                let _ = done.send(());
                return;
            }
            Command::Shutdown { done } => {
                self.stopping = Some(done);
                Input::Shutdown
            }
            Command::Probe {
                namespace,
                plan,
                done,
            } => {
                self.foreign_seq += 1;
                let key = format!("{FOREIGN}{}", self.foreign_seq);
                let hold = plan.timeout;
                self.foreign
                    .insert(key.clone(), (plan, namespace.clone(), done));
                Input::Foreign {
                    key,
                    namespace,
                    hold,
                }
            }
        };
        self.step(input);
    }

    /// Starts as many ready probes as the pool, the namespaces' fair shares
    /// (webchecker_core::fairness) and the membership gate allow. Returns false when the
    /// gate held probes back.
    fn dispatch(&mut self, done_tx: &mpsc::Sender<Done>) -> bool {
        while self.table.wants_worker() {
            if !self.membership.dispatch_allowed() {
                return false;
            }
            let Ok(permit) = self.pool.clone().try_acquire_owned() else {
                return true;
            };
            // Free workers, counting the one just taken.
            let free = self.pool.available_permits() + 1;
            let Some(start) = self.step(Input::Dispatch { free }) else {
                // The waiting namespaces wait for a worker to come back.
                return true;
            };
            self.spawn(start, permit, done_tx.clone());
        }
        true
    }

    fn spawn(&mut self, start: Start, permit: OwnedSemaphorePermit, tx: mpsc::Sender<Done>) {
        let Start {
            key,
            seq,
            namespace,
            plan,
            foreign,
        } = start;
        let task_is_foreign = foreign.is_some();
        let inflight = InflightGuard::new(self.metrics.clone());
        let prober = self.prober.clone();
        let membership = self.membership.clone();
        let task_key = key.clone();
        let task = tokio::spawn(async move {
            // The process may be paused at any point after dispatch: check
            // again before connecting, and let the prober check right before
            // it writes each request.
            let gate = || membership.dispatch_allowed();
            let probe = async {
                if gate() {
                    prober.probe(&plan, &namespace, &gate).await
                } else {
                    None
                }
            };
            let outcome = match foreign {
                // Nobody waits any more: the probe is given up.
                Some(mut reply) => {
                    tokio::select! {
                        outcome = probe => { let _ = reply.send(outcome); }
                        _ = reply.closed() => {}
                    }
                    None
                }
                None => probe.await,
            };
            drop(permit);
            drop(inflight);
            let _ = tx
                .send(Done {
                    key: task_key,
                    seq,
                    outcome,
                    finished: SystemTime::now(),
                })
                .await;
        });
        if !task_is_foreign {
            self.probes.insert(key, (seq, task.abort_handle()));
        }
    }

    /// Steps the table and carries its effects out; the probe it asks for,
    /// if any (only a dispatch starts one: it needs the worker taken for it).
    fn step(&mut self, input: Input) -> Option<Start> {
        let clock = Clock {
            now: Instant::now(),
            wall: SystemTime::now(),
            draw: rand::rng().random(),
        };
        let mut start = None;
        for effect in self.table.step(input, clock) {
            match effect {
                Effect::Probe {
                    key,
                    seq,
                    namespace,
                    plan,
                } => {
                    start = Some(Start {
                        key,
                        seq,
                        namespace,
                        plan,
                        foreign: None,
                    })
                }
                Effect::ProbeForeign { key } => {
                    if let Some((plan, namespace, reply)) = self.foreign.remove(&key) {
                        start = Some(Start {
                            key,
                            seq: 0,
                            namespace,
                            plan,
                            foreign: Some(reply),
                        });
                    }
                }
                Effect::DropForeign { key } => {
                    self.foreign.remove(&key);
                }
                Effect::Schedule { key, at } => {
                    if let Some(k) = self.armed.remove(&key) {
                        self.timers.remove(&k);
                    }
                    let k = self
                        .timers
                        .insert(key.clone(), at.saturating_duration_since(Instant::now()));
                    self.armed.insert(key, k);
                }
                Effect::Cancel { key } => {
                    if let Some(k) = self.armed.remove(&key) {
                        self.timers.remove(&k);
                    }
                }
                Effect::Abort { key } => {
                    if let Some((_, h)) = self.probes.remove(&key) {
                        h.abort();
                    }
                }
                Effect::Confirm {
                    key,
                    seq,
                    ask,
                    limit,
                } => self.confirm(key, seq, ask, limit),
                Effect::AskZones {
                    key,
                    seq,
                    ask,
                    others,
                    limit,
                } => self.ask_zones(key, seq, ask, others, limit),
                Effect::Diagnose {
                    key,
                    seq,
                    namespace,
                    subject,
                } => {
                    if let Some(d) = &self.diagnoser {
                        d.diagnose(webchecker_core::diagnosis::Queued {
                            key,
                            seq,
                            namespace,
                            subject,
                        });
                    }
                }
                Effect::Writer(w) => self.write(w),
                Effect::Event(n) => self.send_event(n),
                Effect::Metric(m) => self.metric(m),
                Effect::Compact => {
                    self.timers.compact();
                    crate::shrink_if_sparse(&mut self.armed);
                    crate::shrink_if_sparse(&mut self.probes);
                }
                Effect::Stopped => self.stopped = true,
            }
        }
        start
    }

    /// Asks another replica about a failure, off the engine's task.
    fn confirm(&self, key: String, seq: u64, ask: crate::ask::Ask, limit: Duration) {
        let tx = self.heard.0.clone();
        let asker = self.asker.clone();
        tokio::spawn(async move {
            let verdict = match asker {
                Some(a) => a.ask(ask, limit).await,
                None => Verdict::Alone,
            };
            let said = Said::Verdict(verdict);
            let _ = tx.send(Heard { key, seq, said }).await;
        });
    }

    /// Asks the other zones to probe, off the engine's task.
    fn ask_zones(
        &self,
        key: String,
        seq: u64,
        ask: crate::ask::Ask,
        others: usize,
        limit: Duration,
    ) {
        let tx = self.heard.0.clone();
        let asker = self.asker.clone();
        tokio::spawn(async move {
            let answers = match asker {
                Some(a) => a.ask_zones(ask, others, limit).await,
                None => Vec::new(),
            };
            let said = Said::Zones(answers);
            let _ = tx.send(Heard { key, seq, said }).await;
        });
    }

    fn write(&self, w: ToWriter) {
        match w {
            ToWriter::Observe {
                key,
                resource_version,
                uid,
            } => self.writer.observe_version(&key, &resource_version, &uid),
            ToWriter::Submit {
                key,
                namespace,
                name,
                op,
            } => self.writer.submit(&key, &namespace, &name, op),
            ToWriter::Withdraw { key } => self.writer.withdraw_ack(&key),
            ToWriter::Forget { key } => self.writer.forget(&key),
            ToWriter::ForgetAll => self.writer.forget_all(),
        }
    }

    fn metric(&self, m: Metric) {
        let (series, metrics) = (&self.series, &self.metrics);
        match m {
            Metric::Probe {
                namespace,
                name,
                info,
                outcome,
                standing,
            } => series.record_probe(&namespace, &name, &info, &outcome, standing),
            Metric::Up {
                namespace,
                name,
                info,
                standing,
            } => series.set_up(&namespace, &name, &info, standing),
            Metric::Info {
                namespace,
                name,
                info,
            } => series.refresh_info(&namespace, &name, &info),
            Metric::Verdict {
                namespace,
                name,
                info,
                verdict,
                standing,
            } => {
                metrics
                    .confirmations
                    .with_label_values(&[verdict.result()])
                    .inc();
                if matches!(verdict, Verdict::Refuted { .. }) {
                    let zone = self.asker.as_ref().map(|a| a.me.zone.clone());
                    metrics
                        .unconfirmed_failures
                        .with_label_values(&[&zone.unwrap_or_default()])
                        .inc();
                }
                series.set_up(&namespace, &name, &info, standing);
            }
            Metric::Zones {
                namespace,
                name,
                asked,
                results,
            } => series.record_zones(&namespace, &name, asked, &results),
            Metric::Slo {
                namespace,
                name,
                target,
                counted,
            } => series.record_slo(&namespace, &name, target, counted),
            Metric::SloGone { namespace, name } => series.forget_slo(&namespace, &name),
            Metric::Forget { namespace, name } => series.forget_checker(&namespace, &name),
            Metric::Owned { probing, held } => {
                metrics.owned.set(probing);
                metrics
                    .held
                    .store(held, std::sync::atomic::Ordering::Relaxed);
            }
            Metric::ScheduleLag(d) => metrics.schedule_lag.observe(d.as_secs_f64()),
            Metric::FirstProbeDelay(d) => metrics.first_probe_delay.observe(d.as_secs_f64()),
            Metric::Missed(n) => metrics.missed_intervals.inc_by(n),
        }
    }

    /// Queues an Event without waiting (the queue drops and counts one when
    /// it is full).
    fn send_event(&self, n: Notice) {
        let ev = KubeEvent {
            type_: if n.warning {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: n.reason,
            note: Some(n.note),
            action: "Probe".into(),
            secondary: None,
        };
        self.events.push(&n.namespace, (n.object_ref, ev));
    }
}
