//! Discovery while this replica leads: watches of the Ingresses, of the
//! Namespaces' annotations and of the generated checkers' metadata (only
//! those labelled as generated), each resumed with a backoff after an
//! error; a work queue of Ingresses; at most [`CONCURRENCY`] of them written
//! at once. Nothing is reconciled before all three watches have listed: a
//! Namespace not listed yet would look as if it had not opted in, and its
//! checkers would be deleted.
//!
//! Memory: the Ingresses of the watched scope, each Namespace's webchecker
//! annotations, and (name, UID, fingerprint) per generated checker.

use std::collections::{BTreeMap, HashMap};
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures::stream::{BoxStream, SelectAll};
use futures::{FutureExt, StreamExt};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::networking::v1::Ingress;
use kube::core::PartialObjectMeta;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client, ResourceExt};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tracing::{debug, info, warn};

use super::metrics::DiscoveryMetrics;
use super::queue::WorkQueue;
use super::writer::{Stopped, Work, Writer};
use super::{Defaults, FINGERPRINT_ANNOTATION, SOURCE_LABEL, ingress, patch};
use crate::api::WebChecker;
use crate::kubeio::client::{WATCH_TIMEOUT_SECS, WatchBackoff};
use crate::observe::metrics::Metrics;

/// Ingresses written at once.
pub const CONCURRENCY: usize = 8;
/// Every Ingress is looked at again this often (unchanged ones cost no API
/// call), so that drift nobody was told of (a missed event) heals.
const RESYNC: Duration = Duration::from_secs(300);
/// The prefix of the annotations kept of each Namespace.
const OUR_ANNOTATIONS: &str = "webchecker.test.network.io/";

/// An Ingress: (namespace, name).
type Key = (String, String);

/// One watch event, of whichever watch.
enum Change {
    Ingress(Event<Ingress>),
    Namespace(Event<PartialObjectMeta<Namespace>>),
    Checker(Event<PartialObjectMeta<WebChecker>>),
    Failed(&'static str, watcher::Error),
}

/// A generated checker as last seen.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Generated {
    uid: String,
    fingerprint: String,
}

pub struct Session {
    pub watches: Client,
    pub watch_namespace: Option<String>,
    pub writer: Arc<Writer>,
    pub metrics: Arc<Metrics>,
    pub discovery: Arc<DiscoveryMetrics>,
    pub defaults: Defaults,
}

type Ingresses = HashMap<Key, Arc<Ingress>>;
/// Namespace -> its annotations of ours.
type Namespaces = HashMap<String, BTreeMap<String, String>>;
/// Ingress UID -> checker name -> what it carries.
type GeneratedByOwner = HashMap<String, BTreeMap<String, Generated>>;

/// The views the watches keep, one map per watch, and what was said.
#[derive(Default)]
struct State {
    ingresses: Ingresses,
    namespaces: Namespaces,
    generated: GeneratedByOwner,
    /// Lists under way (a re-list replaces the map at its end).
    listing: (
        Option<Ingresses>,
        Option<Namespaces>,
        Option<GeneratedByOwner>,
    ),
    listed: [bool; 3],
    /// Ingress UID -> the problems last said (as Events) about it.
    said: HashMap<String, Vec<super::Problem>>,
    /// Ingress -> checkers it wants (for the gauge).
    wanted: HashMap<Key, usize>,
}

impl Session {
    /// Runs until a watch stream ends (it does not: the watchers retry).
    pub async fn run(self) {
        let mut streams = self.streams();
        let mut state = State::default();
        let mut queue: WorkQueue<Key> = WorkQueue::default();
        let mut work: JoinSet<(Key, bool)> = JoinSet::new();
        let mut resync = tokio::time::interval_at(Instant::now() + RESYNC, RESYNC);
        loop {
            if state.listed.iter().all(|l| *l) {
                self.start_work(&mut state, &mut queue, &mut work);
            }
            let retry = queue.next_retry().map(Instant::from_std);
            tokio::select! {
                change = streams.next() => match change {
                    Some(c) => self.take(c, &mut state, &mut queue),
                    None => return,
                },
                Some(done) = work.join_next(), if !work.is_empty() => {
                    // A panic is caught inside the task; a join error means it was aborted.
                    if let Ok((key, ok)) = done {
                        queue.done(key, ok, std::time::Instant::now());
                    }
                }
                _ = tokio::time::sleep_until(retry.unwrap_or_else(Instant::now)), if retry.is_some() => {
                    queue.due(std::time::Instant::now());
                }
                _ = resync.tick() => enqueue_all(&state, &mut queue),
            }
        }
    }

