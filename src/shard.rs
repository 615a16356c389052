//! Sharding: the view of live members (every replica), leader election, and the
//! sharder (leader only) that writes assignments.
//!
//! Assignment protocol (labels and annotations in `crate::api`):
//! - unassigned checker: the sharder writes `owner` + `epoch` (the owner's
//!   membership Lease UID);
//! - owner gone (Lease deleted, replaced, or proven dead): the sharder reassigns
//!   at once;
//! - move between two live members: the sharder writes `drain=<target>`; the old
//!   owner stops probing, waits for its in-flight probe, then clears `owner` and
//!   `epoch` (keeping `drain`); the sharder then assigns the target.
//!
//! Every write carries a resourceVersion precondition.
//!
//! A member is proven dead only by deleting its Lease with a resourceVersion
//! precondition, after this replica's own clock saw that Lease unchanged for a
//! whole lease duration; the clocks restart whenever the Lease watch re-lists,
//! so an outage the sharder itself suffered never looks like dead members.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{DeleteParams, ObjectMeta, Patch, PatchParams, PostParams, Preconditions};
use kube::core::{DynamicObject, PartialObjectMeta};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client};
use serde_json::json;
use tracing::{debug, info, warn};

use crate::api::{
    DRAIN_ANNOTATION, EPOCH_ANNOTATION, MEMBER_LABEL, OWNER_LABEL, WebChecker, object_key,
};
use crate::error::{Error, api_code};
use crate::membership::jiff_now;
use crate::metrics::Metrics;
use crate::ring::{self, Move, Placement};

pub const LEADER_LEASE: &str = "webchecker-leader";

#[derive(Clone, Debug)]
struct ObservedLease {
    name: String,
    uid: String,
    resource_version: String,
    observed_at: Instant,
}

#[derive(Default)]
struct ViewState {
    leases: HashMap<String, ObservedLease>,
    synced: bool,
}

/// Every replica's view of the membership Leases, with local observation clocks.
pub struct MemberView {
    lease_duration: Duration,
    state: Mutex<ViewState>,
    pub changed: tokio::sync::Notify,
}

