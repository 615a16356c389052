//! Publishes Events as kube's recorder does (events.k8s.io/v1; the same
//! Event again within [`SERIES_WINDOW`] becomes a series on the first), but
//! remembers what it published as a hash, the Event's name, a count and a
//! time: a replica publishes an Event for every checker it brings up, and
//! kube's recorder keeps each whole Event (about 1 KiB) for the window and
//! scans them all at every publish.

use std::collections::hash_map::RandomState;
use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasher, Hash, Hasher};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event as K8sEvent;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::events::{Event, EventType, Reporter};
use kube::{Api, Client};
use serde_json::json;

/// How long an Event stays the one a repeat adds to (kube's recorder's).
pub const SERIES_WINDOW: Duration = Duration::from_secs(6 * 60);

#[derive(Clone)]
pub struct Recorder {
    client: Client,
    reporter: Reporter,
    published: Arc<Mutex<Published>>,
}

impl Recorder {
    pub fn new(client: Client, reporter: Reporter) -> Self {
        Recorder {
            client,
            reporter,
            published: Arc::default(),
        }
    }

    /// Publishes `ev` about `regarding`, in its namespace (`default` for an
    /// object without one).
    pub async fn publish(
        &self,
        ev: &Event,
        regarding: &ObjectReference,
    ) -> Result<(), kube::Error> {
        let key = self.key_of(ev, regarding);
        let namespace = regarding.namespace.as_deref().unwrap_or("default");
        let events: Api<K8sEvent> = Api::namespaced(self.client.clone(), namespace);
        let now = Timestamp::now();
        let repeat = self.published().repeat(key, Instant::now());
        if let Some((name, count)) = repeat {
            let series = json!({"series": {"count": count, "lastObservedTime": MicroTime(now)}});
            match events
                .patch(&name, &PatchParams::default(), &Patch::Merge(&series))
                .await
            {
                Ok(_) => return Ok(()),
                // Gone meanwhile (the API server's Event TTL): a new one.
                Err(kube::Error::Api(e)) if e.code == 404 => {}
                Err(e) => return Err(e),
            }
        }
        let event = self.event(ev, regarding, now);
        let name = event.metadata.name.clone().unwrap_or_default();
        events.create(&PostParams::default(), &event).await?;
        self.published().first(key, name, Instant::now());
        Ok(())
    }

    fn published(&self) -> std::sync::MutexGuard<'_, Published> {
        self.published.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// What makes two Events the same (kube's recorder's key): type,
    /// action, reason, reporter, the object and the related one.
    fn key_of(&self, ev: &Event, regarding: &ObjectReference) -> u64 {
        let mut h = self.published().hasher.build_hasher();
        let reference = |r: &ObjectReference, h: &mut std::hash::DefaultHasher| {
            (&r.api_version, &r.kind, &r.name, &r.namespace, &r.uid).hash(h)
        };
        (ev.type_ == EventType::Warning, &ev.action, &ev.reason).hash(&mut h);
        (&self.reporter.controller, &self.reporter.instance).hash(&mut h);
        reference(regarding, &mut h);
        match &ev.secondary {
            Some(r) => reference(r, &mut h),
            None => 0u8.hash(&mut h),
        }
        h.finish()
    }

    fn event(&self, ev: &Event, regarding: &ObjectReference, now: Timestamp) -> K8sEvent {
        let named = regarding
            .name
            .as_deref()
            .unwrap_or(&self.reporter.controller);
        let reporter = &self.reporter;
        K8sEvent {
            action: Some(ev.action.clone()),
            reason: Some(ev.reason.clone()),
            event_time: Some(MicroTime(now)),
            regarding: Some(regarding.clone()),
            related: ev.secondary.clone(),
            note: ev.note.clone(),
            metadata: ObjectMeta {
                namespace: regarding.namespace.clone(),
                name: Some(format!("{named}.{:x}", now.as_nanosecond())),
                ..Default::default()
            },
            reporting_controller: Some(reporter.controller.clone()),
            reporting_instance: Some(
                reporter
                    .instance
                    .clone()
                    .unwrap_or_else(|| reporter.controller.clone()),
            ),
            type_: Some(
                match ev.type_ {
                    EventType::Normal => "Normal",
                    EventType::Warning => "Warning",
                }
                .into(),
            ),
            ..Default::default()
        }
    }
}

