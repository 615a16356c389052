//! The checker table: every checker's lifecycle as a pure state machine.
//!
//! [`Table::step`] takes one input (a command, a timer that fired, a free
//! worker, a probe that ended) with the clock readings and the random draw it
//! may need, and returns the effects for the engine's shell to carry out, in
//! order: start a probe, arm or disarm a timer, abort a probe, tell the
//! status writer, queue an Event, update a metric. It owns what is pure: the
//! per-checker state, the status reducer of each checker
//! (crate::status) and the ready queue (crate::fairness);
//! the shell owns the timers, the worker pool, the tasks and the handles.
//!
//! At most one probe per checker is in flight: the next one is scheduled
//! only when the previous one ended, on the same cadence.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use k8s_openapi::api::core::v1::ObjectReference;
use tracing::debug;

use crate::arrival::{self, Arrivals};
use crate::ask::zones::{ZoneAnswer, ZoneResult};
use crate::ask::{Purpose, Verdict};
use crate::checker::CheckerInfo;
use crate::checker::Op;
use crate::checker::ZoneSample;
use crate::checker::{Change, Definition};
use crate::dependencies::Dependencies;
use crate::diagnosis::{Subject, subject_of};
use crate::fairness::FairQueue;
use crate::maintenance::Calendar;
use crate::status::{CheckerStatus, Context, Effects};
use webchecker_api::assignment::Handover;
use webchecker_plan::{Outcome, ProbePlan, Roots};

mod effect;
mod foreign;
mod plan;
#[cfg(test)]
mod tests;

pub use effect::{
    CHECKER_DOWN, CHECKER_UP, Clock, Effect, Input, Metric, Notice, Standing, ToWriter,
};

/// What the table needs to know of its replica.
pub struct Settings {
    /// The owner written into each status.
    pub identity: String,
    /// Size of the worker pool (the fair shares are computed from it).
    pub workers: usize,
    /// An unchanged status is written again after this long.
    pub heartbeat: Duration,
    /// What plans trust by default: the prober's roots
    /// (webchecker_plan::Prober::roots).
    pub roots: Roots,
    /// Where this replica runs, and whether failures are confirmed by
    /// another replica before they turn a checker Ready=False (a checker
    /// may still opt out).
    pub place: crate::ask::Place,
    pub confirm: bool,
    /// Whether other zones can be asked to probe (spec.locations).
    pub zones: bool,
    /// Whether a checker of an in-cluster target that turns Ready=False
    /// is diagnosed (crate::diagnosis).
    pub diagnosis: bool,
}

struct Entry {
    /// Tells a probe of this incarnation of the checker from one of an
    /// earlier incarnation (removed and added again).
    seq: u64,
    namespace: String,
    name: String,
    generation: Option<i64>,
    /// `None` when the object does not deserialise. Boxed, as are the
    /// other large parts, so that the map holds small entries
    /// (docs/benchmarks.md, part 8).
    definition: Option<Box<Definition>>,
    plan: Option<Arc<ProbePlan>>,
    object_ref: ObjectReference,
    /// Its route's, when generated (crate::discovery::route_events).
    source_ref: Option<Box<ObjectReference>>,
    /// Whether its timer is armed (for `due`).
    timer: bool,
    due: Instant,
    inflight: bool,
    draining: bool,
    /// Draining, but due within [`LAST_CALL`] of the drain: probed once
    /// more first, then handed over with that probe's time, so the new owner
    /// has a whole interval to take it over.
    last_call: bool,
    /// Whom the drain hands it to (see [`Handover`]).
    handover: Option<Handover>,
    status: CheckerStatus,
    /// With spec.locations: the other zones were asked and have not all
    /// answered (one round out at a time).
    zones_asked: bool,
    last_probe_wall: Option<SystemTime>,
    /// A new arrival not yet probed: when the watch delivered it.
    first_probe_since: Option<Instant>,
    /// Its probes have yet to reach their phase (crate::arrival::phase):
    /// it came at once as a new arrival, or its interval changed.
    settling: bool,
    info: Arc<CheckerInfo>,
    /// What maintenance windows select it by.
    labels: std::collections::BTreeMap<String, String>,
    /// The Events of its fall, held for the cluster's word on it (at most
    /// until its next probe).
    diagnosing: Option<Vec<Notice>>,
}

