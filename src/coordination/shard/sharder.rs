//! The sharder (leader only): watches checker metadata, proves stale members
//! gone, and writes assignments. Decisions come from [`super::book::Book`];
//! this file is the I/O around it.
//!
//! Every write carries a resourceVersion precondition and is made only while
//! the [`LeaderGate`] says we lead. A member is proven gone only by deleting
//! its Lease with a UID + resourceVersion precondition, after the judge rule
//! ([`super::view`]) made it a suspect; a proof that gets no verdict is
//! retried with backoff, and its checkers stay where they are meanwhile.
//! A member whose process its peers found gone ([`super::peers`]) is a
//! suspect at once, without waiting for its Lease to stand still.
//!
//! An epoch that differs from the owner's Lease in the view proves nothing
//! by itself: the view may lag or its watch hang, and the epoch be a newer
//! Lease it has not seen (a restarted member's checkers were moved off its
//! live session that way). Only an epoch the view saw go, or one a read of
//! the owner's Lease finds replaced or deleted, moves its checkers.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{DeleteParams, Patch, Preconditions};
use kube::core::{DynamicObject, PartialObjectMeta};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client};
use tracing::{debug, info, warn};

use super::book::{Action, Book, Census, Roster, WriteOutcome};
use super::elector::LeaderGate;
use super::peers::Peers;
use super::view::{MemberView, ObservedLease};
use super::window::Window;

/// Leases after which a drain its owner never acknowledged is withdrawn
/// (webchecker_core::book::Book::stuck_drains): a handover takes
/// a probe's timeout and two writes, far less.
const STUCK_LEASES: u32 = 3;

/// Decisions are at least this far apart...
const MIN_DECISION_SPACING: Duration = Duration::from_millis(50);
/// ...and at least this many times the last one's cost apart, so that with
/// 100,000 checkers (tens of ms a decision) the sharder's thread still has
/// most of its time for the watch, the writes' answers and the Leases.
const DECISION_DUTY_INVERSE: u32 = 3;

fn decision_spacing(last_cost: Duration) -> Duration {
    MIN_DECISION_SPACING.max(last_cost * DECISION_DUTY_INVERSE)
}

/// CPU time of this thread (the coordination runtime's): what a decision
/// costs, not how long a loaded machine kept the thread from running.
fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec it is given a valid pointer to.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return Duration::ZERO;
    }
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// Assignment writes a sharder keeps in flight at most.
pub const WRITES_IN_FLIGHT: usize = 64;
use super::metrics::ShardMetrics;
use crate::api::{WebChecker, split_object_key};
use crate::assignment;
use crate::coordination::LeaseNames;
use crate::coordination::membership::Membership;
use crate::error::{Error, api_code};
use crate::kubeio::client::{CALL_DEADLINE, Clients, WATCH_TIMEOUT_SECS, managers, patch_params};
use crate::observe::metrics::WatchMetrics;

/// How a proof attempt ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Proof {
    Proven,
    /// The Lease changed meanwhile (409): the member is alive.
    Refuted,
    /// The Lease was replaced by a new incarnation of the member (409, a new
    /// UID): the old process is gone, the new one is alive.
    Replaced,
    /// Shed by a busy API server (429, 503): no verdict, retried soon.
    Shed,
    /// No verdict (5xx, timeout, not leader).
    Unknown,
}

/// How the API server took a write, for the handover window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Answer {
    /// Answered (written or refused on its merits) after this long.
    In(Duration),
    /// Shed (429, 503) or unanswered within the deadline.
    Shed,
    /// Not sent (not leader any more).
    NotSent,
}

/// The assignment writes in flight, each with its action and when its
/// checker was first seen unassigned (taken when the write starts: the watch
/// event of the write itself may reach the book before the write's answer
/// does), and those decided that wait for one of the [`WRITES_IN_FLIGHT`]
/// places. A write becomes a task only once it may be sent: a mass
/// placement holds a small record per checker, not a task's future.
#[derive(Default)]
struct Writes {
    set: tokio::task::JoinSet<(WriteOutcome, Answer)>,
    actions: HashMap<tokio::task::Id, (Action, Option<Instant>)>,
    queue: VecDeque<Queued>,
}

/// A decided write, with what it was decided on.
struct Queued {
    action: Action,
    namespace: String,
    name: String,
    resource_version: String,
    epoch: Option<String>,
    unassigned_since: Option<Instant>,
}

