//! What discovery's watches keep while this replica leads, and which
//! Ingresses each watch event makes work for: the Ingresses, each
//! Namespace's annotations of ours, and (name, UID, fingerprint) per
//! generated checker by its owner's UID. A re-list replaces a map at its
//! end, never leaving it half filled.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::networking::v1::Ingress;
use kube::ResourceExt;
use kube::core::PartialObjectMeta;
use kube::runtime::watcher::{self, Event};

use super::queue::WorkQueue;
use super::{FINGERPRINT_ANNOTATION, Problem};
use crate::api::WebChecker;

/// The prefix of the annotations kept of each Namespace.
const OUR_ANNOTATIONS: &str = "webchecker.test.network.io/";

/// An Ingress: (namespace, name).
pub(super) type Key = (String, String);

/// One watch event, of whichever watch.
pub(super) enum Change {
    Ingress(Event<Ingress>),
    Namespace(Event<PartialObjectMeta<Namespace>>),
    Checker(Event<PartialObjectMeta<WebChecker>>),
    Failed(&'static str, watcher::Error),
}

/// A generated checker as last seen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Generated {
    pub(super) uid: String,
    pub(super) fingerprint: String,
}

pub(super) type Ingresses = HashMap<Key, Arc<Ingress>>;
/// Namespace -> its annotations of ours.
pub(super) type Namespaces = HashMap<String, BTreeMap<String, String>>;
/// Ingress UID -> checker name -> what it carries.
pub(super) type GeneratedByOwner = HashMap<String, BTreeMap<String, Generated>>;
/// (namespace, checker name) -> owner UID.
pub(super) type OwnerOf = HashMap<Key, String>;

/// The views the watches keep, one map per watch, and what was said.
#[derive(Default)]
pub(super) struct State {
    pub(super) ingresses: Ingresses,
    pub(super) namespaces: Namespaces,
    pub(super) generated: GeneratedByOwner,
    /// A generated checker -> the UID of its owner in `generated` (an
    /// Ingress deleted and made again adopts its checkers: they move).
    pub(super) owner_of: OwnerOf,
    /// Lists under way (a re-list replaces the map at its end).
    pub(super) listing: (
        Option<Ingresses>,
        Option<Namespaces>,
        Option<(GeneratedByOwner, OwnerOf)>,
    ),
    pub(super) listed: [bool; 3],
    /// Ingress UID -> the problems last said (as Events) about it.
    pub(super) said: HashMap<String, Vec<Problem>>,
    /// Ingress -> checkers it wants (for the gauge).
    pub(super) wanted: HashMap<Key, usize>,
    pub(super) wanted_total: usize,
    /// Watches failing since their last event.
    pub(super) failing: Vec<&'static str>,
}

impl State {
    pub(super) fn want(&mut self, key: &Key, n: usize) {
        let before = self.wanted.insert(key.clone(), n).unwrap_or(0);
        self.wanted_total = self.wanted_total + n - before;
    }

    pub(super) fn unwant(&mut self, key: &Key) {
        if let Some(n) = self.wanted.remove(key) {
            self.wanted_total -= n;
        }
    }
}

pub(super) fn enqueue_all(state: &State, queue: &mut WorkQueue<Key>) {
    let mut keys: Vec<&Key> = state.ingresses.keys().collect();
    keys.sort();
    for k in keys {
        queue.push(k.clone());
    }
}

fn key_of(ing: &Ingress) -> Key {
    (ing.namespace().unwrap_or_default(), ing.name_any())
}