impl Entry {
    /// How long a probe of this checker may hold a worker.
    fn hold(&self) -> Duration {
        self.plan.as_ref().map_or(Duration::ZERO, |p| p.timeout)
    }

    /// The ask about this checker (crate::confirm).
    fn ask(&self, identity: &str, purpose: Purpose) -> crate::ask::Ask {
        crate::ask::Ask {
            from: identity.to_string(),
            namespace: self.namespace.clone(),
            name: self.name.clone(),
            uid: self.object_ref.uid.clone().unwrap_or_default(),
            generation: self.generation,
            purpose,
            wait_millis: None,
        }
    }
}

pub struct Table {
    settings: Settings,
    entries: HashMap<String, Box<Entry>>,
    /// Due probes, handed to the pool fairly between namespaces.
    ready: FairQueue,
    next_seq: u64,
    /// Whether listed checkers fill an empty table (their first probes spread).
    arrivals: Arrivals,
    /// Shut down: nothing is dispatched any more.
    stopping: bool,
    /// [`Effect::Stopped`] was given.
    stopped: bool,
    /// The effects of the current step.
    out: Vec<Effect>,
    /// Probes other replicas asked for, queued or in flight.
    foreign: foreign::Foreign,
    /// The maintenance windows of every namespace.
    calendar: Arc<Calendar>,
    /// The dependencies of every checker that has some.
    dependencies: Arc<Dependencies>,
}

fn unix_ms(t: SystemTime) -> i64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