impl Writes {
    fn start(
        &mut self,
        sharder: &Sharder,
        book: &mut Book,
        members: &BTreeMap<String, String>,
        a: Action,
    ) {
        let (Some(o), Some((ns, name))) = (book.object(a.key()), split_object_key(a.key())) else {
            return;
        };
        let queued = Queued {
            namespace: ns.to_string(),
            name: name.to_string(),
            resource_version: o.resource_version.to_string(),
            epoch: members.get(a.target()).cloned(),
            unassigned_since: o.first_seen_unassigned(),
            action: a,
        };
        book.write_started(&queued.action);
        self.queue.push_back(queued);
        self.send(sharder);
    }

    /// Sends queued writes, in the order decided, while places are free.
    fn send(&mut self, sharder: &Sharder) {
        while self.set.len() < WRITES_IN_FLIGHT {
            let Some(q) = self.queue.pop_front() else {
                break;
            };
            let (client, leader) = (sharder.clients.requests.clone(), sharder.leader.clone());
            let action = q.action.clone();
            let handle = self.set.spawn(Sharder::write(
                client,
                leader,
                q.namespace,
                q.name,
                q.resource_version,
                q.action,
                q.epoch,
            ));
            self.actions
                .insert(handle.id(), (action, q.unassigned_since));
        }
        crate::shrink_if_sparse(&mut self.queue);
    }

    fn finished(
        &mut self,
        sharder: &Sharder,
        book: &mut Book,
        window: &mut Window,
        done: Result<(tokio::task::Id, (WriteOutcome, Answer)), tokio::task::JoinError>,
    ) {
        let (id, outcome) = match done {
            Ok((id, (outcome, answer))) => {
                match answer {
                    Answer::In(took) => window.answered(took),
                    Answer::Shed => window.shed(),
                    Answer::NotSent => {}
                }
                (id, outcome)
            }
            Err(e) => {
                warn!(error = %e, "an assignment write task failed");
                (e.id(), WriteOutcome::Failed)
            }
        };
        let Some((action, unassigned_since)) = self.actions.remove(&id) else {
            return;
        };
        sharder.record(&action, unassigned_since, &outcome);
        book.write_finished(action.key(), &outcome, Instant::now());
        self.send(sharder);
    }
}

#[derive(Clone)]
pub struct Sharder {
    pub clients: Clients,
    pub identity: String,
    /// The names of this install's Leases (an owner's epoch is read from
    /// its member Lease).
    pub lease_names: LeaseNames,
    pub watch_namespace: Option<String>,
    pub lease_namespace: String,
    pub view: Arc<MemberView>,
    pub membership: Arc<Membership>,
    pub leader: Arc<LeaderGate>,
    pub peers: Arc<Peers>,
    pub metrics: Arc<ShardMetrics>,
    pub watches: Arc<WatchMetrics>,
    pub retry_period: Duration,
}

/// Proves a member gone by deleting its Lease, only if it is still the very
/// Lease (UID and resourceVersion) we saw go stale. Runs as a task of its own
/// (up to two calls of [`CALL_DEADLINE`]): the sharder decides meanwhile.
async fn prove_gone(
    api: Api<Lease>,
    leader: Arc<LeaderGate>,
    membership: Arc<Membership>,
    lease: ObservedLease,
) -> Proof {
    if !leader.valid() || membership.judge_since().is_none() {
        return Proof::Unknown;
    }
    let dp = DeleteParams {
        preconditions: Some(Preconditions {
            uid: Some(lease.uid.clone()),
            resource_version: Some(lease.resource_version.clone()),
        }),
        ..Default::default()
    };
    match tokio::time::timeout(CALL_DEADLINE, api.delete(&lease.name, &dp)).await {
        Ok(Ok(_)) => Proof::Proven,
        Ok(Err(e)) if api_code(&e) == Some(404) => Proof::Proven,
        Ok(Err(e)) if api_code(&e) == Some(409) => {
            debug!(lease = %lease.name, "member Lease changed meanwhile: member alive");
            match tokio::time::timeout(CALL_DEADLINE, api.get_opt(&lease.name)).await {
                Ok(Ok(Some(l))) if l.metadata.uid.as_deref() != Some(lease.uid.as_str()) => {
                    Proof::Replaced
                }
                _ => Proof::Refuted,
            }
        }
        Ok(Err(e)) => {
            warn!(lease = %lease.name, error = %e, "could not prove a stale member gone; will retry");
            if matches!(api_code(&e), Some(429 | 503)) {
                Proof::Shed
            } else {
                Proof::Unknown
            }
        }
        Err(_) => Proof::Unknown,
    }
}