impl MemberView {
    pub fn new(lease_duration: Duration) -> Arc<Self> {
        Arc::new(MemberView {
            lease_duration,
            state: Mutex::new(ViewState::default()),
            changed: tokio::sync::Notify::new(),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ViewState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Live members and their epochs; `None` while the view is not synced.
    pub fn live(&self) -> Option<BTreeMap<String, String>> {
        let s = self.lock();
        if !s.synced {
            return None;
        }
        let now = Instant::now();
        Some(
            s.leases
                .iter()
                .filter(|(_, l)| now.duration_since(l.observed_at) <= self.lease_duration)
                .map(|(id, l)| (id.clone(), l.uid.clone()))
                .collect(),
        )
    }

    /// Members whose Lease this replica saw unchanged for a whole lease duration.
    fn expired(&self) -> Vec<(String, ObservedLease)> {
        let s = self.lock();
        if !s.synced {
            return Vec::new();
        }
        let now = Instant::now();
        s.leases
            .iter()
            .filter(|(_, l)| now.duration_since(l.observed_at) > self.lease_duration)
            .map(|(id, l)| (id.clone(), l.clone()))
            .collect()
    }

    fn apply(&self, lease: &Lease) {
        let (Some(name), Some(uid), Some(rv)) = (
            lease.metadata.name.clone(),
            lease.metadata.uid.clone(),
            lease.metadata.resource_version.clone(),
        ) else {
            return;
        };
        let Some(holder) = lease.spec.as_ref().and_then(|s| s.holder_identity.clone()) else {
            return;
        };
        let mut s = self.lock();
        let now = Instant::now();
        match s.leases.get_mut(&holder) {
            Some(l) if l.resource_version == rv && l.uid == uid => {}
            _ => {
                s.leases.insert(
                    holder,
                    ObservedLease {
                        name,
                        uid,
                        resource_version: rv,
                        observed_at: now,
                    },
                );
            }
        }
    }

    fn delete(&self, lease: &Lease) {
        let mut s = self.lock();
        let uid = lease.metadata.uid.clone();
        s.leases.retain(|_, l| Some(&l.uid) != uid.as_ref());
    }

    /// Watches the membership Leases. Clocks restart on every re-list.
    pub async fn run(
        self: Arc<Self>,
        client: Client,
        namespace: String,
        metrics: Arc<Metrics>,
    ) -> Result<(), Error> {
        let api: Api<Lease> = Api::namespaced(client, &namespace);
        let cfg = watcher::Config::default().labels(&format!("{MEMBER_LABEL}=true"));
        let mut stream = watcher::watcher(api, cfg).default_backoff().boxed();
        let mut listing: Vec<Lease> = Vec::new();
        while let Some(ev) = stream.next().await {
            match ev {
                Ok(Event::Init) => listing.clear(),
                Ok(Event::InitApply(l)) => listing.push(l),
                Ok(Event::InitDone) => {
                    {
                        let mut s = self.lock();
                        s.leases.clear();
                        s.synced = true;
                    }
                    // Fresh clocks for everyone: we may have been the one cut off.
                    for l in listing.drain(..) {
                        self.apply(&l);
                    }
                }
                Ok(Event::Apply(l)) => self.apply(&l),
                Ok(Event::Delete(l)) => self.delete(&l),
                Err(e) => {
                    metrics.watch_restarts.with_label_values(&["leases"]).inc();
                    warn!(error = %e, "membership Lease watch failed; the sharder pauses until it re-lists");
                    self.lock().synced = false;
                }
            }
            if let Some(live) = self.live() {
                metrics.ring_members.set(live.len() as i64);
            }
            self.changed.notify_waiters();
        }
        Err(Error::TaskDied("membership lease watch"))
    }
}

/// Leader election on one Lease, client-go style, with expiry measured by this
/// replica's own clock. Calls `lead` while leading; it is aborted on loss.
pub struct LeaderElector {
    pub identity: String,
    pub namespace: String,
    pub lease_duration: Duration,
    pub renew_deadline: Duration,
    pub retry_period: Duration,
    pub metrics: Arc<Metrics>,
}

impl LeaderElector {
    fn desired(&self, transitions: i32, acquire: Option<MicroTime>) -> LeaseSpec {
        let now = MicroTime(jiff_now::now());
        LeaseSpec {
            holder_identity: Some(self.identity.clone()),
            lease_duration_seconds: Some(self.lease_duration.as_secs().max(1) as i32),
            acquire_time: Some(acquire.unwrap_or_else(|| now.clone())),
            renew_time: Some(now),
            lease_transitions: Some(transitions),
            ..Default::default()
        }
    }

    /// One election step. Returns whether we lead after it.
    async fn step(
        &self,
        api: &Api<Lease>,
        observed: &mut Option<(String, Instant)>,
        last_renew: &mut Option<Instant>,
    ) -> bool {
        let attempt = tokio::time::timeout(self.retry_period, api.get_opt(LEADER_LEASE)).await;
        let current = match attempt {
            Ok(Ok(l)) => l,
            _ => {
                self.metrics
                    .lease_renew_failures
                    .with_label_values(&["unreachable"])
                    .inc();
                return last_renew.is_some_and(|t| t.elapsed() <= self.renew_deadline);
            }
        };
        let Some(mut lease) = current else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(LEADER_LEASE.into()),
                    namespace: Some(self.namespace.clone()),
                    ..Default::default()
                },
                spec: Some(self.desired(0, None)),
            };
            return match api.create(&PostParams::default(), &lease).await {
                Ok(_) => {
                    *last_renew = Some(Instant::now());
                    true
                }
                Err(_) => false,
            };
        };
        let spec = lease.spec.clone().unwrap_or_default();
        let holder = spec.holder_identity.clone().unwrap_or_default();
        let rv = lease.metadata.resource_version.clone().unwrap_or_default();
        let ours = holder == self.identity;
        if !ours {
            *last_renew = None;
            let now = Instant::now();
            match observed {
                Some((seen, _)) if *seen == rv => {}
                _ => *observed = Some((rv.clone(), now)),
            }
            let stale = observed
                .as_ref()
                .is_some_and(|(_, at)| now.duration_since(*at) > self.lease_duration);
            if !holder.is_empty() && !stale {
                return false;
            }
        }
        let transitions = spec.lease_transitions.unwrap_or(0) + if ours { 0 } else { 1 };
        lease.spec = Some(self.desired(transitions, if ours { spec.acquire_time } else { None }));
        match tokio::time::timeout(
            self.retry_period,
            api.replace(LEADER_LEASE, &PostParams::default(), &lease),
        )
        .await
        {
            Ok(Ok(_)) => {
                if !ours {
                    info!(replica = %self.identity, "became leader (sharder)");
                }
                *last_renew = Some(Instant::now());
                true
            }
            Ok(Err(e)) if api_code(&e) == Some(409) => {
                *last_renew = None;
                false
            }
            _ => {
                self.metrics
                    .lease_renew_failures
                    .with_label_values(&["unreachable"])
                    .inc();
                last_renew.is_some_and(|t| t.elapsed() <= self.renew_deadline)
            }
        }
    }

