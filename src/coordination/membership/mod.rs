//! This replica's membership Lease and the dispatch/write gates derived from it.
//!
//! The Lease's UID is this replica's incarnation ("epoch"): assignments name it,
//! and a replica probes a checker only while the checker's epoch annotation
//! equals the UID of the Lease it holds now. Losing the Lease (the API server
//! answered that it is gone or changed) therefore invalidates every assignment
//! at once, even if the replica re-creates its Lease a moment later.
//!
//! The rules live in [`gate`], a pure state machine; this module does the I/O
//! (create, renew, release) and keeps the heartbeat that detects pauses.

mod clock;
mod metrics;
pub use metrics::MembershipMetrics;
pub use webchecker_core::gate;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, OwnerReference};
use kube::api::{DeleteParams, ObjectMeta, Patch, Preconditions};
use kube::{Api, Client};
use tokio::sync::Notify;
use tracing::{error, info, warn};

use crate::api::{
    ADDRESS_ANNOTATION, CONFIRM_ADDRESS_ANNOTATION, INCARNATION_ANNOTATION, LEAVING_ANNOTATION,
    MEMBER_LABEL, NODE_ANNOTATION, PEER_EVIDENCE_ANNOTATION, ZONE_ANNOTATION,
};
use crate::error::{Error, api_code};
use crate::kubeio::client::{managers, patch_params, post_params};
use gate::{Answer, Gate, Seen, Timing};

/// Where a replica's membership Lease lives: its namespace and name
/// (`crate::coordination::LeaseNames::member`).
#[derive(Clone, Debug)]
pub struct LeaseAt {
    pub namespace: String,
    pub name: String,
}

impl LeaseAt {
    pub fn new(namespace: &str, name: &str) -> Self {
        LeaseAt {
            namespace: namespace.to_string(),
            name: name.to_string(),
        }
    }
}

/// Shared view of the membership Lease. Cheap to query from hot paths.
pub struct Membership {
    pub identity: String,
    namespace: String,
    lease_name: String,
    gate: Mutex<Gate>,
    /// Wakes the renewal task early (pause detected).
    kick: Notify,
    /// Signals gate changes to waiters (writer, engine).
    pub changed: Notify,
    /// Counts joins and returns of the API server: the checker feed opens a
    /// new watch on each (see [`Membership::reconnects`]).
    reconnects: tokio::sync::watch::Sender<u64>,
    metrics: Arc<MembershipMetrics>,
    /// What the Lease tells of this process (see [`Advert`]).
    advert: Advert,
    /// This process once lost its Lease to evidence that lied: it tells peers
    /// to judge it by its Lease alone from now on.
    distrusted: std::sync::atomic::AtomicBool,
    /// Asked to stop: its Lease says so, and the sharder drains its
    /// checkers to the others while it still probes them.
    leaving: std::sync::atomic::AtomicBool,
}

/// What a member's Lease tells of its process.
#[derive(Clone, Debug, Default)]
pub struct Advert {
    /// Where peers reach its HTTP server (see `crate::coordination::shard::peers`);
    /// `None`: peers judge it by its Lease alone.
    pub address: Option<String>,
    /// Where peers send their asks (crate::confirm::endpoint).
    pub confirm_address: Option<String>,
    pub incarnation: String,
    /// UID of the pod this process runs in (the Lease's owner), if known.
    pub pod_uid: Option<String>,
    /// Zone and node it runs on (empty when unknown), where confirmers are
    /// chosen from (crate::ask::choice).
    pub zone: String,
    pub node: String,
}

/// What a Lease found under our name on joining means (`Membership::found`).
enum Found {
    /// Created by an earlier attempt of ours.
    Ours(Box<Lease>),
    /// Gone, or just deleted: create ours now.
    Gone,
    /// Not replaced now, and why.
    Wait(String),
}

/// Renewal attempts waiting for an answer at once, at most.
const MAX_OVERLAP: usize = 4;

/// A finished renewal attempt.
struct Attempt {
    started: Instant,
    /// The incarnation it renewed.
    epoch: String,
    answer: Answer,
    /// The API server shed it (429, 503: busy, not down).
    shed: bool,
}