/// What a read of a member's Lease says of an epoch the view does not know.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum EpochCheck {
    /// The member's Lease is another one, or none: that epoch's Lease is gone.
    Gone,
    /// It is the member's Lease now: the view lags.
    Current,
    /// No answer.
    Unknown,
}

/// Reads `owner`'s Lease: is `epoch` still its UID? A UID, once deleted,
/// never comes back, so another UID under the name (or none) proves the
/// session of `epoch` ended before this read.
async fn check_epoch(api: Api<Lease>, name: String, epoch: &str) -> EpochCheck {
    match tokio::time::timeout(CALL_DEADLINE, api.get_opt(&name)).await {
        Ok(Ok(Some(l))) if l.metadata.uid.as_deref() == Some(epoch) => EpochCheck::Current,
        Ok(Ok(_)) => EpochCheck::Gone,
        Ok(Err(e)) => {
            warn!(lease = %name, error = %e, "could not read a member Lease to check an assignment's epoch; will retry");
            EpochCheck::Unknown
        }
        Err(_) => EpochCheck::Unknown,
    }
}

/// Reads of member Leases under way for epochs the view does not know, one
/// per epoch, and when each epoch may be read again.
struct EpochChecks {
    api: Api<Lease>,
    names: LeaseNames,
    set: tokio::task::JoinSet<(String, EpochCheck)>,
    under_way: HashSet<String>,
    retry: HashMap<String, (Instant, Duration)>,
}

impl EpochChecks {
    fn new(api: Api<Lease>, names: LeaseNames) -> Self {
        EpochChecks {
            api,
            names,
            set: Default::default(),
            under_way: HashSet::new(),
            retry: HashMap::new(),
        }
    }

    fn start(&mut self, unverified: &BTreeSet<(String, String)>, now: Instant) {
        for (owner, epoch) in unverified {
            if self.under_way.contains(epoch)
                || self.retry.get(epoch).is_some_and(|(at, _)| now < *at)
            {
                continue;
            }
            self.under_way.insert(epoch.clone());
            let (api, name, epoch) = (self.api.clone(), self.names.member(owner), epoch.clone());
            self.set.spawn(async move {
                let check = check_epoch(api, name, &epoch).await;
                (epoch, check)
            });
        }
    }

    /// Records a check's answer; whether the epoch was found gone.
    fn finished(
        &mut self,
        epoch: &str,
        check: EpochCheck,
        now: Instant,
        base: Duration,
        max: Duration,
    ) -> bool {
        self.under_way.remove(epoch);
        if check == EpochCheck::Gone {
            self.retry.remove(epoch);
            return true;
        }
        // Current: the view catches up by itself; read again later in case
        // it does not (a member that left meanwhile).
        let delay = self
            .retry
            .get(epoch)
            .map_or(base, |(_, d)| (*d * 2).min(max));
        self.retry.insert(epoch.to_string(), (now + delay, delay));
        false
    }

    fn prune(&mut self, named: &BTreeSet<(String, String)>) {
        self.retry
            .retain(|e, _| named.iter().any(|(_, epoch)| epoch == e));
    }
}

/// What a decision reads and changes, besides the roster.
struct Decision<'a> {
    book: &'a mut Book,
    window: &'a mut Window,
    checks: &'a mut EpochChecks,
    writes: &'a mut Writes,
}

/// Proofs under way: a task per suspect at most (the book knows which),
/// each ending with the member, its Lease, whether peers had evidence, and
/// the verdict.
type Proofs = tokio::task::JoinSet<(String, ObservedLease, bool, Proof)>;

impl Sharder {
    fn checkers(&self) -> Api<PartialObjectMeta<WebChecker>> {
        match &self.watch_namespace {
            Some(ns) => Api::namespaced(self.clients.watches.clone(), ns),
            None => Api::all(self.clients.watches.clone()),
        }
    }