    fn streams(&self) -> SelectAll<BoxStream<'static, Change>> {
        let cfg = || watcher::Config::default().timeout(WATCH_TIMEOUT_SECS);
        // Namespaces and checkers: metadata only (a malformed checker cannot
        // stall the watch; a Namespace's annotations are all it needs).
        type Checkers = Api<PartialObjectMeta<WebChecker>>;
        let (ingresses, checkers): (Api<Ingress>, Checkers) = match &self.watch_namespace {
            Some(ns) => (
                Api::namespaced(self.watches.clone(), ns),
                Api::namespaced(self.watches.clone(), ns),
            ),
            None => (
                Api::all(self.watches.clone()),
                Api::all(self.watches.clone()),
            ),
        };
        // Only the watched Namespace, by name, when there is one.
        let ns_cfg = match &self.watch_namespace {
            Some(ns) => cfg().fields(&format!("metadata.name={ns}")),
            None => cfg(),
        };
        let namespaces: Api<PartialObjectMeta<Namespace>> = Api::all(self.watches.clone());
        let generated = cfg().labels(&format!("{SOURCE_LABEL}={}", ingress::LABEL));
        let mut all = SelectAll::new();
        all.push(
            watcher::watcher(ingresses, cfg())
                .backoff(WatchBackoff::default())
                .map(tagged("discovery-ingresses", Change::Ingress))
                .boxed(),
        );
        all.push(
            watcher::watcher(namespaces, ns_cfg)
                .backoff(WatchBackoff::default())
                .map(tagged("discovery-namespaces", Change::Namespace))
                .boxed(),
        );
        all.push(
            watcher::watcher(checkers, generated)
                .backoff(WatchBackoff::default())
                .map(tagged("discovery-checkers", Change::Checker))
                .boxed(),
        );
        all
    }

    /// Hands queued Ingresses to writers, up to [`CONCURRENCY`] at once.
    fn start_work(
        &self,
        state: &mut State,
        queue: &mut WorkQueue<Key>,
        work: &mut JoinSet<(Key, bool)>,
    ) {
        while queue.working() < CONCURRENCY {
            let Some(key) = queue.pop() else { return };
            let Some(w) = self.work_for(state, &key) else {
                queue.done(key, true, std::time::Instant::now());
                continue;
            };
            let writer = self.writer.clone();
            work.spawn(async move {
                let run = AssertUnwindSafe(writer.run(w)).catch_unwind().await;
                let ok = match run {
                    Ok(Ok(())) => true,
                    Ok(Err(Stopped::NotLeading)) => false,
                    Ok(Err(Stopped::Failed(why))) => {
                        debug!(namespace = %key.0, ingress = %key.1, why, "Ingress retried later");
                        false
                    }
                    Err(_) => {
                        warn!(namespace = %key.0, ingress = %key.1, "writing the checkers of an Ingress panicked (retried)");
                        false
                    }
                };
                (key, ok)
            });
        }
    }

    /// What the Ingress `key` needs written; None when nothing.
    fn work_for(&self, state: &mut State, key: &Key) -> Option<Work> {
        let ing = state.ingresses.get(key)?.clone();
        let empty = BTreeMap::new();
        let ns = state.namespaces.get(&key.0).unwrap_or(&empty);
        let plan = ingress::plan(&ing, ns, &self.defaults);
        for (what, why) in &plan.skipped {
            debug!(namespace = %key.0, ingress = %key.1, rule = %what, reason = ?why, "rule without a checker");
        }
        let source = ingress::source(&ing);
        let none = BTreeMap::new();
        let existing = state.generated.get(&source.uid).unwrap_or(&none);
        let apply: Vec<_> = plan
            .checkers
            .iter()
            .filter(|d| {
                existing.get(&d.name).map(|g| g.fingerprint.as_str())
                    != Some(patch::fingerprint(d, &source).as_str())
            })
            .cloned()
            .collect();
        let delete: Vec<(String, String)> = existing
            .iter()
            .filter(|(name, _)| !plan.checkers.iter().any(|d| &d.name == *name))
            .map(|(name, g)| (name.clone(), g.uid.clone()))
            .collect();
        let problems = match state.said.get(&source.uid) {
            Some(p) if *p == plan.problems => Vec::new(),
            _ => plan.problems.clone(),
        };
        state.said.insert(source.uid.clone(), plan.problems);
        state.wanted.insert(key.clone(), plan.checkers.len());
        self.discovery
            .generated
            .set(state.wanted.values().sum::<usize>() as i64);
        if apply.is_empty() && delete.is_empty() && problems.is_empty() {
            return None;
        }
        Some(Work {
            source,
            apply,
            delete,
            problems,
        })
    }

    fn take(&self, change: Change, state: &mut State, queue: &mut WorkQueue<Key>) {
        let was_listed = state.listed.iter().all(|l| *l);
        match change {
            Change::Ingress(ev) => on_ingress(ev, state, queue),
            Change::Namespace(ev) => on_namespace(ev, state, queue),
            Change::Checker(ev) => on_checker(ev, state, queue),
            Change::Failed(watch, e) => {
                self.metrics.watch_failed(watch, &e);
                warn!(watch, error = %e, "route discovery: watch failed (resumed with a backoff); it needs list and watch on ingresses, namespaces and webcheckers");
            }
        }
        if state.listed.iter().all(|l| *l) && !was_listed {
            info!(
                ingresses = state.ingresses.len(),
                "route discovery: Ingresses, Namespaces and generated checkers listed"
            );
            self.discovery.active.set(1);
            enqueue_all(state, queue);
        }
    }
}

