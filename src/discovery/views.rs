//! What discovery's watches keep while this replica leads, and which source
//! objects each watch event makes work for: the Ingresses, the HTTPRoutes,
//! the GRPCRoutes and the Gateways they name, the Services (each trimmed,
//! and a stub when it cannot opt in: `objects`), each Namespace's
//! annotations of ours and labels, and (name, UID, fingerprint) per
//! generated checker by the UID of the source that controls it.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use k8s_openapi::api::core::v1::{Namespace, Service};
use k8s_openapi::api::networking::v1::Ingress;
use kube::ResourceExt;
use kube::core::PartialObjectMeta;
use kube::runtime::watcher::{self, Event};

pub(super) use super::objects::{NsName, Objects, Taken};

use super::budget::Budget;
use super::gateway_api::{GRPCRoute, Gateway, HTTPRoute, ParentRef};
use super::queue::{Grouped, WorkQueue};
use super::{
    FINGERPRINT_ANNOTATION, MAX_NAMESPACE_LABELS, NamespaceInfo, Problem, SOURCE_LABEL,
    annotations, gateway, grpcroute, httproute, ingress, rules, service, trim,
};
use crate::api::WebChecker;

/// The kinds of source objects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(super) enum Kind {
    Ingress,
    HttpRoute,
    GrpcRoute,
    Service,
    Gateway,
}

impl Kind {
    /// The kind as the API names it.
    pub(super) fn name(self) -> &'static str {
        match self {
            Kind::Ingress => "Ingress",
            Kind::HttpRoute => "HTTPRoute",
            Kind::GrpcRoute => "GRPCRoute",
            Kind::Service => "Service",
            Kind::Gateway => "Gateway",
        }
    }

    /// Its generated checkers' `source` label.
    fn label(self) -> &'static str {
        match self {
            Kind::Ingress => ingress::LABEL,
            Kind::HttpRoute => httproute::LABEL,
            Kind::GrpcRoute => grpcroute::LABEL,
            Kind::Service => service::LABEL,
            Kind::Gateway => gateway::LABEL,
        }
    }
}

/// A source object: (kind, namespace, name).
pub(super) type Key = (Kind, String, String);
/// The objects of a kind in a namespace.
pub(super) type KindIn = (Kind, String);

/// Sources wait for their namespace's turn.
impl Grouped for Key {
    fn group(&self) -> &str {
        &self.1
    }
}

/// The objects of one namespace and kind, listed again for its stubs.
pub(super) enum Refilled {
    Ingresses(Vec<Ingress>),
    Routes(Vec<HTTPRoute>),
    GrpcRoutes(Vec<GRPCRoute>),
    Services(Vec<Service>),
    Gateways(Vec<Gateway>),
}

/// One watch event, of whichever watch, or a refill's list.
pub(super) enum Change {
    Ingress(Event<Ingress>),
    Route(Event<HTTPRoute>),
    GrpcRoute(Event<GRPCRoute>),
    Gateway(Event<Gateway>),
    /// Boxed: a Service is the largest of them.
    Service(Box<Event<Service>>),
    Namespace(Event<PartialObjectMeta<Namespace>>),
    Checker(Event<PartialObjectMeta<WebChecker>>),
    Refill(Kind, String, Refilled),
    Failed(&'static str, watcher::Error),
}

/// A generated checker as last seen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Generated {
    pub(super) uid: String,
    pub(super) fingerprint: String,
}

/// Whether a source with metadata `meta` may opt in (its Namespace as known).
fn may_opt_in(kind: Kind, meta: &kube::api::ObjectMeta, namespaces: &Namespaces) -> bool {
    let empty = BTreeMap::new();
    let ns = meta.namespace.as_deref().unwrap_or_default();
    let ns = namespaces.get(ns).map_or(&empty, |n| &n.annotations);
    let own = meta.annotations.as_ref().unwrap_or(&empty);
    annotations::opts_in(own, ns, rules::namespace_covers(kind.name()))
}