    async fn write(
        client: Client,
        leader: Arc<LeaderGate>,
        namespace: String,
        name: String,
        resource_version: String,
        action: Action,
        epoch: Option<String>,
    ) -> (WriteOutcome, Answer) {
        if !leader.valid() {
            return (WriteOutcome::Failed, Answer::NotSent);
        }
        let api: Api<DynamicObject> = Api::namespaced_with(
            client,
            &namespace,
            &kube::discovery::ApiResource::erase::<WebChecker>(&()),
        );
        let (rv, epoch) = (resource_version.as_str(), epoch.as_deref());
        let patch = match &action {
            Action::Assign { to, .. } => assignment::assign(rv, to, epoch),
            Action::SetDrain { to, .. } => assignment::drain(rv, to, epoch),
            Action::ClearDrain { .. } => assignment::withdraw_drain(rv),
        };
        let (pp, patch) = (patch_params(managers::SHARDER), Patch::Merge(&patch));
        let started = Instant::now();
        let key = || format!("{namespace}/{name}");
        match tokio::time::timeout(CALL_DEADLINE, api.patch(&name, &pp, &patch)).await {
            Ok(Ok(r)) => (
                WriteOutcome::Written(r.metadata.resource_version.unwrap_or_default()),
                Answer::In(started.elapsed()),
            ),
            Ok(Err(e)) if matches!(api_code(&e), Some(409 | 404)) => {
                (WriteOutcome::Raced, Answer::In(started.elapsed()))
            }
            Ok(Err(e)) => {
                warn!(checker = %key(), error = %e, "assignment write failed");
                let answer = match api_code(&e) {
                    Some(429) | Some(500..) | None => Answer::Shed,
                    Some(_) => Answer::In(started.elapsed()),
                };
                (WriteOutcome::Failed, answer)
            }
            Err(_) => {
                warn!(checker = %key(), "assignment write got no answer in time");
                (WriteOutcome::Failed, Answer::Shed)
            }
        }
    }

    /// Suspects: members whose Lease stood still for a lease of time we could
    /// count, and members whose process their peers found gone (the second
    /// set). Nobody while we cannot write ourselves.
    fn suspects(&self) -> (Vec<(String, ObservedLease)>, HashSet<String>) {
        let judge_since = self.membership.judge_since();
        let mut stale = self.view.suspects(&self.identity, judge_since);
        let mut evidenced = HashSet::new();
        if judge_since.is_some()
            && let Some(all) = self.view.observed()
        {
            for (id, lease) in all {
                if id != self.identity
                    && self.peers.gone(&lease)
                    && !stale.iter().any(|(s, _)| *s == id)
                {
                    evidenced.insert(id.clone());
                    stale.push((id, lease));
                }
            }
        }
        (stale, evidenced)
    }

    /// What to write now: stuck drains withdrawn, then the book's decisions
    /// for every other checker.
    fn decisions(&self, book: &mut Book, seen: &Roster<'_>, now: Instant) -> Vec<Action> {
        let bound = self.view.lease_duration * STUCK_LEASES;
        let mut actions = book.stuck_drains(seen, now, bound);
        for a in &actions {
            warn!(checker = %a.key(), owner = %a.target(), "its owner did not acknowledge the drain within {STUCK_LEASES} leases (its write refused?): drain withdrawn, the owner probes it again");
        }
        let stuck: HashSet<String> = actions.iter().map(|a| a.key().to_string()).collect();
        actions.extend(
            book.decide(seen)
                .into_iter()
                .filter(|a| !stuck.contains(a.key())),
        );
        actions
    }

    /// Starts a proof for each suspect whose proof is due and not under way.
    fn start_proofs(
        &self,
        book: &mut Book,
        suspects: &[(String, ObservedLease)],
        evidenced: &HashSet<String>,
        proofs: &mut Proofs,
    ) {
        let now = Instant::now();
        for (id, lease) in suspects {
            if book.proving(id) || !book.proof_due(id, now) {
                continue;
            }
            book.proof_started(id);
            let api: Api<Lease> =
                Api::namespaced(self.clients.requests.clone(), &self.lease_namespace);
            let (leader, membership) = (self.leader.clone(), self.membership.clone());
            let (id, lease, evidenced) = (id.clone(), lease.clone(), evidenced.contains(id));
            proofs.spawn(async move {
                let proof = prove_gone(api, leader, membership, lease.clone()).await;
                (id, lease, evidenced, proof)
            });
        }
    }