fn rfc3339(t: SystemTime) -> String {
    chrono::DateTime::<chrono::Utc>::from(t)
        .format("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

impl Table {
    pub fn new(settings: Settings) -> Self {
        Table {
            ready: FairQueue::new(settings.workers),
            settings,
            entries: HashMap::new(),
            next_seq: 0,
            arrivals: Default::default(),
            stopping: false,
            stopped: false,
            out: Vec::new(),
            foreign: Default::default(),
            calendar: Default::default(),
            dependencies: Default::default(),
        }
    }

    /// Whether a probe is waiting for a worker. Once shut down, none is:
    /// the due probes are dropped.
    pub fn wants_worker(&mut self) -> bool {
        if self.stopping {
            self.clear_ready();
            return false;
        }
        self.ready.has_ready()
    }

    /// Whether a probe waits for a worker or for the gate to open.
    pub fn has_ready(&self) -> bool {
        self.ready.has_ready()
    }

    /// One input in, the effects out.
    pub fn step(&mut self, input: Input, clock: Clock) -> Vec<Effect> {
        match input {
            Input::Change(Change::Upsert {
                checker,
                initial,
                seen,
            }) => self.upsert(*checker, initial, seen, clock),
            Input::Change(Change::Drain {
                key,
                namespace,
                name,
                resource_version,
                uid,
                handover,
                ..
            }) => self.drain(
                key,
                (namespace, name),
                resource_version,
                uid,
                handover,
                clock,
            ),
            Input::Change(Change::Remove { key }) => {
                self.remove(&key);
                self.shrink_if_sparse();
                self.owned();
            }
            Input::Change(Change::Refresh { key, resolved }) => self.refresh(&key, resolved, clock),
            Input::Change(Change::Patterns { key, compiled }) => {
                self.repattern(&key, compiled, clock)
            }
            Input::Change(Change::Resync { present }) => {
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
                self.owned();
            }
            Input::Fence => self.fence(),
            Input::Shutdown => self.shutdown(),
            Input::Due { key } => self.due(key),
            Input::Dispatch { free } => self.dispatch(free, clock),
            Input::Done {
                key,
                seq,
                outcome,
                finished,
            } => self.done(key, seq, outcome, finished, clock),
            Input::Confirmed { key, seq, verdict } => self.confirmed(key, seq, verdict, clock),
            Input::Zones { key, seq, answers } => self.zones_answered(key, seq, answers, clock),
            Input::Foreign {
                key,
                namespace,
                hold,
            } => self.foreign_asked(key, namespace, hold, clock),
            Input::ForeignDone { key } => self.foreign_done(&key),
            // Each checker's Maintenance condition follows at its next probe.
            Input::Calendar(calendar) => self.calendar = calendar,
            // A dependent learns at its next probe too.
            Input::Dependencies(d) => self.dependencies = d,
            Input::Diagnosis {
                key,
                seq,
                diagnosis,
            } => self.diagnosed(&key, seq, diagnosis, clock),
        }
        // A failure held for another replica's word is written before the end.
        if self.stopping
            && !self.stopped
            && self
                .entries
                .values()
                .all(|e| !e.inflight && !e.status.is_confirming())
        {
            self.stopped = true;
            self.out.push(Effect::Stopped);
        }
        std::mem::take(&mut self.out)
    }

    fn due(&mut self, key: String) {
        if let Some(e) = self.entries.get_mut(&key) {
            e.timer = false;
            let hold = e.hold();
            self.ready.push(&e.namespace, key, e.due, hold);
        }
    }

    /// Starts the next ready probe the namespaces' fair shares allow, if any.
    fn dispatch(&mut self, free: usize, clock: Clock) {
        if self.stopping {
            self.clear_ready();
            return;
        }
        while let Some((ns, key, due)) = self.ready.pop(free) {
            if self.foreign_starts(&ns, &key) {
                return;
            }
            let Some(e) = self.entries.get_mut(&key) else {
                continue;
            };
            let Some(plan) = e.plan.clone() else {
                continue;
            };
            if (e.draining && !e.last_call) || e.inflight {
                continue;
            }
            let lag = clock.now.saturating_duration_since(due);
            self.out.push(Effect::Metric(Metric::ScheduleLag(lag)));
            if let Some(seen) = e.first_probe_since.take() {
                let delay = clock.now.saturating_duration_since(seen);
                self.out
                    .push(Effect::Metric(Metric::FirstProbeDelay(delay)));
            }
            e.inflight = true;
            self.out.push(Effect::Probe {
                key,
                seq: e.seq,
                namespace: e.namespace.clone(),
                plan,
            });
            self.ready.started(&ns);
            return;
        }
    }

    fn done(
        &mut self,
        key: String,
        seq: u64,
        outcome: Option<Outcome>,
        finished: SystemTime,
        clock: Clock,
    ) {
        let Some(e) = self.entries.get_mut(&key) else {
            return;
        };
        if e.seq != seq {
            return;
        }
        e.inflight = false;
        e.last_call = false;
        self.ready.finished(&e.namespace);
        if outcome.is_some() {
            e.last_probe_wall = Some(finished);
        }
        if e.draining {
            // The in-flight probe (done or held back at the last moment) was all
            // the drain waited for: hand over now. A held-back probe must not go
            // back to the ready queue, which skips draining checkers: the
            // handshake would never complete and the checker would stay unowned.
            self.acknowledge(key);
            return;
        }
        let Some(outcome) = outcome else {
            // Held back: try again once the gate opens, same due time.
            let hold = e.hold();
            self.ready.push(&e.namespace, key, e.due, hold);
            return;
        };
        let Some(plan) = e.plan.clone() else { return };
        let window = window_of(&self.calendar, e, clock);
        let ctx = context(&self.settings, e.generation, Some(&plan), clock)
            .in_window(window.as_ref())
            .with_dependency(self.dependencies.of(&e.namespace, &e.name));
        let fx = match plan.locations {
            Some(q) => {
                // One round of the other zones out at a time; without an
                // asker there is no other zone to ask.
                let ask = self.settings.zones && !e.zones_asked;
                let fx = e
                    .status
                    .observe_zone(&outcome, q, ask || e.zones_asked, &ctx);
                if ask {
                    e.zones_asked = true;
                    self.out.push(Effect::AskZones {
                        key: key.clone(),
                        seq: e.seq,
                        ask: e.ask(&self.settings.identity, Purpose::Zone),
                        others: q.zones as usize - 1,
                        limit: plan.timeout + CONFIRM_READS,
                    });
                } else if !e.zones_asked {
                    self.out.push(zone_metric(e, &ctx, &[]));
                }
                fx
            }
            None => e.status.observe(&outcome, &ctx),
        };
        debug!(checker = %key, reason = outcome.reason.as_str(), ms = outcome.duration.as_millis() as u64, "probe done");
        self.out.push(Effect::Metric(Metric::Probe {
            namespace: e.namespace.clone(),
            name: e.name.clone(),
            info: e.info.clone(),
            outcome,
            standing: standing(e, window),
        }));
        if fx.confirm {
            self.out.push(Effect::Confirm {
                key: key.clone(),
                seq: e.seq,
                ask: e.ask(&self.settings.identity, Purpose::Confirm),
                limit: plan.timeout + CONFIRM_READS,
            });
        }
        self.status_effects(&key, fx);
        self.schedule_next(&key, plan.interval, clock);
    }

    /// Schedules the probe after the one just done: one interval after it was
    /// due, or sooner while the checker settles into its phase; whole
    /// intervals the checker could not make are skipped and counted.
    fn schedule_next(&mut self, key: &str, interval: Duration, clock: Clock) {
        let Some(e) = self.entries.get_mut(key) else {
            return;
        };
        let mut next = e.due + interval;
        if e.settling {
            let ago = clock.now.saturating_duration_since(e.due).as_millis() as i64;
            let phase = arrival::phase(key, interval);
            let (at, settled) =
                arrival::settling_due(e.due, unix_ms(clock.wall) - ago, interval, phase);
            // A probe that outlasted the shorter gap keeps the cadence, for
            // good: a gap shrinks only in the probes right after an arrival
            // or a change, never at some later probe that happened to be quick.
            if at > clock.now {
                next = at;
                e.settling = !settled;
            } else {
                e.settling = false;
            }
        }
        let mut missed = 0;
        while next < clock.now {
            next += interval;
            missed += 1;
        }
        if missed > 0 {
            self.out.push(Effect::Metric(Metric::Missed(missed)));
        }
        self.schedule(key, next);
    }

    /// Another replica's word on a failure held back (crate::confirm).
    fn confirmed(&mut self, key: String, seq: u64, verdict: Verdict, clock: Clock) {
        let Some(e) = self.entries.get_mut(&key) else {
            return;
        };
        if e.seq != seq || e.draining {
            return;
        }
        let Some(plan) = e.plan.clone() else { return };
        if !e.status.is_confirming() {
            // A success came first: the answer is moot.
            return;
        }
        let window = window_of(&self.calendar, e, clock);
        let ctx = context(&self.settings, e.generation, Some(&plan), clock)
            .in_window(window.as_ref())
            .with_dependency(self.dependencies.of(&e.namespace, &e.name));
        let fx = e.status.confirmed(&verdict, &ctx);
        self.out.push(Effect::Metric(Metric::Verdict {
            namespace: e.namespace.clone(),
            name: e.name.clone(),
            info: e.info.clone(),
            verdict,
            standing: standing(e, window),
        }));
        self.status_effects(&key, fx);
    }

    /// The other zones' answers to a round (spec.locations).
    fn zones_answered(&mut self, key: String, seq: u64, answers: Vec<ZoneAnswer>, clock: Clock) {
        let Some(e) = self.entries.get_mut(&key) else {
            return;
        };
        if e.seq != seq {
            return;
        }
        e.zones_asked = false;
        let Some((plan, q)) = e
            .plan
            .clone()
            .filter(|_| !e.draining)
            .and_then(|p| Some((p.clone(), p.locations?)))
        else {
            // Handed over or no longer probed from zones: nothing to decide.
            e.status.release_held();
            return;
        };
        let window = window_of(&self.calendar, e, clock);
        let ctx = context(&self.settings, e.generation, Some(&plan), clock)
            .in_window(window.as_ref())
            .with_dependency(self.dependencies.of(&e.namespace, &e.name));
        let fx = e.status.zones_answered(&answers, q, &ctx);
        self.out.push(zone_metric(e, &ctx, &answers));
        self.out.push(Effect::Metric(Metric::Up {
            namespace: e.namespace.clone(),
            name: e.name.clone(),
            info: e.info.clone(),
            standing: standing(e, window),
        }));
        self.status_effects(&key, fx);
    }

    fn drain(
        &mut self,
        key: String,
        (namespace, name): (String, String),
        resource_version: String,
        uid: String,
        handover: Option<Handover>,
        clock: Clock,
    ) {
        self.forget_if_recreated(&key, &uid);
        self.observe_version(&key, resource_version, uid);
        let (inflight, last_call, last) = match self.entries.get_mut(&key) {
            Some(e) => {
                e.draining = true;
                e.handover = handover.clone();
                // Handed over now, a checker due in a moment would wait for
                // the handover's round trips past its due time.
                let soon = e.timer && e.plan.is_some() && e.due <= clock.now + LAST_CALL;
                e.last_call = !e.inflight && (e.last_call || soon) && !self.stopping;
                (e.inflight, e.last_call, e.last_probe_wall)
            }
            None => (false, false, None),
        };
        if !last_call {
            self.cancel(&key);
        }
        self.out.push(Effect::Metric(Metric::Forget {
            namespace: namespace.clone(),
            name: name.clone(),
        }));
        if !inflight && !last_call {
            let op = Op::AckDrain {
                last_probe_unix_ms: last.map(unix_ms),
                handover,
            };
            self.submit(key, namespace, name, op);
        }
        self.owned();
    }

    fn fence(&mut self) {
        let keys: Vec<String> = self.entries.keys().cloned().collect();
        for k in keys {
            self.remove(&k);
        }
        self.out.push(Effect::Writer(ToWriter::ForgetAll));
        self.clear_ready();
        self.arrivals.emptied();
        self.shrink_if_sparse();
        self.owned();
    }

    fn shutdown(&mut self) {
        self.clear_ready();
        let keys: Vec<String> = self.entries.keys().cloned().collect();
        for k in &keys {
            self.cancel(k);
        }
        self.stopping = true;
        // Waiting to probe once more before their handover: hand over now.
        let last_calls: Vec<String> = self
            .entries
            .iter()
            .filter(|(_, e)| e.last_call && !e.inflight)
            .map(|(k, _)| k.clone())
            .collect();
        for key in last_calls {
            if let Some(e) = self.entries.get_mut(&key) {
                e.last_call = false;
            }
            self.acknowledge(key);
        }
    }

    /// Hands a draining checker over: the ack names its last probe and the
    /// drain's target.
    fn acknowledge(&mut self, key: String) {
        let Some(e) = self.entries.get(&key) else {
            return;
        };
        let op = Op::AckDrain {
            last_probe_unix_ms: e.last_probe_wall.map(unix_ms),
            handover: e.handover.clone(),
        };
        let (namespace, name) = (e.namespace.clone(), e.name.clone());
        self.submit(key, namespace, name, op);
    }

    fn remove(&mut self, key: &str) {
        if let Some(e) = self.entries.get(key) {
            if e.timer {
                self.out.push(Effect::Cancel { key: key.into() });
            }
            if e.inflight {
                self.out.push(Effect::Abort { key: key.into() });
                self.ready.finished(&e.namespace);
            }
            self.ready.remove_checker(&e.namespace);
            self.out.push(Effect::Metric(Metric::Forget {
                namespace: e.namespace.clone(),
                name: e.name.clone(),
            }));
            self.entries.remove(key);
        }
        self.out
            .push(Effect::Writer(ToWriter::Forget { key: key.into() }));
    }

    /// Gives memory back after the shard shrank a lot (the entries are large).
    fn shrink_if_sparse(&mut self) {
        if crate::shrink_if_sparse(&mut self.entries) {
            self.out.push(Effect::Compact);
        }
    }

    fn owned(&mut self) {
        let n = self.entries.values().filter(|e| !e.draining).count();
        self.out.push(Effect::Metric(Metric::Owned {
            probing: n as i64,
            held: self.entries.len(),
        }));
    }

    /// Arms the checker's timer for `at` (replacing an armed one).
    fn schedule(&mut self, key: &str, at: Instant) {
        let Some(e) = self.entries.get_mut(key) else {
            return;
        };
        e.due = at;
        e.timer = true;
        self.out.push(Effect::Schedule {
            key: key.into(),
            at,
        });
    }

    /// Disarms the checker's timer, if armed.
    fn cancel(&mut self, key: &str) {
        if let Some(e) = self.entries.get_mut(key)
            && std::mem::take(&mut e.timer)
        {
            self.out.push(Effect::Cancel { key: key.into() });
        }
    }

    fn observe_version(&mut self, key: &str, resource_version: String, uid: String) {
        self.out.push(Effect::Writer(ToWriter::Observe {
            key: key.into(),
            resource_version,
            uid,
        }));
    }

    /// An object deleted and created again under the same name (the delete
    /// unseen, across a re-list) is another checker: nothing of the old one's
    /// (status, cadence, queued writes, series) carries over.
    pub fn forget_if_recreated(&mut self, key: &str, uid: &str) {
        let recreated = !uid.is_empty()
            && self
                .entries
                .get(key)
                .is_some_and(|e| e.object_ref.uid.as_deref().is_some_and(|old| old != uid));
        if recreated {
            self.remove(key);
            self.owned();
        }
    }

    fn submit(&mut self, key: String, namespace: String, name: String, op: Op) {
        self.out.push(Effect::Writer(ToWriter::Submit {
            key,
            namespace,
            name,
            op,
        }));
    }

    /// What one step of a checker's status reducer asks for.
    fn status_effects(&mut self, key: &str, fx: Effects) {
        let Some(e) = self.entries.get(key) else {
            return;
        };
        let (namespace, name) = (e.namespace.clone(), e.name.clone());
        // Held for a diagnosis that did not come in time: they go as they are.
        let mut notices = e.diagnosing.clone().unwrap_or_default();
        let mut diagnose = None;
        if let Some(t) = &fx.transition {
            let (ready, reason) = (t.ready.as_str(), &t.reason);
            tracing::info!(checker = %key, ready, reason, "Ready changed");
            let mut said = vec![effect::transition_notice(&namespace, &e.object_ref, t)];
            if let Some(source) = e.source_ref.as_deref() {
                said.extend(effect::source_notice(&namespace, source, &name, t));
            }
            // Planned work: the same news, as Normal Events.
            for n in &mut said {
                n.warning &= !fx.quiet;
            }
            match self.diagnosable(e, t) {
                Some(subject) => diagnose = Some((subject, said)),
                None => notices.extend(said),
            }
        }
        if let Some(message) = &fx.still_down {
            tracing::info!(checker = %key, "{message}");
            notices.push(effect::warning_notice(
                &namespace,
                &e.object_ref,
                &e.status.reason,
                message,
            ));
        }
        if let Some(message) = &fx.degraded {
            tracing::info!(checker = %key, "{message}");
            let reason = e.status.degraded.as_ref().map(|c| c.reason.as_str());
            notices.push(effect::warning_notice(
                &namespace,
                &e.object_ref,
                reason.unwrap_or("UnconfirmedFailure"),
                message,
            ));
        }
        if let Some(message) = &fx.certificate_expiring {
            tracing::info!(checker = %key, "{message}");
            notices.push(effect::warning_notice(
                &namespace,
                &e.object_ref,
                crate::status::CERTIFICATE_EXPIRING,
                message,
            ));
        }
        if let (Some(counted), Some(target)) = (fx.slo, e.plan.as_ref().and_then(|p| p.slo)) {
            self.out.push(Effect::Metric(Metric::Slo {
                namespace: namespace.clone(),
                name: name.clone(),
                target,
                counted,
            }));
        }
        if let Some(status) = fx.write {
            self.submit(
                key.into(),
                namespace.clone(),
                name,
                Op::Status(Box::new(status)),
            );
        }
        self.out.extend(notices.into_iter().map(Effect::Event));
        if let Some(e) = self.entries.get_mut(key) {
            e.diagnosing = None;
            if let Some((subject, held)) = diagnose {
                e.diagnosing = Some(held);
                self.out.push(Effect::Diagnose {
                    key: key.into(),
                    seq: e.seq,
                    namespace,
                    subject,
                });
            }
        }
    }

    /// What to diagnose when `t` is a fall that pages: the in-cluster
    /// target, the host's Certificates after a TLS failure.
    fn diagnosable(&self, e: &Entry, t: &crate::status::Transition) -> Option<Subject> {
        if !self.settings.diagnosis || t.ready != crate::status::Truth::False {
            return None;
        }
        let source = e.source_ref.as_ref().and_then(|r| {
            Some((
                r.kind.as_deref()?,
                r.namespace.as_deref()?,
                r.name.as_deref()?,
            ))
        });
        let host = e.plan.as_ref().map_or("", |p| p.target.host.as_str());
        subject_of(&e.namespace, host, source, &t.reason)
    }

    /// The cluster's word on a fall: in the status, and in the message of
    /// the Events held for it.
    fn diagnosed(
        &mut self,
        key: &str,
        seq: u64,
        d: Option<webchecker_api::Diagnosis>,
        clock: Clock,
    ) {
        let Some(e) = self.entries.get_mut(key) else {
            return;
        };
        if e.seq != seq {
            return;
        }
        let mut held = e.diagnosing.take().unwrap_or_default();
        let fx = match &d {
            Some(d) => {
                for n in &mut held {
                    n.note = effect::with_diagnosis(&n.note, &d.message);
                }
                let ctx = context(&self.settings, e.generation, e.plan.as_deref(), clock);
                e.status.diagnosed(d.clone(), &ctx)
            }
            None => Default::default(),
        };
        self.out.extend(held.into_iter().map(Effect::Event));
        if let Some(status) = fx.write {
            let (namespace, name) = (e.namespace.clone(), e.name.clone());
            self.submit(key.into(), namespace, name, Op::Status(Box::new(status)));
        }
    }
}

/// The maintenance window that covers the checker now, and when it closes.
fn window_of(calendar: &Calendar, e: &Entry, clock: Clock) -> Option<(Arc<str>, i64)> {
    calendar
        .covering(&e.namespace, &e.labels, unix_ms(clock.wall) / 1000)
        .map(|(name, until)| (name.clone(), until))
}

/// Its gauges after a step.
fn standing(e: &Entry, window: Option<(Arc<str>, i64)>) -> Standing {
    Standing {
        ready: e.status.is_ready(),
        down_since: e.status.down_since(),
        window,
        dependency_down: e.status.blames_dependency(),
    }
}

/// The reducer's view of a checker at the time of a step.
fn context<'a>(
    settings: &'a Settings,
    generation: Option<i64>,
    plan: Option<&ProbePlan>,
    clock: Clock,
) -> Context<'a> {
    Context {
        generation,
        owner: &settings.identity,
        now_wall: rfc3339(clock.wall),
        now: clock.now,
        heartbeat: settings.heartbeat,
        success_threshold: plan.map(|p| p.success_threshold).unwrap_or(1),
        failure_threshold: plan.map(|p| p.failure_threshold).unwrap_or(1),
        certificate_warning_days: plan.and_then(|p| p.tls.expiry_warning_days),
        confirm: settings.confirm && plan.is_some_and(|p| p.confirm_failures),
        place: &settings.place,
        now_unix: (unix_ms(clock.wall) / 1000).max(0) as u64,
        slo: plan.and_then(|p| p.slo),
        maintenance: None,
        dependency: None,
    }
}