pub(super) fn on_ingress(ev: Event<Ingress>, state: &mut State, queue: &mut WorkQueue<Key>) {
    match ev {
        Event::Init => state.listing.0 = Some(HashMap::new()),
        Event::InitApply(i) => {
            let map = state.listing.0.get_or_insert_default();
            map.insert(key_of(&i), Arc::new(i));
        }
        Event::InitDone => {
            let fresh = state.listing.0.take().unwrap_or_default();
            let gone: Vec<Key> = state
                .ingresses
                .keys()
                .filter(|k| !fresh.contains_key(*k))
                .cloned()
                .collect();
            for k in &gone {
                queue.forget(k);
                state.unwant(k);
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
            state.unwant(&key);
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

pub(super) fn on_namespace(
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

fn checker_key(meta: &PartialObjectMeta<WebChecker>) -> Key {
    (meta.namespace().unwrap_or_default(), meta.name_any())
}

fn forget_checker(state: &mut State, owner_uid: &str, name: &str) {
    if let Some(of) = state.generated.get_mut(owner_uid) {
        of.remove(name);
        if of.is_empty() {
            state.generated.remove(owner_uid);
        }
    }
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

pub(super) fn on_checker(
    ev: Event<PartialObjectMeta<WebChecker>>,
    state: &mut State,
    queue: &mut WorkQueue<Key>,
) {
    match ev {
        Event::Init => state.listing.2 = Some(Default::default()),
        Event::InitApply(c) => {
            if let Some((_, uid)) = owner(&c) {
                let (by_owner, owner_of) = state.listing.2.get_or_insert_default();
                owner_of.insert(checker_key(&c), uid.clone());
                by_owner
                    .entry(uid)
                    .or_default()
                    .insert(c.name_any(), generated(&c));
            }
        }
        Event::InitDone => {
            (state.generated, state.owner_of) = state.listing.2.take().unwrap_or_default();
            state.listed[2] = true;
            enqueue_all(state, queue);
        }
        Event::Apply(c) => {
            let Some((key, uid)) = owner(&c) else { return };
            let now = generated(&c);
            let moved = state.owner_of.insert(checker_key(&c), uid.clone());
            if let Some(old) = moved.filter(|old| *old != uid) {
                forget_checker(state, &old, &c.name_any());
            }
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
            let Some((key, _)) = owner(&c) else { return };
            if let Some(uid) = state.owner_of.remove(&checker_key(&c)) {
                forget_checker(state, &uid, &c.name_any());
            }
            // Deleted by hand while its source still wants it: made again.
            queue.push(key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

    fn ing(ns: &str, name: &str) -> Ingress {
        Ingress {
            metadata: ObjectMeta {
                namespace: Some(ns.into()),
                name: Some(name.into()),
                uid: Some(format!("uid-{name}")),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    fn meta<K>(ns: &str, name: &str, annotations: &[(&str, &str)]) -> PartialObjectMeta<K> {
        use kube::core::PartialObjectMetaExt;
        ObjectMeta {
            namespace: (!ns.is_empty()).then(|| ns.to_string()),
            name: Some(name.into()),
            uid: Some(format!("uid-{name}")),
            annotations: Some(
                annotations
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
            ..Default::default()
        }
        .into_response_partial()
    }

    fn checker(name: &str, owner: &str) -> PartialObjectMeta<WebChecker> {
        let mut m = meta(
            "web",
            name,
            &[(FINGERPRINT_ANNOTATION, "f1"), ("other.io/x", "y")],
        );
        m.metadata.owner_references = Some(vec![OwnerReference {
            api_version: "networking.k8s.io/v1".into(),
            kind: "Ingress".into(),
            name: owner.into(),
            uid: format!("uid-{owner}"),
            ..Default::default()
        }]);
        m
    }

    fn drain(q: &mut WorkQueue<Key>) -> Vec<String> {
        let mut out = Vec::new();
        while let Some(k) = q.pop() {
            out.push(k.1.clone());
            q.done(k, true, std::time::Instant::now());
        }
        out
    }

    fn listed() -> (State, WorkQueue<Key>) {
        let (mut s, mut q) = (State::default(), WorkQueue::default());
        on_ingress(Event::Init, &mut s, &mut q);
        for (ns, n) in [("web", "a"), ("web", "b"), ("shop", "c")] {
            on_ingress(Event::InitApply(ing(ns, n)), &mut s, &mut q);
        }
        on_ingress(Event::InitDone, &mut s, &mut q);
        on_namespace(Event::Init, &mut s, &mut q);
        let web = meta::<Namespace>("", "web", &[("team", "y")]);
        on_namespace(Event::InitApply(web), &mut s, &mut q);
        on_namespace(Event::InitDone, &mut s, &mut q);
        on_checker(Event::InitDone, &mut s, &mut q);
        drain(&mut q);
        (s, q)
    }

    #[test]
    fn a_namespace_annotation_makes_work_for_its_ingresses_only() {
        let (mut s, mut q) = listed();
        let ns = |a: &[(&str, &str)]| Event::Apply(meta::<Namespace>("", "web", a));
        on_namespace(ns(&[("team", "x")]), &mut s, &mut q);
        assert_eq!(drain(&mut q), Vec::<String>::new(), "not ours: no work");
        on_namespace(
            ns(&[(super::super::annotations::CHECK, "true")]),
            &mut s,
            &mut q,
        );
        assert_eq!(drain(&mut q), ["a", "b"]);
        on_namespace(
            ns(&[(super::super::annotations::CHECK, "true")]),
            &mut s,
            &mut q,
        );
        assert_eq!(drain(&mut q), Vec::<String>::new(), "unchanged: no work");
    }

    #[test]
    fn a_status_write_makes_no_work_and_an_adopted_checker_moves() {
        let (mut s, mut q) = listed();
        on_checker(Event::Apply(checker("a-x", "a")), &mut s, &mut q);
        assert_eq!(drain(&mut q), ["a"]);
        on_checker(Event::Apply(checker("a-x", "a")), &mut s, &mut q);
        assert_eq!(drain(&mut q), Vec::<String>::new());
        // The Ingress was made again (a new UID) and adopted its checker.
        let mut adopted = checker("a-x", "a");
        adopted.metadata.owner_references.as_mut().unwrap()[0].uid = "uid-a2".into();
        on_checker(Event::Apply(adopted.clone()), &mut s, &mut q);
        assert!(!s.generated.contains_key("uid-a"), "{:?}", s.generated);
        assert_eq!(s.generated["uid-a2"]["a-x"].fingerprint, "f1");
        on_checker(Event::Delete(adopted), &mut s, &mut q);
        assert_eq!(drain(&mut q), ["a"], "made again if still wanted");
        assert!(s.generated.is_empty() && s.owner_of.is_empty());
    }

    #[test]
    fn a_relist_replaces_the_ingresses_at_its_end() {
        let (mut s, mut q) = listed();
        s.want(&("web".into(), "a".into()), 2);
        on_ingress(Event::Init, &mut s, &mut q);
        on_ingress(Event::InitApply(ing("web", "b")), &mut s, &mut q);
        assert_eq!(s.ingresses.len(), 3, "unchanged until the list ends");
        on_ingress(Event::InitDone, &mut s, &mut q);
        assert_eq!(s.ingresses.len(), 1);
        assert_eq!(s.wanted_total, 0, "a's checkers are no longer counted");
        assert_eq!(drain(&mut q), ["b"]);
    }
}