    /// Folds a proof's verdict into the book; whether a Lease was found gone.
    fn settled(
        &self,
        book: &mut Book,
        id: &str,
        lease: &ObservedLease,
        evidenced: bool,
        proof: Proof,
    ) -> bool {
        match proof {
            Proof::Proven if evidenced => {
                warn!(member = %id, "member's process gone (its address refuses connections): Lease deleted, moving its checkers");
                self.metrics
                    .peer_proofs
                    .with_label_values(&["proven"])
                    .inc();
                book.proven(id);
                self.view.forget(&lease.uid);
                true
            }
            Proof::Proven => {
                warn!(member = %id, "member Lease expired: member proven gone, moving its checkers");
                book.proven(id);
                self.view.forget(&lease.uid);
                true
            }
            Proof::Refuted => {
                if evidenced {
                    self.metrics
                        .peer_proofs
                        .with_label_values(&["refuted"])
                        .inc();
                    self.peers.distrust(lease);
                }
                book.proof_refuted(id);
                false
            }
            Proof::Replaced => {
                // That Lease is gone (its checkers may move), the member is
                // not: the view learns its new Lease from the watch.
                book.proof_refuted(id);
                self.view.forget(&lease.uid);
                true
            }
            Proof::Shed => {
                book.proof_shed(id, Instant::now(), self.retry_period / 4);
                false
            }
            Proof::Unknown => {
                book.proof_failed(
                    id,
                    Instant::now(),
                    self.retry_period,
                    self.view.lease_duration,
                );
                false
            }
        }
    }

    pub async fn run(self) -> Result<(), Error> {
        info!("sharder started");
        let cfg = watcher::Config::default().timeout(WATCH_TIMEOUT_SECS);
        let mut stream = watcher::watcher(self.checkers(), cfg)
            .backoff(crate::kubeio::client::WatchBackoff::default())
            .boxed();
        let mut book = Book::default();
        let mut writes = Writes::default();
        let mut window = Window::new(Instant::now());
        let mut proofs = Proofs::default();
        let mut checks = EpochChecks::new(
            Api::namespaced(self.clients.requests.clone(), &self.lease_namespace),
            self.lease_names.clone(),
        );
        let mut dirty = true;
        // Decisions are rate limited so a burst of watch events (status writes
        // change resourceVersions too) costs one decision, not one per event.
        let mut last_decision = Instant::now() - Duration::from_secs(1);
        let mut last_cost = Duration::ZERO;
        let mut last_census = Instant::now() - Duration::from_secs(1);
        let mut tick = tokio::time::interval(Duration::from_millis(50));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        let _clear = ClearOrphans(self.metrics.clone());
        loop {
            tokio::select! {
                ev = stream.try_next() => {
                    self.apply(&mut book, &mut window, ev)?;
                    dirty = true;
                }
                Some(done) = writes.set.join_next_with_id(), if !writes.set.is_empty() => {
                    // Decisions skip keys with a write in flight; now that this one
                    // is done, decide again even if no watch event follows.
                    dirty = true;
                    writes.finished(&self, &mut book, &mut window, done);
                    continue;
                }
                Some(done) = proofs.join_next(), if !proofs.is_empty() => {
                    match done {
                        Ok((id, lease, evidenced, proof)) => {
                            dirty |= self.settled(&mut book, &id, &lease, evidenced, proof);
                        }
                        // A proof's task died: let every proof start again.
                        Err(_) => book.proofs_abandoned(),
                    }
                }
                Some(done) = checks.set.join_next(), if !checks.set.is_empty() => {
                    dirty |= self.checked(&mut checks, done);
                }
                _ = self.view.changed.notified() => { dirty = true; }
                _ = self.peers.changed.notified() => {}
                _ = tick.tick() => {}
            }
            if !book.synced() {
                continue;
            }
            let Some(members) = self.view.members() else {
                continue;
            };
            if !self.leader.valid() {
                // Leadership lapsed (renewals late): keep the view, write nothing.
                continue;
            }
            let (stale, evidenced) = self.suspects();
            self.start_proofs(&mut book, &stale, &evidenced, &mut proofs);
            let suspects: HashSet<String> = stale.into_iter().map(|(id, _)| id).collect();
            let retired = self.view.retired();
            let leaving = self.view.leaving();
            let seen = Roster {
                members: &members,
                suspects: &suspects,
                leaving: &leaving,
                retired: &retired,
            };
            if last_census.elapsed() >= Duration::from_secs(1) {
                last_census = Instant::now();
                self.census(&mut book, &seen, &mut checks, last_census);
            }
            if book.expire_written(Instant::now()) {
                dirty = true;
            }
            if !dirty || last_decision.elapsed() < decision_spacing(last_cost) {
                continue;
            }
            last_decision = Instant::now();
            dirty = false;
            let cpu_before = thread_cpu();
            let mut step = Decision {
                book: &mut book,
                window: &mut window,
                checks: &mut checks,
                writes: &mut writes,
            };
            self.decide(&mut step, &seen, last_decision);
            last_cost = thread_cpu().saturating_sub(cpu_before);
        }
    }

