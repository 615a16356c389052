//! What discovery's watches keep while this replica leads, and which source
//! objects each watch event makes work for: the Ingresses, the HTTPRoutes,
//! the GRPCRoutes and the Gateways they name, the Services (trimmed to what
//! a plan reads), each Namespace's annotations of ours, and (name, UID,
//! fingerprint) per generated checker by its owner's UID. A re-list
//! replaces a map at its end, never leaving it half filled.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Namespace, Service};
use k8s_openapi::api::networking::v1::Ingress;
use kube::ResourceExt;
use kube::core::PartialObjectMeta;
use kube::runtime::watcher::{self, Event};

use super::gateway_api::{GRPCRoute, Gateway, HTTPRoute, ParentRef};
use super::queue::WorkQueue;
use super::{FINGERPRINT_ANNOTATION, Problem};
use crate::api::WebChecker;

/// The kinds of source objects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(super) enum Kind {
    Ingress,
    HttpRoute,
    GrpcRoute,
    Service,
}

/// An object of a namespace: (namespace, name).
pub(super) type NsName = (String, String);
/// A source object: (kind, namespace, name).
pub(super) type Key = (Kind, String, String);

/// One watch event, of whichever watch.
pub(super) enum Change {
    Ingress(Event<Ingress>),
    Route(Event<HTTPRoute>),
    GrpcRoute(Event<GRPCRoute>),
    Gateway(Event<Gateway>),
    /// Boxed: a Service is the largest of them.
    Service(Box<Event<Service>>),
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

/// The objects of one watch by (namespace, name), and the list under way.
pub(super) struct Objects<T> {
    pub(super) map: HashMap<NsName, Arc<T>>,
    listing: Option<HashMap<NsName, Arc<T>>>,
    pub(super) listed: bool,
}

impl<T> Default for Objects<T> {
    fn default() -> Self {
        Objects {
            map: HashMap::new(),
            listing: None,
            listed: false,
        }
    }
}

/// What one event did to an [`Objects`].
pub(super) enum Taken<T> {
    /// Nothing to act on yet (a list under way).
    Nothing,
    /// A list ended: the objects it no longer has.
    Listed(Vec<NsName>),
    Applied(NsName),
    Deleted(NsName, T),
}

impl<T: kube::Resource> Objects<T> {
    pub(super) fn take(&mut self, ev: Event<T>) -> Taken<T> {
        let key = |o: &T| (o.namespace().unwrap_or_default(), o.name_any());
        match ev {
            Event::Init => {
                self.listing = Some(HashMap::new());
                Taken::Nothing
            }
            Event::InitApply(o) => {
                let map = self.listing.get_or_insert_default();
                map.insert(key(&o), Arc::new(o));
                Taken::Nothing
            }
            Event::InitDone => {
                let fresh = self.listing.take().unwrap_or_default();
                let gone = self
                    .map
                    .keys()
                    .filter(|k| !fresh.contains_key(*k))
                    .cloned()
                    .collect();
                self.map = fresh;
                self.listed = true;
                Taken::Listed(gone)
            }
            Event::Apply(o) => {
                let k = key(&o);
                self.map.insert(k.clone(), Arc::new(o));
                Taken::Applied(k)
            }
            Event::Delete(o) => {
                let k = key(&o);
                self.map.remove(&k);
                Taken::Deleted(k, o)
            }
        }
    }
}

/// Namespace -> its annotations of ours.
pub(super) type Namespaces = HashMap<String, BTreeMap<String, String>>;
/// Source UID -> checker name -> what it carries.
pub(super) type GeneratedByOwner = HashMap<String, BTreeMap<String, Generated>>;
/// (namespace, checker name) -> owner UID.
pub(super) type OwnerOf = HashMap<NsName, String>;

/// The views the watches keep, one per watch, and what was said.
#[derive(Default)]
pub(super) struct State {
    pub(super) ingresses: Objects<Ingress>,
    pub(super) routes: Objects<HTTPRoute>,
    pub(super) grpc_routes: Objects<GRPCRoute>,
    pub(super) gateways: Objects<Gateway>,
    pub(super) services: Objects<Service>,
    pub(super) namespaces: Namespaces,
    pub(super) generated: GeneratedByOwner,
    /// A generated checker -> the UID of its owner in `generated` (a source
    /// deleted and made again adopts its checkers: they move).
    pub(super) owner_of: OwnerOf,
    /// Lists under way (a re-list replaces the map at its end).
    pub(super) listing: (Option<Namespaces>, Option<(GeneratedByOwner, OwnerOf)>),
    /// Namespaces and checkers listed.
    pub(super) listed: [bool; 2],
    /// Source UID -> the problems last said (as Events) about it.
    pub(super) said: HashMap<String, Vec<Problem>>,
    /// Source -> checkers it wants (for the gauge).
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

