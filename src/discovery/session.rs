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

use std::collections::BTreeMap;
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
use kube::{Api, Client};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tracing::{debug, info, warn};

use super::metrics::DiscoveryMetrics;
use super::queue::WorkQueue;
use super::views::{Change, Key, State, enqueue_all, on_checker, on_ingress, on_namespace};
use super::writer::{Stopped, Work, Writer};
use super::{Defaults, SOURCE_LABEL, ingress, patch};
use crate::api::WebChecker;
use crate::kubeio::client::{WATCH_TIMEOUT_SECS, WatchBackoff};
use crate::observe::metrics::Metrics;

/// Ingresses written at once.
pub const CONCURRENCY: usize = 8;
/// Every Ingress is looked at again this often (unchanged ones cost no API
/// call), so that drift nobody was told of (a missed event) heals.
const RESYNC: Duration = Duration::from_secs(300);

pub struct Session {
    pub watches: Client,
    pub watch_namespace: Option<String>,
    pub writer: Arc<Writer>,
    pub metrics: Arc<Metrics>,
    pub discovery: Arc<DiscoveryMetrics>,
    pub defaults: Defaults,
}

/// The watches, as named in logs and in `webchecker_watch_restarts_total`.
const INGRESSES: &str = "discovery-ingresses";
const NAMESPACES: &str = "discovery-namespaces";
const CHECKERS: &str = "discovery-checkers";

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
                .map(tagged(INGRESSES, Change::Ingress))
                .boxed(),
        );
        all.push(
            watcher::watcher(namespaces, ns_cfg)
                .backoff(WatchBackoff::default())
                .map(tagged(NAMESPACES, Change::Namespace))
                .boxed(),
        );
        all.push(
            watcher::watcher(checkers, generated)
                .backoff(WatchBackoff::default())
                .map(tagged(CHECKERS, Change::Checker))
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
        state.want(key, plan.checkers.len());
        self.discovery.generated.set(state.wanted_total as i64);
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
        let watch = match &change {
            Change::Ingress(_) => INGRESSES,
            Change::Namespace(_) => NAMESPACES,
            Change::Checker(_) => CHECKERS,
            Change::Failed(w, _) => w,
        };
        match change {
            Change::Ingress(ev) => on_ingress(ev, state, queue),
            Change::Namespace(ev) => on_namespace(ev, state, queue),
            Change::Checker(ev) => on_checker(ev, state, queue),
            Change::Failed(watch, e) => {
                self.metrics.watch_failed(watch, &e);
                // Once per run of failures: a refused watch retries every 2 s.
                if state.failing.contains(&watch) {
                    debug!(watch, error = %e, "route discovery: watch still failing");
                } else {
                    state.failing.push(watch);
                    warn!(watch, error = %e, "route discovery: watch failed (resumed with a backoff); it needs list and watch on ingresses, namespaces and webcheckers");
                }
                return;
            }
        }
        if let Some(i) = state.failing.iter().position(|w| *w == watch) {
            state.failing.swap_remove(i);
            info!(watch, "route discovery: watch works again");
        }
        self.discovery.generated.set(state.wanted_total as i64);
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