    /// One decision: the window's width from what was measured, the reads
    /// of unknown epochs, then the writes.
    fn decide(&self, d: &mut Decision<'_>, seen: &Roster<'_>, now: Instant) {
        let width = d.window.width();
        let in_progress = d.book.handovers_in_progress();
        d.window.step(now, in_progress);
        if d.window.width() != width {
            debug!(width = d.window.width(), answers_ms = ?d.window.smoothed().map(|d| d.as_millis()), "handover window");
        }
        d.book.set_window(d.window.width());
        self.metrics.handover_window.set(d.window.width() as i64);
        d.checks.start(&d.book.unverified(seen), now);
        let actions = self.decisions(d.book, seen, now);
        if actions.is_empty() {
            return;
        }
        debug!(actions = actions.len(), "sharder writing assignments");
        let drains = actions
            .iter()
            .filter(|a| matches!(a, Action::SetDrain { .. }))
            .count();
        d.window.in_use(in_progress + drains);
        for a in actions {
            d.writes.start(self, d.book, seen.members, a);
        }
    }

    /// Once a second: the orphan gauge, pruning, and the reads of member
    /// Leases due again (if nothing else made a decision start them).
    fn census(&self, book: &mut Book, seen: &Roster<'_>, checks: &mut EpochChecks, now: Instant) {
        let lease = self.view.lease_duration;
        let Census { orphaned } = book.census(seen, now, lease, lease * 6);
        self.metrics.orphaned_checkers.set(orphaned as i64);
        book.prune(seen.members);
        let unverified = book.unverified(seen);
        checks.prune(&unverified);
        checks.start(&unverified, now);
    }

    /// Folds a read of a member Lease into the view; whether an epoch was
    /// found gone.
    fn checked(
        &self,
        checks: &mut EpochChecks,
        done: Result<(String, EpochCheck), tokio::task::JoinError>,
    ) -> bool {
        let Ok((epoch, check)) = done else {
            checks.under_way.clear();
            return false;
        };
        let (base, max) = (self.retry_period, self.view.lease_duration);
        if !checks.finished(&epoch, check, Instant::now(), base, max) {
            return false;
        }
        info!(epoch = %epoch, "an assignment's epoch is no member's Lease any more: moving its checkers");
        self.view.retire(&epoch);
        true
    }

    /// Folds one event of the checkers' watch into the book.
    fn apply(
        &self,
        book: &mut Book,
        window: &mut Window,
        ev: Result<Option<Event<PartialObjectMeta<WebChecker>>>, watcher::Error>,
    ) -> Result<(), Error> {
        let now = Instant::now();
        match ev {
            Ok(Some(Event::Init)) => book.list_begin(),
            Ok(Some(Event::InitApply(o))) => book.list_item(&o.metadata, now),
            Ok(Some(Event::InitDone)) => book.list_done(),
            Ok(Some(Event::Apply(o))) => {
                if let Some(took) = book.applied(&o.metadata, now) {
                    // The old owner assigned the target itself: a move.
                    self.metrics.moves.with_label_values(&["rebalance"]).inc();
                    self.metrics.handover_duration.observe(took.as_secs_f64());
                    window.handed_over(took);
                }
            }
            Ok(Some(Event::Delete(o))) => book.deleted(&o.metadata),
            Ok(None) => return Err(Error::TaskDied("sharder watch")),
            Err(e) => {
                self.watches.failed("sharder", &e);
                warn!(error = %e, "sharder watch failed; it resumes (decisions go on)");
            }
        }
        Ok(())
    }