    pub async fn run<F, Fut>(
        self,
        client: Client,
        mut shutdown: tokio::sync::watch::Receiver<bool>,
        lead: F,
    ) -> Result<(), Error>
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = Result<(), Error>> + Send + 'static,
    {
        let api: Api<Lease> = Api::namespaced(client, &self.namespace);
        let mut observed = None;
        let mut last_renew = None;
        let mut task: Option<tokio::task::JoinHandle<Result<(), Error>>> = None;
        loop {
            let leading = self.step(&api, &mut observed, &mut last_renew).await;
            match (leading, task.is_some()) {
                (true, false) => {
                    self.metrics.leader.set(1);
                    task = Some(tokio::spawn(lead()));
                }
                (false, true) => {
                    warn!(replica = %self.identity, "lost leadership; sharder stopped (probing goes on)");
                    self.metrics.leader.set(0);
                    if let Some(t) = task.take() {
                        t.abort();
                    }
                }
                _ => {}
            }
            if let Some(t) = &task
                && t.is_finished()
            {
                let t = task.take().expect("checked");
                match t.await {
                    Ok(Err(e)) => return Err(e),
                    _ => return Err(Error::TaskDied("sharder")),
                }
            }
            tokio::select! {
                _ = tokio::time::sleep(if leading { self.retry_period } else { self.retry_period / 2 }) => {}
                _ = shutdown.changed() => {
                    if let Some(t) = task.take() { t.abort(); }
                    self.metrics.leader.set(0);
                    if leading {
                        self.release(&api).await;
                    }
                    return Ok(());
                }
            }
        }
    }

    async fn release(&self, api: &Api<Lease>) {
        if let Ok(Some(mut lease)) = api.get_opt(LEADER_LEASE).await
            && lease
                .spec
                .as_ref()
                .and_then(|s| s.holder_identity.as_deref())
                == Some(self.identity.as_str())
        {
            if let Some(spec) = lease.spec.as_mut() {
                spec.holder_identity = None;
                spec.lease_duration_seconds = Some(1);
            }
            match api
                .replace(LEADER_LEASE, &PostParams::default(), &lease)
                .await
            {
                Ok(_) => info!(replica = %self.identity, "leader Lease released"),
                Err(e) => warn!(error = %e, "could not release the leader Lease"),
            }
        }
    }
}

#[derive(Clone, Debug)]
struct ObjState {
    namespace: String,
    name: String,
    resource_version: String,
    owner: Option<String>,
    epoch: Option<String>,
    drain: Option<String>,
    first_seen_unassigned: Option<Instant>,
}