/// The Events published within the window, by key.
struct Published {
    hasher: RandomState,
    by_key: HashMap<u64, Seen>,
    /// (when, key) in publishing order: what leaves the window first.
    order: VecDeque<(Instant, u64)>,
}

impl Default for Published {
    fn default() -> Self {
        Published {
            hasher: RandomState::new(),
            by_key: HashMap::new(),
            order: VecDeque::new(),
        }
    }
}

struct Seen {
    name: Box<str>,
    count: i32,
    at: Instant,
}

impl Published {
    /// The Event `key` adds to, and its series count with this one, if it
    /// was published within the window.
    fn repeat(&mut self, key: u64, now: Instant) -> Option<(String, i32)> {
        self.forget_before(now);
        let seen = self.by_key.get_mut(&key)?;
        seen.count += 1;
        seen.at = now;
        self.order.push_back((now, key));
        Some((seen.name.to_string(), seen.count))
    }

    /// `key` was published as a new Event named `name`.
    fn first(&mut self, key: u64, name: String, now: Instant) {
        self.forget_before(now);
        let name = name.into_boxed_str();
        self.by_key.insert(
            key,
            Seen {
                name,
                count: 1,
                at: now,
            },
        );
        self.order.push_back((now, key));
    }

    fn forget_before(&mut self, now: Instant) {
        while let Some(&(at, key)) = self.order.front() {
            if now.saturating_duration_since(at) < SERIES_WINDOW {
                break;
            }
            self.order.pop_front();
            // A repeat since moved it to the back: it stays.
            if self.by_key.get(&key).is_some_and(|s| s.at == at) {
                self.by_key.remove(&key);
            }
        }
        crate::shrink_if_sparse(&mut self.by_key);
        crate::shrink_if_sparse(&mut self.order);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_repeat_within_the_window_adds_to_the_first_event_and_counts_from_two() {
        let mut p = Published::default();
        let t0 = Instant::now();
        assert_eq!(p.repeat(7, t0), None);
        p.first(7, "web.1".into(), t0);
        assert_eq!(
            p.repeat(7, t0 + Duration::from_secs(1)),
            Some(("web.1".into(), 2))
        );
        assert_eq!(
            p.repeat(7, t0 + Duration::from_secs(2)),
            Some(("web.1".into(), 3))
        );
        assert_eq!(
            p.repeat(8, t0 + Duration::from_secs(2)),
            None,
            "another key"
        );
    }

    #[test]
    fn the_window_runs_from_the_last_repeat_and_then_the_event_is_forgotten() {
        let mut p = Published::default();
        let t0 = Instant::now();
        p.first(1, "a.1".into(), t0);
        p.first(2, "b.1".into(), t0);
        let later = t0 + SERIES_WINDOW - Duration::from_secs(1);
        assert_eq!(p.repeat(1, later), Some(("a.1".into(), 2)));
        let past = t0 + SERIES_WINDOW + Duration::from_secs(1);
        assert_eq!(p.repeat(2, past), None, "b's window ended");
        assert_eq!(
            p.repeat(1, past),
            Some(("a.1".into(), 3)),
            "a's runs from its repeat"
        );
        assert_eq!(p.by_key.len(), 1);
        let gone = later + SERIES_WINDOW + Duration::from_secs(5);
        assert_eq!(p.repeat(1, gone + SERIES_WINDOW), None);
        assert!(p.by_key.is_empty() && p.order.is_empty());
    }
}
