//! The objects of one of discovery's watches by (namespace, name), trimmed
//! (`trim`) and, when they cannot opt in as they come, kept as stubs
//! (their metadata only): most routes of a cluster never opt in, and
//! anyone who may create one could otherwise fill the leader's memory. A
//! stub that later may opt in (its Namespace opted in) gets its spec back
//! from a list of its namespace (a refill), never from a guess. A re-list
//! replaces the map at its end, never leaving it half filled.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use kube::ResourceExt;
use kube::runtime::watcher::Event;

use super::trim::Kept as Trimmed;

/// An object of a namespace: (namespace, name).
pub(super) type NsName = (String, String);

/// Objects by (namespace, name), and which of them are stubs.
type Kept<T> = (HashMap<NsName, Arc<T>>, HashSet<NsName>);

/// The objects of one watch, and the list under way.
pub(super) struct Objects<T> {
    pub(super) map: HashMap<NsName, Arc<T>>,
    /// Those kept as stubs.
    pub(super) stubs: HashSet<NsName>,
    listing: Option<Kept<T>>,
    pub(super) listed: bool,
}

impl<T> Default for Objects<T> {
    fn default() -> Self {
        Objects {
            map: HashMap::new(),
            stubs: HashSet::new(),
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

fn key<T: kube::Resource>(o: &T) -> NsName {
    (o.namespace().unwrap_or_default(), o.name_any())
}

/// `o`, or its stub when it cannot opt in (`full` says whether it may).
fn kept<T: Trimmed>(mut o: T, full: &dyn Fn(&T) -> bool) -> (Arc<T>, bool) {
    let whole = full(&o);
    if !whole {
        o.stub();
    }
    (Arc::new(o), !whole)
}

impl<T: kube::Resource + Trimmed> Objects<T> {
    /// Takes a watch event; `full` says whether an object may opt in (the
    /// others are kept as stubs).
    pub(super) fn take(&mut self, ev: Event<T>, full: &dyn Fn(&T) -> bool) -> Taken<T> {
        match ev {
            Event::Init => {
                self.listing = Some(Default::default());
                Taken::Nothing
            }
            Event::InitApply(o) => {
                let (map, stubs) = self.listing.get_or_insert_default();
                let k = key(&o);
                let (o, stub) = kept(o, full);
                if stub {
                    stubs.insert(k.clone());
                }
                map.insert(k, o);
                Taken::Nothing
            }
            Event::InitDone => {
                let (fresh, stubs) = self.listing.take().unwrap_or_default();
                let gone = self
                    .map
                    .keys()
                    .filter(|k| !fresh.contains_key(*k))
                    .cloned()
                    .collect();
                (self.map, self.stubs) = (fresh, stubs);
                self.listed = true;
                Taken::Listed(gone)
            }
            Event::Apply(o) => {
                let k = key(&o);
                let (o, stub) = kept(o, full);
                self.stub_if(&k, stub);
                self.map.insert(k.clone(), o);
                Taken::Applied(k)
            }
            Event::Delete(o) => {
                let k = key(&o);
                self.map.remove(&k);
                self.stubs.remove(&k);
                Taken::Deleted(k, o)
            }
        }
    }

    fn stub_if(&mut self, k: &NsName, stub: bool) {
        if stub {
            self.stubs.insert(k.clone());
        } else {
            self.stubs.remove(k);
        }
    }

    /// A list of one namespace, taken for its stubs that may now opt in:
    /// each object that is still a stub of the same UID and may opt in
    /// takes its place whole. The objects that did.
    pub(super) fn refill(&mut self, listed: Vec<T>, full: &dyn Fn(&T) -> bool) -> Vec<NsName> {
        let mut filled = Vec::new();
        for o in listed {
            let k = key(&o);
            let same = self.map.get(&k).is_some_and(|s| s.uid() == o.uid());
            if !self.stubs.contains(&k) || !same || !full(&o) {
                continue;
            }
            self.stubs.remove(&k);
            self.map.insert(k.clone(), Arc::new(o));
            filled.push(k);
        }
        filled
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::networking::v1::{Ingress, IngressRule, IngressSpec};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn ing(name: &str, uid: &str) -> Ingress {
        Ingress {
            metadata: ObjectMeta {
                namespace: Some("web".into()),
                name: Some(name.into()),
                uid: Some(uid.into()),
                ..Default::default()
            },
            spec: Some(IngressSpec {
                rules: Some(vec![IngressRule {
                    host: Some("a.example.com".into()),
                    http: None,
                }]),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn at(name: &str) -> NsName {
        ("web".into(), name.into())
    }

    #[test]
    fn objects_that_cannot_opt_in_are_stubs_until_a_refill() {
        let mut o: Objects<Ingress> = Objects::default();
        let only_a = |i: &Ingress| i.metadata.name.as_deref() == Some("a");
        o.take(Event::Init, &only_a);
        o.take(Event::InitApply(ing("a", "ua")), &only_a);
        o.take(Event::InitApply(ing("b", "ub")), &only_a);
        assert!(o.map.is_empty(), "the list is under way");
        o.take(Event::InitDone, &only_a);
        assert!(o.map[&at("a")].spec.is_some());
        assert!(o.map[&at("b")].spec.is_none(), "a stub");
        assert_eq!(o.stubs, HashSet::from([at("b")]));
        let all = |_: &Ingress| true;
        let filled = o.refill(
            vec![ing("a", "ua"), ing("b", "other"), ing("c", "uc")],
            &all,
        );
        assert!(
            filled.is_empty(),
            "b was made again meanwhile; c is not known"
        );
        assert_eq!(o.refill(vec![ing("b", "ub")], &all), [at("b")]);
        assert!(o.map[&at("b")].spec.is_some() && o.stubs.is_empty());
        o.take(Event::Apply(ing("b", "ub")), &only_a);
        assert!(o.stubs.contains(&at("b")), "no longer may opt in");
        o.take(Event::Delete(ing("b", "ub")), &only_a);
        assert!(o.stubs.is_empty() && !o.map.contains_key(&at("b")));
    }
}