fn obj_state(meta: &ObjectMeta, prev: Option<&ObjState>) -> Option<(String, ObjState)> {
    let namespace = meta.namespace.clone()?;
    let name = meta.name.clone()?;
    let owner = meta
        .labels
        .as_ref()
        .and_then(|l| l.get(OWNER_LABEL))
        .cloned();
    let ann = meta.annotations.as_ref();
    let drain = ann.and_then(|a| a.get(DRAIN_ANNOTATION)).cloned();
    let unassigned = owner.is_none() && drain.is_none();
    let first_seen_unassigned = if unassigned {
        Some(
            prev.and_then(|p| p.first_seen_unassigned)
                .unwrap_or_else(Instant::now),
        )
    } else {
        None
    };
    Some((
        object_key(&namespace, &name),
        ObjState {
            namespace,
            name,
            resource_version: meta.resource_version.clone().unwrap_or_default(),
            owner,
            epoch: ann.and_then(|a| a.get(EPOCH_ANNOTATION)).cloned(),
            drain,
            first_seen_unassigned,
        },
    ))
}

/// A write the sharder decided on.
#[derive(Debug, Clone)]
enum Action {
    Assign {
        key: String,
        to: String,
        cause: &'static str,
    },
    SetDrain {
        key: String,
        to: String,
    },
}

/// The sharder (runs only on the leader).
pub struct Sharder {
    pub client: Client,
    pub watch_namespace: Option<String>,
    pub lease_namespace: String,
    pub view: Arc<MemberView>,
    pub metrics: Arc<Metrics>,
    /// Assignment writes in flight at most.
    pub write_limit: Arc<tokio::sync::Semaphore>,
}

impl Sharder {
    fn checkers(&self) -> Api<PartialObjectMeta<WebChecker>> {
        match &self.watch_namespace {
            Some(ns) => Api::namespaced(self.client.clone(), ns),
            None => Api::all(self.client.clone()),
        }
    }

    /// Decides what to write, from the live members and the objects.
    /// `pending`: keys with a write in flight or not yet seen back, and the member
    /// that write targets. They are left alone and count against that member.
    fn decide(
        live: &BTreeMap<String, String>,
        objects: &HashMap<String, ObjState>,
        dead: &HashSet<String>,
        pending: &HashMap<String, String>,
    ) -> Vec<Action> {
        let members: Vec<String> = live.keys().cloned().collect();
        let valid_owner = |o: &ObjState| -> bool {
            match (&o.owner, &o.epoch) {
                (Some(owner), Some(epoch)) => live.get(owner) == Some(epoch),
                _ => false,
            }
        };
        let mut actions = Vec::new();
        let mut placements = Vec::with_capacity(objects.len());
        let mut keys: Vec<&String> = objects.keys().collect();
        keys.sort();
        for key in keys {
            let o = &objects[key];
            if let Some(t) = pending.get(key) {
                placements.push(Placement {
                    key: key.clone(),
                    holder: live.contains_key(t).then(|| t.clone()),
                });
                continue;
            }
            let target_live = o.drain.as_ref().filter(|t| live.contains_key(*t));
            let holder = match (valid_owner(o), target_live) {
                // A drain in progress counts against its target.
                (true, Some(t)) => Some(t.clone()),
                (true, None) if o.drain.is_none() => o.owner.clone(),
                // Draining towards a member that left: re-target (plan assigns anew).
                (true, None) => None,
                (false, Some(t)) if o.owner.is_none() => {
                    // The old owner acknowledged the drain: hand over to the target.
                    actions.push(Action::Assign {
                        key: key.clone(),
                        to: t.clone(),
                        cause: "rebalance",
                    });
                    Some(t.clone())
                }
                (false, _) => None,
            };
            placements.push(Placement {
                key: key.clone(),
                holder,
            });
        }
        let handovers: HashSet<String> = actions
            .iter()
            .map(|a| match a {
                Action::Assign { key, .. } | Action::SetDrain { key, .. } => key.clone(),
            })
            .collect();
        for mv in ring::plan(&members, &placements) {
            let k = match &mv {
                Move::Assign { key, .. } | Move::Drain { key, .. } => key,
            };
            if pending.contains_key(k) || handovers.contains(k) {
                continue;
            }
            match mv {
                Move::Assign { key, to } => {
                    let o = &objects[&key];
                    if valid_owner(o) {
                        actions.push(Action::SetDrain { key, to });
                    } else {
                        let cause = match &o.owner {
                            None if o.drain.is_some() => "rebalance",
                            None => "new",
                            Some(owner) if dead.contains(owner) => "dead",
                            Some(_) => "departed",
                        };
                        actions.push(Action::Assign { key, to, cause });
                    }
                }
                Move::Drain { key, to, .. } => actions.push(Action::SetDrain { key, to }),
            }
        }
        actions
    }