/// Classifies the outcome of a renewal request.
fn answer_of(r: Result<Lease, kube::Error>) -> Answer {
    match r {
        Ok(l) => Answer::Renewed(l.metadata.resource_version.unwrap_or_default()),
        Err(e) => match api_code(&e) {
            Some(404 | 409) => Answer::Lost,
            Some(429) | Some(500..) | None => Answer::Unanswered,
            Some(_) => Answer::Rejected,
        },
    }
}

impl Membership {
    pub fn new(
        identity: String,
        lease: LeaseAt,
        lease_duration: Duration,
        renew_deadline: Duration,
        retry_period: Duration,
        metrics: Arc<MembershipMetrics>,
        advert: Advert,
    ) -> Arc<Self> {
        let timing = Timing {
            lease_duration,
            renew_deadline,
            retry_period,
        };
        Arc::new(Membership {
            identity,
            namespace: lease.namespace,
            lease_name: lease.name,
            gate: Mutex::new(Gate::new(timing, clock::now())),
            kick: Notify::new(),
            changed: Notify::new(),
            reconnects: tokio::sync::watch::Sender::new(0),
            metrics,
            advert,
            distrusted: std::sync::atomic::AtomicBool::new(false),
            leaving: std::sync::atomic::AtomicBool::new(false),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Gate> {
        self.gate.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn timing(&self) -> Timing {
        self.lock().timing()
    }

    /// Where the elector counts the leader Lease's failed renewals, beside
    /// the member Lease's.
    pub fn renew_failures(&self) -> prometheus::IntCounterVec {
        self.metrics.lease_renew_failures.clone()
    }

    pub fn epoch(&self) -> Option<String> {
        self.lock().epoch().map(str::to_string)
    }

    fn on_seen(&self, seen: Seen) {
        if seen == Seen::PauseDetected {
            self.metrics
                .self_fences
                .with_label_values(&["paused"])
                .inc();
            warn!(replica = %self.identity, "this process was paused: holding probes until a new Lease renewal is answered");
            self.kick.notify_one();
            self.changed.notify_waiters();
        }
    }

    /// May a probe start (or send its request) now? Checked before every
    /// dispatch and again right before a request is written.
    pub fn dispatch_allowed(&self) -> bool {
        let (allowed, seen) = self.lock().dispatch_allowed(clock::now());
        self.on_seen(seen);
        allowed
    }

    /// May status be written now? Only while the Lease is known to be ours.
    pub fn can_write(&self) -> bool {
        self.lock().can_write(clock::now())
    }

    /// Since when this replica may count time against other members (the
    /// judge rule, see [`Gate::judge_since`]).
    pub fn judge_since(&self) -> Option<Instant> {
        self.lock().judge_since(clock::now())
    }

    /// Tests: hold the Lease `uid` as if `join` had created it just now.
    #[cfg(test)]
    pub(crate) fn joined_for_test(&self, uid: &str) {
        let now = clock::now();
        self.lock().joined(uid.into(), "1".into(), now, now);
    }

    /// Tests: the Lease is gone (released), as after a fence.
    #[cfg(test)]
    pub(crate) fn released_for_test(&self) {
        self.lock().released();
    }

    /// Tells of every join, and every answer after renewals went unanswered
    /// for longer than the renew deadline, from now on. Both follow a fault on this replica's path
    /// to the API server, during which a watch may have been opened that
    /// hangs unanswered; the leader may hand new checkers to this replica at
    /// once, so the feed starts a fresh watch rather than wait for the old
    /// one to time out.
    pub fn reconnects(&self) -> tokio::sync::watch::Receiver<u64> {
        self.reconnects.subscribe()
    }

    fn api(&self, client: &Client) -> Api<Lease> {
        Api::namespaced(client.clone(), &self.namespace)
    }

    fn desired(&self) -> Lease {
        let now = MicroTime(k8s_openapi::jiff::Timestamp::now());
        let mut annotations = std::collections::BTreeMap::new();
        if let Some(address) = &self.advert.address {
            annotations.insert(ADDRESS_ANNOTATION.to_string(), address.clone());
            annotations.insert(
                INCARNATION_ANNOTATION.to_string(),
                self.advert.incarnation.clone(),
            );
        }
        if let Some(address) = &self.advert.confirm_address {
            annotations.insert(CONFIRM_ADDRESS_ANNOTATION.to_string(), address.clone());
        }
        for (k, v) in [
            (ZONE_ANNOTATION, &self.advert.zone),
            (NODE_ANNOTATION, &self.advert.node),
        ] {
            if !v.is_empty() {
                annotations.insert(k.to_string(), v.clone());
            }
        }
        if self.distrusted.load(std::sync::atomic::Ordering::Relaxed) {
            annotations.insert(PEER_EVIDENCE_ANNOTATION.to_string(), "distrusted".into());
        }
        if self.leaving.load(std::sync::atomic::Ordering::Relaxed) {
            annotations.insert(LEAVING_ANNOTATION.to_string(), "true".into());
        }
        Lease {
            metadata: ObjectMeta {
                name: Some(self.lease_name.clone()),
                namespace: Some(self.namespace.clone()),
                labels: Some([(MEMBER_LABEL.to_string(), "true".to_string())].into()),
                annotations: (!annotations.is_empty()).then_some(annotations),
                owner_references: self.advert.pod_uid.clone().map(|uid| {
                    vec![OwnerReference {
                        api_version: "v1".into(),
                        kind: "Pod".into(),
                        name: self.identity.clone(),
                        uid,
                        ..Default::default()
                    }]
                }),
                ..Default::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(self.identity.clone()),
                lease_duration_seconds: Some(self.timing().lease_duration.as_secs().max(1) as i32),
                acquire_time: Some(now.clone()),
                renew_time: Some(now),
                ..Default::default()
            }),
        }
    }

    /// What to do about a Lease found under our name on joining. Ours when
    /// it names our incarnation (an earlier create that timed out landed);
    /// replaced when the process it names is proven gone (its address
    /// refuses, or answers with another incarnation) or it stood still for a
    /// whole lease as we watched it; otherwise another live process holds
    /// our identity, and deleting its Lease would only make the two delete
    /// each other's forever: wait, with back-off.
    async fn found(
        &self,
        api: &Api<Lease>,
        name: &str,
        watched: &mut Option<(String, Instant)>,
    ) -> Found {
        let deadline = crate::kubeio::client::CALL_DEADLINE;
        let lease = match tokio::time::timeout(deadline, api.get_opt(name)).await {
            Ok(Ok(Some(l))) => l,
            Ok(Ok(None)) => return Found::Gone,
            Ok(Err(e)) => {
                return Found::Wait(format!(
                    "cannot read the membership Lease under our name: {e}"
                ));
            }
            Err(_) => {
                return Found::Wait(
                    "reading the membership Lease under our name got no answer in time".into(),
                );
            }
        };
        let annotations = lease.metadata.annotations.clone().unwrap_or_default();
        let incarnation = annotations.get(INCARNATION_ANNOTATION);
        if incarnation == Some(&self.advert.incarnation) {
            return Found::Ours(Box::new(lease));
        }
        let rv = lease.metadata.resource_version.clone().unwrap_or_default();
        let gone = match (annotations.get(ADDRESS_ANNOTATION), incarnation) {
            (Some(address), Some(inc)) => {
                crate::coordination::look::look(address, inc, Duration::from_millis(500)).await
                    == crate::coordination::look::Evidence::Gone
            }
            _ => false,
        };
        let renewed = watched.as_ref().is_some_and(|(seen, _)| *seen != rv);
        let still = match watched {
            Some((seen, since)) if *seen == rv => {
                clock::now().saturating_duration_since(*since) >= self.timing().lease_duration
            }
            _ => {
                *watched = Some((rv.clone(), clock::now()));
                false
            }
        };
        if renewed && !gone {
            return Found::Wait(format!(
                "another process renews the membership Lease of identity {:?}: two processes must not share an identity (the pod name); not replacing it",
                self.identity
            ));
        }
        if !(gone || still) {
            return Found::Wait(
                "a membership Lease of an earlier incarnation exists and its process may be alive: replacing it once it has stood still for a lease".into(),
            );
        }
        let pre = DeleteParams {
            preconditions: Some(Preconditions {
                uid: lease.metadata.uid.clone(),
                resource_version: Some(rv),
            }),
            ..Default::default()
        };
        warn!(replica = %self.identity, evidence = gone, "a membership Lease of an earlier incarnation exists; replacing it");
        match tokio::time::timeout(deadline, api.delete(name, &pre)).await {
            Ok(Ok(_)) => Found::Gone,
            Ok(Err(e)) if api_code(&e) == Some(404) => Found::Gone,
            Ok(Err(e)) => Found::Wait(format!(
                "cannot replace the membership Lease of an earlier incarnation: {e}"
            )),
            Err(_) => Found::Wait(
                "deleting the membership Lease of an earlier incarnation got no answer in time"
                    .into(),
            ),
        }
    }

    /// Creates our Lease, replacing a stale one left by an earlier incarnation of
    /// the same identity (its assignments then carry a foreign epoch and move).
    pub async fn join(&self, client: &Client) -> Result<(), Error> {
        let api = self.api(client);
        let name = self.lease_name.clone();
        let retry = self.timing().retry_period;
        let deadline = crate::kubeio::client::CALL_DEADLINE;
        // The version of a Lease found under our name and since when it stood still.
        let mut watched: Option<(String, Instant)> = None;
        let mut backoff = retry;
        loop {
            let started = clock::now();
            let created = tokio::time::timeout(
                deadline,
                api.create(&post_params(managers::MEMBERSHIP), &self.desired()),
            )
            .await;
            match created {
                Ok(Ok(lease)) => {
                    let uid = lease.metadata.uid.clone().unwrap_or_default();
                    let rv = lease.metadata.resource_version.unwrap_or_default();
                    self.lock().joined(uid.clone(), rv, started, clock::now());
                    self.metrics.api_reachable.set(1);
                    info!(replica = %self.identity, epoch = %uid, "joined: membership Lease created");
                    self.reconnects.send_modify(|n| *n += 1);
                    self.changed.notify_waiters();
                    return Ok(());
                }
                Ok(Err(e)) if api_code(&e) == Some(409) => {
                    match self.found(&api, &name, &mut watched).await {
                        Found::Ours(lease) => {
                            let uid = lease.metadata.uid.clone().unwrap_or_default();
                            let rv = lease.metadata.resource_version.unwrap_or_default();
                            self.lock().joined(uid.clone(), rv, started, clock::now());
                            self.metrics.api_reachable.set(1);
                            info!(replica = %self.identity, epoch = %uid, "joined: the membership Lease our own earlier attempt created");
                            self.reconnects.send_modify(|n| *n += 1);
                            self.changed.notify_waiters();
                            return Ok(());
                        }
                        Found::Gone => {
                            backoff = retry;
                            continue;
                        }
                        Found::Wait(why) => {
                            warn!(replica = %self.identity, retry_in = ?backoff, "{why}");
                            tokio::time::sleep(backoff).await;
                            backoff = (backoff * 2).min(self.timing().lease_duration);
                        }
                    }
                }
                Ok(Err(e)) if api_code(&e) == Some(403) => {
                    return Err(Error::Forbidden(format!(
                        "cannot create Leases in namespace {:?} (coordination.k8s.io leases: create, get, update, patch, delete): {e}",
                        self.namespace
                    )));
                }
                Ok(Err(e)) => {
                    warn!(error = %e, "cannot create the membership Lease yet; retrying");
                    tokio::time::sleep(retry).await;
                }
                Err(_) => {
                    warn!("creating the membership Lease got no answer in time; retrying");
                    tokio::time::sleep(retry).await;
                }
            }
        }
    }

    /// One renewal attempt, then its answer recorded. Returns true when the
    /// API server says the Lease is not ours.
    #[cfg(test)]
    async fn renew(&self, client: &Client) -> bool {
        match self.attempt(client) {
            Some(a) => self.record(a.await),
            None => false,
        }
    }

    /// Starts one renewal attempt (`None` while we hold no Lease). The
    /// attempt is timed from its start and bounded by its own deadline.
    ///
    /// A merge patch that names the Lease's UID: the API server refuses it
    /// (422, the UID is immutable) once the Lease is another incarnation's,
    /// and 404 once it is gone. It carries no resourceVersion, so attempts
    /// that overlap never conflict with each other: with a resourceVersion,
    /// an attempt that landed after its deadline left every later one
    /// holding a stale version, each one's conflict and re-read outlasted
    /// its deadline on a slow API server, and a live replica's Lease expired
    /// while it renewed twice a second.
    fn attempt(
        &self,
        client: &Client,
    ) -> Option<impl std::future::Future<Output = Attempt> + Send + 'static> {
        let api = self.api(client);
        let name = self.lease_name.clone();
        let (epoch, timing) = {
            let g = self.lock();
            (g.epoch().map(str::to_string)?, g.timing())
        };
        // An answer within the renew deadline still proves the Lease was ours
        // when the attempt started; attempts overlap (see `run`), so a slow
        // one does not delay the next.
        let deadline = timing.renew_deadline.max(timing.retry_period);
        let patch = self.renewal(&epoch);
        let started = clock::now();
        Some(async move {
            let mut shed = false;
            let call = tokio::time::timeout(deadline, async {
                match api
                    .patch(&name, &patch_params(managers::MEMBERSHIP), &Patch::Merge(&patch))
                    .await
                {
                    Err(e) if matches!(api_code(&e), Some(409 | 422)) => {
                        // 422: the UID changed (not ours) or our patch is
                        // invalid; 409: the server gave up on concurrent
                        // writes. Only the Lease can say which.
                        match api.get_opt(&name).await {
                            Ok(Some(current))
                                if current.metadata.uid.as_deref() == Some(epoch.as_str()) =>
                            {
                                warn!(error = %e, "membership Lease renewal failed");
                                if api_code(&e) == Some(409) {
                                    Answer::Unanswered
                                } else {
                                    Answer::Rejected
                                }
                            }
                            Ok(_) => {
                                warn!(error = %e, "membership Lease renewal failed: the Lease is not ours");
                                Answer::Lost
                            }
                            Err(e2) => {
                                warn!(error = %e2, "membership Lease renewal failed");
                                answer_of(Err(e2))
                            }
                        }
                    }
                    other => {
                        if let Err(e) = &other {
                            shed = matches!(api_code(e), Some(429 | 503));
                            warn!(error = %e, "membership Lease renewal failed");
                        }
                        answer_of(other)
                    }
                }
            })
            .await;
            let answer = call.unwrap_or_else(|_| {
                warn!("membership Lease renewal got no answer in time");
                Answer::Unanswered
            });
            Attempt {
                started,
                epoch,
                answer,
                shed,
            }
        })
    }

    /// The renewal's merge patch: the UID as a precondition, the Lease's
    /// annotations (what this process advertises) and its spec.
    fn renewal(&self, epoch: &str) -> serde_json::Value {
        let desired = self.desired();
        let spec = desired.spec.unwrap_or_default();
        serde_json::json!({
            "metadata": {
                "uid": epoch,
                "annotations": desired.metadata.annotations.unwrap_or_default(),
            },
            "spec": {
                "holderIdentity": spec.holder_identity,
                "leaseDurationSeconds": spec.lease_duration_seconds,
                "renewTime": spec.renew_time,
            },
        })
    }

    /// Applies an attempt's answer to the gate. Returns true when the Lease
    /// is lost (the caller fences and re-joins).
    fn record(&self, a: Attempt) -> bool {
        let label = match &a.answer {
            Answer::Renewed(_) => {
                self.metrics.lease_renew_duration.observe(
                    clock::now()
                        .saturating_duration_since(a.started)
                        .as_secs_f64(),
                );
                None
            }
            Answer::Lost => Some("lost"),
            Answer::Rejected => Some("rejected"),
            Answer::Unanswered => Some("unreachable"),
        };
        if let Some(l) = label {
            self.metrics
                .lease_renew_failures
                .with_label_values(&[l])
                .inc();
        }
        let (lost, reachable, was_cut_off) = {
            let mut g = self.lock();
            if g.epoch() != Some(a.epoch.as_str()) {
                // An answer about an incarnation we no longer hold.
                return false;
            }
            let now = clock::now();
            let was = g.cut_off(now);
            let early = g.within_lease(now);
            let lost = g.answered(a.started, a.answer.clone(), now);
            if lost && early && self.advert.address.is_some() {
                warn!(replica = %self.identity, "membership Lease taken before it could expire (a peer found this process's address refusing while it ran): peers will judge this process by its Lease alone");
                self.distrusted
                    .store(true, std::sync::atomic::Ordering::Relaxed);
            }
            (lost, g.reachable(), was)
        };
        if reachable && was_cut_off {
            self.reconnects.send_modify(|n| *n += 1);
        }
        if lost {
            error!(replica = %self.identity, "membership Lease lost: dropping every checker");
            self.metrics.self_fences.with_label_values(&["lost"]).inc();
        } else if a.answer == Answer::Rejected {
            error!(replica = %self.identity, "membership Lease renewal refused by the API server: probing stops once the renew deadline passes");
        }
        self.metrics.api_reachable.set(reachable as i64);
        self.changed.notify_waiters();
        lost
    }

    /// The renewal loop. `on_lost` runs (and completes) before we re-join, so the
    /// engine has dropped every checker of the old incarnation first.
    ///
    /// An attempt starts every retry period even while earlier ones still wait
    /// for an answer (at most [`MAX_OVERLAP`] at once): a replica cut off from
    /// the API server (requests that hang) then hears within one retry period
    /// of reconnecting that its Lease is gone, and stops probing, instead of
    /// first waiting out the deadline of an attempt sent into the void.
    pub async fn run<F, Fut>(self: Arc<Self>, client: Client, on_lost: F) -> Result<(), Error>
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = ()>,
    {
        let heartbeat = tokio::spawn(self.clone().heartbeat());
        let _stop_heartbeat = AbortOnDrop(heartbeat.abort_handle());
        let retry = self.timing().retry_period;
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + retry, retry);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut attempts = futures::stream::FuturesUnordered::new();
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = self.kick.notified() => {}
                Some(a) = futures::StreamExt::next(&mut attempts), if !attempts.is_empty() => {
                    let a: Attempt = a;
                    let shed = a.shed;
                    if self.record(a) {
                        attempts.clear();
                        on_lost().await;
                        self.join(&client).await?;
                        tick.reset();
                    } else if shed {
                        // A busy API server sheds a share of calls (429,
                        // 503): try again soon rather than a whole retry
                        // period later, so that a lease's worth of attempts
                        // all failing (the member proven gone while alive)
                        // becomes rare (at 50%: 1 in 2^24 instead of 1 in
                        // 2^6). Not when it does not answer at all: an outage
                        // is not helped by asking eight times a second.
                        tick.reset_after(retry / 4);
                    }
                    continue;
                }
            }
            if heartbeat.is_finished() {
                return Err(Error::TaskDied("pause detector"));
            }
            if attempts.len() < MAX_OVERLAP
                && let Some(a) = self.attempt(&client)
            {
                attempts.push(a);
            }
        }
    }

    /// Records that the process runs, often enough to see a pause as a gap.
    async fn heartbeat(self: Arc<Self>) {
        let every = self.timing().pause_after() / 8;
        let mut tick = tokio::time::interval(every.max(Duration::from_millis(10)));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let seen = self.lock().alive(clock::now());
            self.on_seen(seen);
        }
    }

    /// Graceful shutdown, first step: the next renewal (at once) tells the
    /// sharder that this replica is leaving, so it drains every checker of
    /// ours to the others while we still probe them.
    pub fn leave(&self) {
        self.leaving
            .store(true, std::sync::atomic::Ordering::Relaxed);
        self.kick.notify_one();
    }

    /// Graceful shutdown: delete our Lease so the sharder moves our checkers at once.
    pub async fn release(&self, client: &Client) {
        let epoch = {
            let mut g = self.lock();
            let e = g.epoch().map(str::to_string);
            g.released();
            e
        };
        if let Some(uid) = epoch {
            let dp = DeleteParams {
                preconditions: Some(Preconditions {
                    uid: Some(uid),
                    resource_version: None,
                }),
                ..Default::default()
            };
            let api = self.api(client);
            let name = self.lease_name.clone();
            match tokio::time::timeout(crate::kubeio::client::CALL_DEADLINE, api.delete(&name, &dp))
                .await
            {
                Ok(Ok(_)) => info!(replica = %self.identity, "membership Lease released"),
                Ok(Err(e)) => warn!(error = %e, "could not release the membership Lease"),
                Err(_) => warn!("releasing the membership Lease got no answer in time"),
            }
        }
        self.changed.notify_waiters();
    }
}

/// Aborts a task when dropped (a helper task must not outlive its owner).
pub(crate) struct AbortOnDrop(pub tokio::task::AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[cfg(test)]
mod tests;