    fn record(&self, action: &Action, unassigned_since: Option<Instant>, outcome: &WriteOutcome) {
        let key = action.key();
        match (outcome, action) {
            (WriteOutcome::Raced, _) => {
                debug!(checker = %key, "assignment raced with another change; will re-decide");
            }
            (WriteOutcome::Written(_), Action::Assign { to, cause, .. }) => {
                self.metrics.moves.with_label_values(&[cause.label()]).inc();
                if let Some(t) = unassigned_since {
                    self.metrics
                        .assignment_latency
                        .observe(t.elapsed().as_secs_f64());
                }
                debug!(checker = %key, to = %to, cause = cause.label(), "assigned");
            }
            (WriteOutcome::Written(_), Action::SetDrain { to, .. }) => {
                debug!(checker = %key, to = %to, "drain requested");
            }
            (WriteOutcome::Written(_), Action::ClearDrain { owner, .. }) => {
                debug!(checker = %key, owner = %owner, "drain withdrawn: its target left");
            }
            (WriteOutcome::Failed, _) => {}
        }
    }
}

/// The orphan gauge belongs to the leader: zero it when the sharder stops.
struct ClearOrphans(Arc<ShardMetrics>);

impl Drop for ClearOrphans {
    fn drop(&mut self) {
        self.0.orphaned_checkers.set(0);
        self.0.handover_window.set(0);
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::kubeio::mock_api::{client, ok, status};

    fn lease(uid: &str) -> serde_json::Value {
        json!({
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": { "name": "webchecker-member-r1", "namespace": "ns", "uid": uid, "resourceVersion": "7" },
            "spec": { "holderIdentity": "r1" },
        })
    }

    /// Only a read that finds another Lease (or none) under the owner's name
    /// ends an epoch the view does not know.
    #[tokio::test]
    async fn an_unknown_epoch_ends_only_when_a_read_finds_it_replaced() {
        let (c, mut h) = client();
        let api: Api<Lease> = Api::namespaced(c, "ns");
        let server = tokio::spawn(async move {
            let not_found = http::Response::builder()
                .status(404)
                .body(kube::client::Body::from(
                    serde_json::to_vec(&json!({
                        "apiVersion": "v1", "kind": "Status", "status": "Failure",
                        "message": "not found", "reason": "NotFound", "code": 404,
                    }))
                    .unwrap(),
                ))
                .unwrap();
            for resp in [ok(lease("new")), ok(lease("newer")), not_found, status(500)] {
                let (req, send) = h.next_request().await.unwrap();
                assert_eq!(req.method(), "GET");
                assert!(req.uri().path().ends_with("/leases/webchecker-member-r1"));
                send.send_response(resp);
            }
        });
        assert_eq!(
            check_epoch(api.clone(), "webchecker-member-r1".into(), "new").await,
            EpochCheck::Current
        );
        assert_eq!(
            check_epoch(api.clone(), "webchecker-member-r1".into(), "new").await,
            EpochCheck::Gone
        );
        assert_eq!(
            check_epoch(api.clone(), "webchecker-member-r1".into(), "new").await,
            EpochCheck::Gone
        );
        assert_eq!(
            check_epoch(api, "webchecker-member-r1".into(), "new").await,
            EpochCheck::Unknown
        );
        server.await.unwrap();
    }

    #[test]
    fn decisions_leave_the_thread_two_thirds_of_its_time() {
        let ms = Duration::from_millis;
        assert_eq!(decision_spacing(Duration::ZERO), ms(50));
        assert_eq!(decision_spacing(ms(10)), ms(50));
        assert_eq!(decision_spacing(ms(40)), ms(120));
    }

    #[tokio::test]
    async fn a_current_epoch_is_read_again_later_with_backoff() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let (client, _h) = client();
        let mut c = EpochChecks::new(Api::namespaced(client, "ns"), LeaseNames::default());
        c.under_way.insert("e".into());
        assert!(!c.finished("e", EpochCheck::Current, t0, ms(500), ms(3000)));
        assert_eq!(c.retry["e"], (t0 + ms(500), ms(500)));
        assert!(!c.finished("e", EpochCheck::Unknown, t0, ms(500), ms(3000)));
        assert_eq!(c.retry["e"].1, ms(1000));
        assert!(c.finished("e", EpochCheck::Gone, t0, ms(500), ms(3000)));
        assert!(c.retry.is_empty() && c.under_way.is_empty());
    }
}