    /// Whether the sources of `kind` may be reconciled: their watches (and
    /// a Gateway API route's Gateways), the Namespaces and the checkers listed. A
    /// Namespace not listed yet would look as if it had not opted in.
    pub(super) fn ready(&self, kind: Kind) -> bool {
        self.listed.iter().all(|l| *l)
            && match kind {
                Kind::Ingress => self.ingresses.listed,
                Kind::HttpRoute => self.routes.listed && self.gateways.listed,
                Kind::GrpcRoute => self.grpc_routes.listed && self.gateways.listed,
                Kind::Service => self.services.listed,
            }
    }

    /// The source objects of `ns` (all with None), sorted.
    fn keys_in(&self, ns: Option<&str>) -> Vec<Key> {
        let of = |kind: Kind, keys: &mut dyn Iterator<Item = &NsName>| -> Vec<Key> {
            keys.filter(|(n, _)| ns.is_none_or(|want| n == want))
                .map(|(n, name)| (kind, n.clone(), name.clone()))
                .collect()
        };
        let mut keys = of(Kind::Ingress, &mut self.ingresses.map.keys());
        keys.extend(of(Kind::HttpRoute, &mut self.routes.map.keys()));
        keys.extend(of(Kind::GrpcRoute, &mut self.grpc_routes.map.keys()));
        keys.extend(of(Kind::Service, &mut self.services.map.keys()));
        keys.sort();
        keys
    }
}

/// Queues every source object (those of a kind not ready yet are dropped
/// when popped, and queued again when it is).
pub(super) fn enqueue_all(state: &State, queue: &mut WorkQueue<Key>) {
    for k in state.keys_in(None) {
        queue.push(k);
    }
}

/// An event of the watch of a kind of source object.
fn on_source<T: kube::Resource>(
    kind: Kind,
    taken: Taken<T>,
    state: &mut State,
    queue: &mut WorkQueue<Key>,
) {
    let key = |(ns, name): NsName| (kind, ns, name);
    match taken {
        Taken::Nothing => {}
        Taken::Listed(gone) => {
            for k in gone.into_iter().map(key) {
                queue.forget(&k);
                state.unwant(&k);
            }
            enqueue_all(state, queue);
        }
        Taken::Applied(k) => queue.push(key(k)),
        Taken::Deleted(k, o) => {
            // Its checkers go with it: the garbage collector follows their
            // ownerReference.
            let k = key(k);
            state.unwant(&k);
            if let Some(uid) = o.meta().uid.as_ref() {
                state.said.remove(uid);
            }
            queue.forget(&k);
        }
    }
}

pub(super) fn on_ingress(ev: Event<Ingress>, state: &mut State, queue: &mut WorkQueue<Key>) {
    let taken = state.ingresses.take(ev);
    on_source(Kind::Ingress, taken, state, queue);
}

pub(super) fn on_route(ev: Event<HTTPRoute>, state: &mut State, queue: &mut WorkQueue<Key>) {
    let taken = state.routes.take(ev);
    on_source(Kind::HttpRoute, taken, state, queue);
}

pub(super) fn on_grpc_route(ev: Event<GRPCRoute>, state: &mut State, queue: &mut WorkQueue<Key>) {
    let taken = state.grpc_routes.take(ev);
    on_source(Kind::GrpcRoute, taken, state, queue);
}

/// An event of the Services' watch (trimmed by the watch, `service::trim`).
pub(super) fn on_service(ev: Event<Service>, state: &mut State, queue: &mut WorkQueue<Key>) {
    let taken = state.services.take(ev);
    on_source(Kind::Service, taken, state, queue);
}

/// A Gateway changed (its addresses, its listeners): the routes that name
/// it have work; a list's end: every route.
pub(super) fn on_gateway(ev: Event<Gateway>, state: &mut State, queue: &mut WorkQueue<Key>) {
    let gw = match state.gateways.take(ev) {
        Taken::Nothing => return,
        Taken::Listed(_) => return enqueue_all(state, queue),
        Taken::Applied(k) | Taken::Deleted(k, _) => k,
    };
    let names = |ns: &str, refs: Option<&Vec<ParentRef>>| {
        refs.into_iter().flatten().any(|p| {
            p.is_gateway() && p.name == gw.1 && p.namespace.as_deref().unwrap_or(ns) == gw.0
        })
    };
    let key = |kind: Kind, (ns, name): &NsName| (kind, ns.clone(), name.clone());
    let mut keys: Vec<Key> = state
        .routes
        .map
        .iter()
        .filter(|((ns, _), r)| names(ns, r.spec.parent_refs.as_ref()))
        .map(|(k, _)| key(Kind::HttpRoute, k))
        .collect();
    keys.extend(
        state
            .grpc_routes
            .map
            .iter()
            .filter(|((ns, _), r)| names(ns, r.spec.parent_refs.as_ref()))
            .map(|(k, _)| key(Kind::GrpcRoute, k)),
    );
    keys.sort();
    for k in keys {
        queue.push(k);
    }
}

/// The annotations of ours on a Namespace (the others are not kept).
fn ours(meta: &PartialObjectMeta<Namespace>) -> BTreeMap<String, String> {
    meta.annotations()
        .iter()
        .filter(|(k, _)| k.starts_with(super::annotations::PREFIX))
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
            state.listing.0 = Some(HashMap::new());
            None
        }
        Event::InitApply(n) => {
            let map = state.listing.0.get_or_insert_default();
            map.insert(n.name_any(), ours(&n));
            None
        }
        Event::InitDone => {
            state.namespaces = state.listing.0.take().unwrap_or_default();
            state.listed[0] = true;
            enqueue_all(state, queue);
            None
        }
        Event::Apply(n) => changed(state, n.name_any(), Some(ours(&n))),
        Event::Delete(n) => changed(state, n.name_any(), None),
    };
    if let Some(ns) = touched {
        for k in state.keys_in(Some(&ns)) {
            queue.push(k);
        }
    }
}