/// Namespace -> what discovery keeps of it.
pub(super) type Namespaces = HashMap<String, NamespaceInfo>;
/// Source UID -> checker name -> what it carries.
pub(super) type GeneratedByOwner = HashMap<String, BTreeMap<String, Generated>>;
/// (namespace, checker name) -> owner UID.
pub(super) type OwnerOf = HashMap<NsName, String>;

/// The views the watches keep, one per watch, and what was said.
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
    /// Namespace -> its source objects (of the kinds watched).
    pub(super) by_ns: HashMap<String, BTreeSet<Key>>,
    /// Source -> checkers it wants (for the gauge).
    pub(super) wanted: HashMap<Key, usize>,
    pub(super) wanted_total: usize,
    /// Watches failing since their last event.
    pub(super) failing: Vec<&'static str>,
    /// The checkers each source wants, against the cap per namespace.
    pub(super) budget: Budget<Key>,
    /// Namespaces (of a kind) whose stubs may now opt in: to be listed
    /// again, and those being listed.
    pub(super) refills: (BTreeSet<KindIn>, BTreeSet<KindIn>),
}

impl Default for State {
    fn default() -> Self {
        State::new(usize::MAX)
    }
}

impl State {
    /// Empty, with a cap of `cap` generated checkers per namespace.
    pub(super) fn new(cap: usize) -> Self {
        State {
            ingresses: Objects::default(),
            routes: Objects::default(),
            grpc_routes: Objects::default(),
            gateways: Objects::default(),
            services: Objects::default(),
            namespaces: Namespaces::default(),
            generated: GeneratedByOwner::default(),
            owner_of: OwnerOf::default(),
            listing: Default::default(),
            listed: [false; 2],
            said: HashMap::new(),
            by_ns: HashMap::new(),
            wanted: HashMap::new(),
            wanted_total: 0,
            failing: Vec::new(),
            budget: Budget::new(cap),
            refills: Default::default(),
        }
    }

    /// Whether source `key` is kept as a stub that may opt in now (its
    /// spec must be listed again before it is planned).
    pub(super) fn stub_that_may_opt_in(&self, key: &Key) -> bool {
        let (kind, ns, name) = key;
        let at = (ns.clone(), name.clone());
        let (stub, meta) = match kind {
            Kind::Ingress => stub_meta(&self.ingresses, &at),
            Kind::HttpRoute => stub_meta(&self.routes, &at),
            Kind::GrpcRoute => stub_meta(&self.grpc_routes, &at),
            Kind::Service => stub_meta(&self.services, &at),
            Kind::Gateway => stub_meta(&self.gateways, &at),
        };
        stub && meta.is_some_and(|m| may_opt_in(*kind, m, &self.namespaces))
    }

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
                Kind::Gateway => self.gateways.listed,
            }
    }

    /// The source objects of `ns` (all with None), sorted.
    pub(super) fn keys_in(&self, ns: Option<&str>) -> Vec<Key> {
        match ns {
            Some(ns) => self.by_ns.get(ns).into_iter().flatten().cloned().collect(),
            None => {
                let mut keys: Vec<Key> = self.by_ns.values().flatten().cloned().collect();
                keys.sort();
                keys
            }
        }
    }

    /// The source objects of `ns`, counted.
    pub(super) fn count_in(&self, ns: &str) -> usize {
        self.by_ns.get(ns).map_or(0, BTreeSet::len)
    }

    /// The index of the sources of `kind` made again from `keys` (its map's, after a list).
    fn index<'a>(&mut self, kind: Kind, keys: impl Iterator<Item = &'a NsName>) {
        for of in self.by_ns.values_mut() {
            of.retain(|k| k.0 != kind);
        }
        self.by_ns.retain(|_, of| !of.is_empty());
        for (ns, name) in keys {
            let k = (kind, ns.clone(), name.clone());
            self.by_ns.entry(ns.clone()).or_default().insert(k);
        }
    }

    fn indexed(&mut self, k: &Key, present: bool) {
        if present {
            self.by_ns.entry(k.1.clone()).or_default().insert(k.clone());
        } else if let Some(of) = self.by_ns.get_mut(&k.1) {
            of.remove(k);
            if of.is_empty() {
                self.by_ns.remove(&k.1);
            }
        }
    }
}