    async fn write(
        client: Client,
        o: ObjState,
        action: &Action,
        live: &BTreeMap<String, String>,
    ) -> Result<String, kube::Error> {
        let api: Api<DynamicObject> = Api::namespaced_with(
            client,
            &o.namespace,
            &kube::discovery::ApiResource::erase::<WebChecker>(&()),
        );
        let patch = match action {
            Action::Assign { to, .. } => json!({
                "metadata": {
                    "resourceVersion": o.resource_version,
                    "labels": { OWNER_LABEL: to },
                    "annotations": { EPOCH_ANNOTATION: live.get(to), DRAIN_ANNOTATION: null },
                }
            }),
            Action::SetDrain { to, .. } => json!({
                "metadata": {
                    "resourceVersion": o.resource_version,
                    "annotations": { DRAIN_ANNOTATION: to },
                }
            }),
        };
        let r = api
            .patch(&o.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
        Ok(r.metadata.resource_version.unwrap_or_default())
    }

    /// Proves a member dead by deleting its Lease, only if it is still the very
    /// Lease (resourceVersion) we saw go stale.
    async fn prove_dead(&self, lease: &ObservedLease) -> bool {
        let api: Api<Lease> = Api::namespaced(self.client.clone(), &self.lease_namespace);
        let dp = DeleteParams {
            preconditions: Some(Preconditions {
                uid: Some(lease.uid.clone()),
                resource_version: Some(lease.resource_version.clone()),
            }),
            ..Default::default()
        };
        match api.delete(&lease.name, &dp).await {
            Ok(_) => true,
            Err(e) if api_code(&e) == Some(404) => true,
            Err(e) => {
                debug!(error = %e, lease = %lease.name, "member Lease changed meanwhile: member alive");
                false
            }
        }
    }

    pub async fn run(self) -> Result<(), Error> {
        info!("sharder started");
        let cfg = watcher::Config::default();
        let mut stream = watcher::watcher(self.checkers(), cfg)
            .default_backoff()
            .boxed();
        let mut objects: HashMap<String, ObjState> = HashMap::new();
        let mut listing: HashMap<String, ObjState> = HashMap::new();
        let mut synced = false;
        let mut dead: HashSet<String> = HashSet::new();
        // Writes in flight, and writes done whose watch event has not arrived yet
        // (with the resourceVersion they produced): no new decision on those keys,
        // and they count against their target when balancing.
        let mut inflight: HashMap<String, String> = HashMap::new();
        let mut written: HashMap<String, (String, String, Instant)> = HashMap::new();
        let mut seen_while_inflight: HashMap<String, HashSet<String>> = HashMap::new();
        let mut writes: tokio::task::JoinSet<(String, Action, Result<String, kube::Error>)> =
            tokio::task::JoinSet::new();
        let mut dirty = true;
        // Decisions are rate limited so a burst of watch events (status writes
        // change resourceVersions too) costs one decision, not one per event.
        let mut last_decision = Instant::now() - Duration::from_secs(1);
        let mut tick = tokio::time::interval(Duration::from_millis(50));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        loop {
            tokio::select! {
                ev = stream.try_next() => {
                    let key_of = |m: &ObjectMeta| object_key(m.namespace.as_deref().unwrap_or_default(), m.name.as_deref().unwrap_or_default());
                    match ev {
                        Ok(Some(Event::Init)) => listing.clear(),
                        Ok(Some(Event::InitApply(o))) => {
                            if let Some((k, s)) = obj_state(&o.metadata, objects.get(&key_of(&o.metadata))) {
                                listing.insert(k, s);
                            }
                        }
                        Ok(Some(Event::InitDone)) => {
                            objects = std::mem::take(&mut listing);
                            synced = true;
                        }
                        Ok(Some(Event::Apply(o))) => {
                            if let Some((k, s)) = obj_state(&o.metadata, objects.get(&key_of(&o.metadata))) {
                                if written.get(&k).is_some_and(|(rv, _, _)| *rv == s.resource_version) {
                                    written.remove(&k);
                                }
                                // The event of our own write may arrive before the
                                // write's response: remember it.
                                if let Some(seen) = seen_while_inflight.get_mut(&k) {
                                    seen.insert(s.resource_version.clone());
                                }
                                objects.insert(k, s);
                            }
                        }
                        Ok(Some(Event::Delete(o))) => {
                            let key = key_of(&o.metadata);
                            objects.remove(&key);
                            written.remove(&key);
                            crate::shrink_if_sparse(&mut objects);
                        }
                        Ok(None) => return Err(Error::TaskDied("sharder watch")),
                        Err(e) => {
                            self.metrics.watch_restarts.with_label_values(&["sharder"]).inc();
                            warn!(error = %e, "sharder watch failed; re-listing");
                        }
                    }
                    dirty = true;
                }
                Some(done) = writes.join_next(), if !writes.is_empty() => {
                    // Decisions skip keys with a write in flight; now that this one
                    // is done, decide again even if no watch event follows (its
                    // events, and the old owner's drain ack, may all have arrived
                    // while the write was in flight: a quiet cluster sends no more).
                    dirty = true;
                    let Ok((key, action, r)) = done else { continue };
                    let target = inflight.remove(&key).unwrap_or_default();
                    let seen = seen_while_inflight.remove(&key).unwrap_or_default();
                    match r {
                        Ok(rv) => {
                            if !seen.contains(&rv) {
                                written.insert(key.clone(), (rv, target, Instant::now()));
                            }
                            match action {
                                Action::Assign { cause, to, .. } => {
                                    self.metrics.moves.with_label_values(&[cause]).inc();
                                    if let Some(t) = objects.get(&key).and_then(|o| o.first_seen_unassigned) {
                                        self.metrics.assignment_latency.observe(t.elapsed().as_secs_f64());
                                    }
                                    debug!(checker = %key, to = %to, cause, "assigned");
                                }
                                Action::SetDrain { to, .. } => debug!(checker = %key, to = %to, "drain requested"),
                            }
                        }
                        Err(e) if matches!(api_code(&e), Some(409) | Some(404)) => {
                            debug!(checker = %key, "assignment raced with another change; will re-decide");
                        }
                        Err(e) => {
                            warn!(checker = %key, error = %e, "assignment write failed");
                        }
                    }
                    continue;
                }
                _ = self.view.changed.notified() => { dirty = true; }
                _ = tick.tick() => {}
            }
            if !synced {
                continue;
            }
            // Prove stale members dead (their checkers then move at once).
            for (id, lease) in self.view.expired() {
                if self.prove_dead(&lease).await {
                    warn!(member = %id, "member Lease expired: member proven gone, moving its checkers");
                    dead.insert(id);
                    self.view.delete(&Lease {
                        metadata: ObjectMeta {
                            uid: Some(lease.uid.clone()),
                            ..Default::default()
                        },
                        spec: None,
                    });
                    dirty = true;
                }
            }
            // A write whose watch event never showed up (a later change came
            // first) holds its key for 5 s at most; then the key is open to
            // decisions again, event or not.
            let before = written.len();
            written.retain(|_, (_, _, at)| at.elapsed() < Duration::from_secs(5));
            if written.len() < before {
                dirty = true;
            }
            if !dirty || last_decision.elapsed() < Duration::from_millis(50) {
                continue;
            }
            last_decision = Instant::now();
            let Some(live) = self.view.live() else {
                continue;
            };
            if live.is_empty() {
                continue;
            }
            dirty = false;
            let mut pending: HashMap<String, String> = inflight.clone();
            pending.extend(written.iter().map(|(k, (_, t, _))| (k.clone(), t.clone())));
            let actions = Self::decide(&live, &objects, &dead, &pending);
            if actions.is_empty() {
                continue;
            }
            debug!(actions = actions.len(), "sharder writing assignments");
            let live = Arc::new(live);
            for a in actions {
                let (key, to) = match &a {
                    Action::Assign { key, to, .. } | Action::SetDrain { key, to } => {
                        (key.clone(), to.clone())
                    }
                };
                let Some(o) = objects.get(&key).cloned() else {
                    continue;
                };
                inflight.insert(key.clone(), to);
                seen_while_inflight.insert(key.clone(), HashSet::new());
                let client = self.client.clone();
                let live = live.clone();
                let limit = self.write_limit.clone();
                writes.spawn(async move {
                    let _permit = limit.acquire_owned().await;
                    let r = Self::write(client, o, &a, &live).await;
                    (key, a, r)
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(owner: Option<&str>, epoch: Option<&str>, drain: Option<&str>) -> ObjState {
        ObjState {
            namespace: "ns".into(),
            name: "x".into(),
            resource_version: "1".into(),
            owner: owner.map(String::from),
            epoch: epoch.map(String::from),
            drain: drain.map(String::from),
            first_seen_unassigned: None,
        }
    }

    fn live(ids: &[(&str, &str)]) -> BTreeMap<String, String> {
        ids.iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    }

    #[test]
    fn stale_epoch_means_the_owner_departed() {
        let l = live(&[("a", "uid-a2")]);
        let objects = HashMap::from([("ns/x".to_string(), obj(Some("a"), Some("uid-a1"), None))]);
        let acts = Sharder::decide(&l, &objects, &HashSet::new(), &HashMap::new());
        assert!(matches!(&acts[..], [Action::Assign { to, cause: "departed", .. }] if to == "a"));
    }

    #[test]
    fn acknowledged_drain_is_handed_to_its_target() {
        let l = live(&[("a", "ua"), ("b", "ub")]);
        let objects = HashMap::from([("ns/x".to_string(), obj(None, None, Some("b")))]);
        let acts = Sharder::decide(&l, &objects, &HashSet::new(), &HashMap::new());
        assert!(matches!(&acts[..], [Action::Assign { to, cause: "rebalance", .. }] if to == "b"));
    }

    #[test]
    fn valid_assignments_are_left_alone() {
        let l = live(&[("a", "ua")]);
        let objects = HashMap::from([("ns/x".to_string(), obj(Some("a"), Some("ua"), None))]);
        assert!(Sharder::decide(&l, &objects, &HashSet::new(), &HashMap::new()).is_empty());
    }

    #[test]
    fn dead_owner_is_reassigned_with_cause_dead() {
        let l = live(&[("b", "ub")]);
        let objects = HashMap::from([("ns/x".to_string(), obj(Some("a"), Some("ua"), None))]);
        let acts = Sharder::decide(
            &l,
            &objects,
            &HashSet::from(["a".to_string()]),
            &HashMap::new(),
        );
        assert!(matches!(&acts[..], [Action::Assign { to, cause: "dead", .. }] if to == "b"));
    }
}