/// The source that owns a generated checker: (its key, its UID).
fn owner(meta: &PartialObjectMeta<WebChecker>) -> Option<(Key, String)> {
    let (kind, r) = meta.owner_references().iter().find_map(|r| {
        let group = r.api_version.split('/').next().unwrap_or_default();
        match (r.kind.as_str(), group) {
            ("Ingress", "networking.k8s.io") => Some((Kind::Ingress, r)),
            ("HTTPRoute", super::gateway_api::GROUP) => Some((Kind::HttpRoute, r)),
            ("GRPCRoute", super::gateway_api::GROUP) => Some((Kind::GrpcRoute, r)),
            // The core group: `v1`, no group part.
            ("Service", "v1") => Some((Kind::Service, r)),
            _ => None,
        }
    })?;
    Some((
        (kind, meta.namespace().unwrap_or_default(), r.name.clone()),
        r.uid.clone(),
    ))
}
fn checker_key(meta: &PartialObjectMeta<WebChecker>) -> NsName {
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
        Event::Init => state.listing.1 = Some(Default::default()),
        Event::InitApply(c) => {
            if let Some((_, uid)) = owner(&c) {
                let (by_owner, owner_of) = state.listing.1.get_or_insert_default();
                owner_of.insert(checker_key(&c), uid.clone());
                by_owner
                    .entry(uid)
                    .or_default()
                    .insert(c.name_any(), generated(&c));
            }
        }
        Event::InitDone => {
            (state.generated, state.owner_of) = state.listing.1.take().unwrap_or_default();
            state.listed[1] = true;
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
            out.push(k.2.clone());
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

    fn route(ns: &str, name: &str, parent: (&str, Option<&str>)) -> HTTPRoute {
        let mut r = HTTPRoute::new(name, Default::default());
        r.metadata.namespace = Some(ns.into());
        r.metadata.uid = Some(format!("uid-{name}"));
        r.spec.parent_refs = Some(vec![super::super::gateway_api::ParentRef {
            name: parent.0.into(),
            namespace: parent.1.map(str::to_string),
            ..Default::default()
        }]);
        r
    }

    fn gateway(ns: &str, name: &str) -> Gateway {
        let mut g = Gateway::new(name, Default::default());
        g.metadata.namespace = Some(ns.into());
        g
    }

    #[test]
    fn a_gateway_makes_work_for_the_routes_that_name_it() {
        let (mut s, mut q) = listed();
        on_route(Event::InitDone, &mut s, &mut q);
        for r in [
            route("web", "r1", ("gw", None)),
            route("shop", "r2", ("gw", Some("web"))),
            route("shop", "r3", ("gw", None)),
        ] {
            on_route(Event::Apply(r), &mut s, &mut q);
        }
        assert!(!s.ready(Kind::HttpRoute), "the Gateways are not listed yet");
        on_gateway(Event::InitDone, &mut s, &mut q);
        assert!(s.ready(Kind::HttpRoute) && s.ready(Kind::Ingress));
        drain(&mut q);
        on_gateway(Event::Apply(gateway("web", "gw")), &mut s, &mut q);
        assert_eq!(drain(&mut q), ["r2", "r1"], "r3 names shop's gw");
        let checker = {
            let mut c = checker("r1-x", "r1");
            let r = &mut c.metadata.owner_references.as_mut().unwrap()[0];
            (r.api_version, r.kind) = ("gateway.networking.k8s.io/v1".into(), "HTTPRoute".into());
            c
        };
        on_checker(Event::Apply(checker), &mut s, &mut q);
        let popped = q.pop().unwrap();
        assert_eq!(popped, (Kind::HttpRoute, "web".into(), "r1".into()));
        q.done(popped, true, std::time::Instant::now());
        let ns = Event::Apply(meta::<Namespace>(
            "",
            "shop",
            &[(super::super::annotations::CHECK, "true")],
        ));
        on_namespace(ns, &mut s, &mut q);
        assert_eq!(
            drain(&mut q),
            ["c", "r2", "r3"],
            "the Ingress and the routes of shop"
        );
    }

    #[test]
    fn a_gateway_makes_work_for_the_grpcroutes_that_name_it_too() {
        let (mut s, mut q) = listed();
        on_route(Event::InitDone, &mut s, &mut q);
        on_gateway(Event::InitDone, &mut s, &mut q);
        assert!(
            !s.ready(Kind::GrpcRoute),
            "the GRPCRoutes are not listed yet"
        );
        on_grpc_route(Event::InitDone, &mut s, &mut q);
        assert!(s.ready(Kind::GrpcRoute));
        let mut g = GRPCRoute::new("g1", Default::default());
        g.metadata.namespace = Some("web".into());
        g.metadata.uid = Some("uid-g1".into());
        g.spec.parent_refs = route("web", "x", ("gw", None)).spec.parent_refs;
        on_grpc_route(Event::Apply(g), &mut s, &mut q);
        on_route(
            Event::Apply(route("web", "r1", ("gw", None))),
            &mut s,
            &mut q,
        );
        drain(&mut q);
        on_gateway(Event::Apply(gateway("web", "gw")), &mut s, &mut q);
        assert_eq!(drain(&mut q), ["r1", "g1"]);
        let mut c = checker("g1-x", "g1");
        let r = &mut c.metadata.owner_references.as_mut().unwrap()[0];
        (r.api_version, r.kind) = ("gateway.networking.k8s.io/v1".into(), "GRPCRoute".into());
        on_checker(Event::Apply(c), &mut s, &mut q);
        let popped = q.pop().unwrap();
        assert_eq!(popped, (Kind::GrpcRoute, "web".into(), "g1".into()));
    }

    #[test]
    fn a_relist_replaces_the_ingresses_at_its_end() {
        let (mut s, mut q) = listed();
        s.want(&(Kind::Ingress, "web".into(), "a".into()), 2);
        on_ingress(Event::Init, &mut s, &mut q);
        on_ingress(Event::InitApply(ing("web", "b")), &mut s, &mut q);
        assert_eq!(s.ingresses.map.len(), 3, "unchanged until the list ends");
        on_ingress(Event::InitDone, &mut s, &mut q);
        assert_eq!(s.ingresses.map.len(), 1);
        assert_eq!(s.wanted_total, 0, "a's checkers are no longer counted");
        assert_eq!(drain(&mut q), ["b"]);
    }
}