fn stub_meta<'a, T: kube::Resource>(
    objects: &'a Objects<T>,
    at: &NsName,
) -> (bool, Option<&'a kube::api::ObjectMeta>) {
    let meta = objects.map.get(at).map(|o| o.meta());
    (objects.stubs.contains(at), meta)
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
                state.budget.remove(&k);
            }
            let listed: Vec<NsName> = match kind {
                Kind::Ingress => state.ingresses.map.keys().cloned().collect(),
                Kind::HttpRoute => state.routes.map.keys().cloned().collect(),
                Kind::GrpcRoute => state.grpc_routes.map.keys().cloned().collect(),
                Kind::Service => state.services.map.keys().cloned().collect(),
                Kind::Gateway => state.gateways.map.keys().cloned().collect(),
            };
            state.index(kind, listed.iter());
            enqueue_all(state, queue);
        }
        Taken::Applied(k) => {
            let k = key(k);
            state.indexed(&k, true);
            queue.push(k);
        }
        Taken::Deleted(k, o) => {
            // Its checkers go with it: the garbage collector follows their
            // ownerReference.
            let k = key(k);
            state.indexed(&k, false);
            state.unwant(&k);
            if let Some(uid) = o.meta().uid.as_ref() {
                state.said.remove(uid);
            }
            queue.forget(&k);
            // Its place under the namespace's cap is free for others.
            for other in state.budget.remove(&k) {
                queue.push(other);
            }
        }
    }
}

/// A predicate: whether an object of `kind` may opt in, its Namespace as
/// `namespaces` says.
fn full<T: kube::Resource<DynamicType = ()>>(
    kind: Kind,
    namespaces: &Namespaces,
) -> impl Fn(&T) -> bool + '_ {
    move |o: &T| may_opt_in(kind, o.meta(), namespaces)
}

pub(super) fn on_ingress(ev: Event<Ingress>, state: &mut State, queue: &mut WorkQueue<Key>) {
    let taken = state
        .ingresses
        .take(ev, &full(Kind::Ingress, &state.namespaces));
    on_source(Kind::Ingress, taken, state, queue);
}

pub(super) fn on_route(ev: Event<HTTPRoute>, state: &mut State, queue: &mut WorkQueue<Key>) {
    let taken = state
        .routes
        .take(ev, &full(Kind::HttpRoute, &state.namespaces));
    on_source(Kind::HttpRoute, taken, state, queue);
}

pub(super) fn on_grpc_route(ev: Event<GRPCRoute>, state: &mut State, queue: &mut WorkQueue<Key>) {
    let taken = state
        .grpc_routes
        .take(ev, &full(Kind::GrpcRoute, &state.namespaces));
    on_source(Kind::GrpcRoute, taken, state, queue);
}

/// An event of the Services' watch (trimmed by the watch, `trim::Kept`).
pub(super) fn on_service(ev: Event<Service>, state: &mut State, queue: &mut WorkQueue<Key>) {
    let taken = state
        .services
        .take(ev, &full(Kind::Service, &state.namespaces));
    on_source(Kind::Service, taken, state, queue);
}

/// A refill's list of namespace `ns` (of `kind`): its stubs that may opt in
/// now are whole again, and have work.
pub(super) fn on_refill(
    kind: Kind,
    ns: String,
    listed: Refilled,
    state: &mut State,
    queue: &mut WorkQueue<Key>,
) {
    let namespaces = &state.namespaces;
    let filled = match listed {
        Refilled::Ingresses(l) => state.ingresses.refill(l, &full(kind, namespaces)),
        Refilled::Routes(l) => state.routes.refill(l, &full(kind, namespaces)),
        Refilled::GrpcRoutes(l) => state.grpc_routes.refill(l, &full(kind, namespaces)),
        Refilled::Services(l) => state.services.refill(l, &full(kind, namespaces)),
        Refilled::Gateways(l) => state.gateways.refill(l, &|_| true),
    };
    state.refills.1.remove(&(kind, ns));
    for (ns, name) in filled {
        queue.push((kind, ns, name));
    }
}