/// Maps a watch's items to [`Change`]s, its errors named by `watch`.
fn tagged<T>(
    watch: &'static str,
    f: fn(Event<T>) -> Change,
) -> impl FnMut(Result<Event<T>, watcher::Error>) -> Change {
    move |r| match r {
        Ok(ev) => f(ev),
        Err(e) => Change::Failed(watch, e),
    }
}

fn enqueue_all(state: &State, queue: &mut WorkQueue<Key>) {
    let mut keys: Vec<&Key> = state.ingresses.keys().collect();
    keys.sort();
    for k in keys {
        queue.push(k.clone());
    }
}

fn key_of(ing: &Ingress) -> Key {
    (ing.namespace().unwrap_or_default(), ing.name_any())
}

fn on_ingress(ev: Event<Ingress>, state: &mut State, queue: &mut WorkQueue<Key>) {
    match ev {
        Event::Init => state.listing.0 = Some(HashMap::new()),
        Event::InitApply(i) => {
            let map = state.listing.0.get_or_insert_default();
            map.insert(key_of(&i), Arc::new(i));
        }
        Event::InitDone => {
            let fresh = state.listing.0.take().unwrap_or_default();
            for gone in state.ingresses.keys().filter(|k| !fresh.contains_key(*k)) {
                queue.forget(gone);
                state.wanted.remove(gone);
            }
            state.ingresses = fresh;
            state.listed[0] = true;
            enqueue_all(state, queue);
        }
        Event::Apply(i) => {
            let key = key_of(&i);
            state.ingresses.insert(key.clone(), Arc::new(i));
            queue.push(key);
        }
        Event::Delete(i) => {
            // Its checkers go with it: the garbage collector follows their
            // ownerReference.
            let key = key_of(&i);
            state.ingresses.remove(&key);
            state.wanted.remove(&key);
            if let Some(uid) = i.uid() {
                state.said.remove(&uid);
            }
            queue.forget(&key);
        }
    }
}