/// The zones' series of a checker after a round: the owner's zone from its
/// own probe, the others from their answers.
fn zone_metric(e: &Entry, ctx: &Context<'_>, answers: &[ZoneAnswer]) -> Effect {
    let own = e.status.zone_entry(&ctx.place.zone).map(|z| ZoneSample {
        zone: z.zone.clone(),
        result: z.known.then(|| (z.failures == 0, z.millis.unwrap_or(0))),
    });
    let others = answers.iter().map(|a| ZoneSample {
        zone: a.by.zone.clone(),
        result: match &a.result {
            ZoneResult::Probed {
                success, millis, ..
            } => Some((*success, *millis)),
            ZoneResult::NoAnswer => None,
        },
    });
    Effect::Metric(Metric::Zones {
        namespace: e.namespace.clone(),
        name: e.name.clone(),
        asked: e
            .plan
            .as_ref()
            .and_then(|p| p.locations)
            .map_or(0, |q| q.zones),
        results: own.into_iter().chain(others).collect(),
    })
}

/// What a confirmer may spend besides the probe's timeout: a review of the
/// asker's token, a read of the checker and reads of its Secrets (at once),
/// 2 s each at most (crate::confirm::service).
const CONFIRM_READS: Duration = Duration::from_secs(6);

/// A checker due this soon after its drain arrives is probed once more
/// before it is handed over (`Entry::last_call`): a handover takes an ack
/// write and a watch event, but the acks of a whole window of drains queue
/// at the old owner's writer (4 writes at once), up to about 2 s for a
/// replica that hands over 300 checkers.
const LAST_CALL: Duration = Duration::from_secs(2);