/// A Gateway changed (its addresses, its listeners, its opt-in): it has
/// work as a source, and so have the routes that name it; a list's end:
/// every source. Gateways are kept whole whether or not they opt in (the
/// routes read them).
pub(super) fn on_gateway(ev: Event<Gateway>, state: &mut State, queue: &mut WorkQueue<Key>) {
    let taken = state.gateways.take(ev, &|_| true);
    let gw = match &taken {
        Taken::Applied(k) | Taken::Deleted(k, _) => Some(k.clone()),
        Taken::Nothing | Taken::Listed(_) => None,
    };
    on_source(Kind::Gateway, taken, state, queue);
    let Some(gw) = gw else {
        return;
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

/// What discovery keeps of a Namespace: the annotations of ours, and its
/// labels unless it has more than [`MAX_NAMESPACE_LABELS`].
fn namespace_info(meta: &PartialObjectMeta<Namespace>) -> NamespaceInfo {
    let labels = meta.labels();
    NamespaceInfo {
        annotations: trim::ours(Some(meta.annotations().clone())),
        labels: (labels.len() <= MAX_NAMESPACE_LABELS).then(|| labels.clone()),
    }
}

pub(super) fn on_namespace(
    ev: Event<PartialObjectMeta<Namespace>>,
    state: &mut State,
    queue: &mut WorkQueue<Key>,
) {
    let changed = |state: &mut State, name: String, now: Option<NamespaceInfo>| {
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
            map.insert(n.name_any(), namespace_info(&n));
            None
        }
        Event::InitDone => {
            state.namespaces = state.listing.0.take().unwrap_or_default();
            state.listed[0] = true;
            enqueue_all(state, queue);
            None
        }
        Event::Apply(n) => changed(state, n.name_any(), Some(namespace_info(&n))),
        Event::Delete(n) => changed(state, n.name_any(), None),
    };
    if let Some(ns) = touched {
        for k in state.keys_in(Some(&ns)) {
            queue.push(k);
        }
    }
}

/// The source that controls a generated checker: (its key, its UID). Only
/// its controller ownerReference counts, of the kind its `source` label
/// names: a checker that merely mentions a route is not the route's.
fn owner(meta: &PartialObjectMeta<WebChecker>) -> Option<(Key, String)> {
    let r = meta
        .owner_references()
        .iter()
        .find(|r| r.controller == Some(true))?;
    let group = r.api_version.split('/').next().unwrap_or_default();
    let kind = match (r.kind.as_str(), group) {
        ("Ingress", "networking.k8s.io") => Kind::Ingress,
        ("HTTPRoute", super::gateway_api::GROUP) => Kind::HttpRoute,
        ("GRPCRoute", super::gateway_api::GROUP) => Kind::GrpcRoute,
        // The core group: `v1`, no group part.
        ("Service", "v1") => Kind::Service,
        ("Gateway", super::gateway_api::GROUP) => Kind::Gateway,
        _ => return None,
    };
    if meta.labels().get(SOURCE_LABEL).map(String::as_str) != Some(kind.label()) {
        return None;
    }
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

/// Longest fingerprint kept (ours have 8 hex digits; a longer one, set by
/// hand, matches nothing anyway).
const MAX_FINGERPRINT: usize = 16;

fn generated(meta: &PartialObjectMeta<WebChecker>) -> Generated {
    let print = meta.annotations().get(FINGERPRINT_ANNOTATION);
    Generated {
        uid: meta.uid().unwrap_or_default(),
        fingerprint: print
            .filter(|p| p.len() <= MAX_FINGERPRINT)
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
#[path = "views_tests.rs"]
mod tests;