/// The annotations of ours on a Namespace (the others are not kept).
fn ours(meta: &PartialObjectMeta<Namespace>) -> BTreeMap<String, String> {
    meta.annotations()
        .iter()
        .filter(|(k, _)| k.starts_with(OUR_ANNOTATIONS))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

fn on_namespace(
    ev: Event<PartialObjectMeta<Namespace>>,
    state: &mut State,
    queue: &mut WorkQueue<Key>,
) {
    let changed = |state: &mut State, name: String, now: Option<BTreeMap<String, String>>| {
        let before = match now {
            Some(a) => state.namespaces.insert(name.clone(), a.clone()) != Some(a),
            None => state.namespaces.remove(&name).is_some(),
        };
        before.then_some(name)
    };
    let touched = match ev {
        Event::Init => {
            state.listing.1 = Some(HashMap::new());
            None
        }
        Event::InitApply(n) => {
            let map = state.listing.1.get_or_insert_default();
            map.insert(n.name_any(), ours(&n));
            None
        }
        Event::InitDone => {
            state.namespaces = state.listing.1.take().unwrap_or_default();
            state.listed[1] = true;
            enqueue_all(state, queue);
            None
        }
        Event::Apply(n) => changed(state, n.name_any(), Some(ours(&n))),
        Event::Delete(n) => changed(state, n.name_any(), None),
    };
    if let Some(ns) = touched {
        let mut keys: Vec<Key> = state
            .ingresses
            .keys()
            .filter(|(n, _)| *n == ns)
            .cloned()
            .collect();
        keys.sort();
        for k in keys {
            queue.push(k);
        }
    }
}

/// The Ingress that owns a generated checker: (its key, its UID).
fn owner(meta: &PartialObjectMeta<WebChecker>) -> Option<(Key, String)> {
    let r = meta
        .owner_references()
        .iter()
        .find(|r| r.kind == "Ingress" && r.api_version.starts_with("networking.k8s.io/"))?;
    Some((
        (meta.namespace().unwrap_or_default(), r.name.clone()),
        r.uid.clone(),
    ))
}

fn generated(meta: &PartialObjectMeta<WebChecker>) -> Generated {
    Generated {
        uid: meta.uid().unwrap_or_default(),
        fingerprint: meta
            .annotations()
            .get(FINGERPRINT_ANNOTATION)
            .cloned()
            .unwrap_or_default(),
    }
}

fn on_checker(
    ev: Event<PartialObjectMeta<WebChecker>>,
    state: &mut State,
    queue: &mut WorkQueue<Key>,
) {
    match ev {
        Event::Init => state.listing.2 = Some(HashMap::new()),
        Event::InitApply(c) => {
            if let Some((_, uid)) = owner(&c) {
                let map = state.listing.2.get_or_insert_default();
                map.entry(uid)
                    .or_default()
                    .insert(c.name_any(), generated(&c));
            }
        }
        Event::InitDone => {
            state.generated = state.listing.2.take().unwrap_or_default();
            state.listed[2] = true;
            enqueue_all(state, queue);
        }
        Event::Apply(c) => {
            let Some((key, uid)) = owner(&c) else { return };
            let now = generated(&c);
            let before = state
                .generated
                .entry(uid)
                .or_default()
                .insert(c.name_any(), now.clone());
            // A status write changes neither: no work for it.
            if before != Some(now) {
                queue.push(key);
            }
        }
        Event::Delete(c) => {
            let Some((key, uid)) = owner(&c) else { return };
            if let Some(of) = state.generated.get_mut(&uid) {
                of.remove(&c.name_any());
                if of.is_empty() {
                    state.generated.remove(&uid);
                }
            }
            // Deleted by hand while its source still wants it: made again.
            queue.push(key);
        }
    }
}
