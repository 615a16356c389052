//! Kubernetes Events: queued by the engine without waiting and published by
//! one task, each namespace in turn (`queue`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::ObjectReference;
use tokio::sync::Notify;

use kube::runtime::events::{Event as KubeEvent, EventType};
use prometheus::{IntCounter, IntCounterVec, Registry};
use tracing::{debug, warn};

use crate::observe::metrics::family::{Family, counter, counter_vec};
use queue::EventQueue;
pub use recorder::Recorder;

pub(crate) mod queue;
mod recorder;

/// Events waiting for the publisher, all namespaces together.
pub const EVENT_QUEUE: usize = 1024;

/// An Event and the object it is about.
type Pending = (ObjectReference, KubeEvent);

const EVENTS: Family = ("webchecker_events_total", "Kubernetes Events emitted");
const EVENTS_DROPPED: Family = (
    "webchecker_events_dropped_total",
    "Kubernetes Events not emitted because the queue to the API server was full",
);

/// Events published, by type and reason, and those the queue gave up.
pub struct EventMetrics {
    pub published: IntCounterVec,
    pub dropped: IntCounter,
}

impl EventMetrics {
    pub fn register(r: &Registry) -> Self {
        EventMetrics {
            published: counter_vec(r, EVENTS, &["type", "reason"], &[]),
            dropped: counter(r, EVENTS_DROPPED),
        }
    }
}

/// The queue shared by the engine and the publisher. The lock is held only
/// to push or pop, never across an await, so the engine never waits on the
/// API server.
struct Shared {
    queue: Mutex<EventQueue<Pending>>,
    ready: Notify,
    closed: AtomicBool,
    metrics: Arc<EventMetrics>,
}

impl Shared {
    fn queue(&self) -> std::sync::MutexGuard<'_, EventQueue<Pending>> {
        // A panic while holding it leaves the queue consistent (each
        // operation completes or changes nothing).
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The engine's end: pushes without waiting.
pub struct EventSender(Arc<Shared>);

/// The publisher's end.
pub struct EventReceiver(Arc<Shared>);

/// A bounded Event queue with a per-namespace share of `capacity`.
pub fn event_queue(capacity: usize, metrics: Arc<EventMetrics>) -> (EventSender, EventReceiver) {
    let shared = Arc::new(Shared {
        queue: Mutex::new(EventQueue::new(capacity)),
        ready: Notify::new(),
        closed: AtomicBool::new(false),
        metrics,
    });
    (EventSender(shared.clone()), EventReceiver(shared))
}

impl EventSender {
    /// Queues an Event of namespace `ns` without waiting: when the API
    /// server is slower than the transitions (an overload, a flood of new
    /// checkers), Events are the first thing to give up, and the namespace
    /// with the most waiting gives them up first. Drops are counted; the log
    /// names the namespace that lost one once per 1,000.
    pub(crate) fn push(&self, ns: &str, item: Pending) {
        let loser = self.0.queue().push(ns, item);
        // A permit is kept when the publisher is not waiting yet: no lost wake-up.
        self.0.ready.notify_one();
        if let Some(loser) = loser {
            let counter = &self.0.metrics.dropped;
            counter.inc();
            let dropped = counter.get();
            if dropped % 1000 == 1 {
                warn!(namespace = %loser, dropped, "event queue full; the namespace with the most Events waiting lost one (webchecker_events_dropped_total)");
            }
        }
    }
}

impl Drop for EventSender {
    /// The engine is gone: the publisher ends once the queue is empty.
    fn drop(&mut self) {
        self.0.closed.store(true, Ordering::SeqCst);
        self.0.ready.notify_one();
    }
}

impl EventReceiver {
    async fn next(&self) -> Option<Pending> {
        loop {
            if let Some((_, p)) = self.0.queue().pop() {
                return Some(p);
            }
            if self.0.closed.load(Ordering::SeqCst) {
                return None;
            }
            self.0.ready.notified().await;
        }
    }
}

/// Whether an Event may go to the object it is about. The wiring passes
/// discovery's rule (`crate::discovery::route_events::may_hear`): an Event
/// on a generated checker's route goes out only when that route exists with
/// the UID the checker names, so a checker cannot write on a route of its
/// choosing.
pub type Audience = Arc<dyn Fn(ObjectReference) -> BoxFuture<'static, bool> + Send + Sync>;

/// Publishes the queued Events, one namespace after another, until the
/// engine is gone, each only where `audience` allows.
pub async fn run_events(recorder: Recorder, rx: EventReceiver, audience: Audience) {
    while let Some((reference, ev)) = rx.next().await {
        if !audience(reference.clone()).await {
            debug!(
                kind = reference.kind.as_deref().unwrap_or_default(),
                name = reference.name.as_deref().unwrap_or_default(),
                "no Event on a route that is not the one its checker names"
            );
            continue;
        }
        match recorder.publish(&ev, &reference).await {
            Ok(()) => {
                let type_ = match ev.type_ {
                    EventType::Normal => "Normal",
                    EventType::Warning => "Warning",
                };
                rx.0.metrics
                    .published
                    .with_label_values(&[type_, &ev.reason])
                    .inc();
            }
            Err(e) => debug!(error = %e, "event not published"),
        }
    }
}
