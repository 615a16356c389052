//! Dependencies between checkers (spec.dependsOn): whose failure explains
//! whose. Pure. The operator's watch of every checker feeds a [`Graph`]
//! with each checker's labels, dependsOn and Ready; the graph gives each
//! namespace's [`Edge`]s, which the table consults at every probe of a
//! checker that has dependencies.
//!
//! A checker is blocked by a dependency (direct or through others) that is
//! Ready=False for a reason of its own, not DependencyDown, unless that
//! dependency depends back on it: within a cycle nobody blocks anybody, so
//! a failure there always pages and two checkers never wait on each other.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use crate::maintenance::Selector;

/// Ready's reason while a dependency is down.
pub const DEPENDENCY_DOWN: &str = "DependencyDown";
/// Checkers one selector counts, the first by name: a selector costs the
/// view a bounded match per checker of the namespace.
pub const MAX_SELECTED: usize = 64;
/// Checkers one walk visits.
pub const MAX_REACH: usize = 256;
/// What a dependency's Ready=False takes to reach a dependent's owner
/// after its own probes failed: its status write, then the watch.
pub const SPREAD: Duration = Duration::from_secs(2);
/// The longest a dependent holds its Warning for its dependencies to fall.
pub const MAX_HOLD: Duration = Duration::from_secs(300);

/// One checker as the graph knows it.
#[derive(Clone, Debug, Default)]
pub struct Node {
    pub labels: BTreeMap<String, String>,
    /// Boxed: every replica keeps a node for every checker of the fleet,
    /// and few have a dependsOn.
    pub depends: Option<Box<Depends>>,
    /// Ready=False: its reason.
    pub down: Option<Arc<str>>,
    /// How long its failure takes to turn it Ready=False: interval times
    /// failureThreshold, plus its timeout.
    pub fall: Duration,
}

/// spec.dependsOn, read.
#[derive(Clone, Debug, Default)]
pub struct Depends {
    pub names: Vec<String>,
    pub selector: Option<Selector>,
}

/// What a dependent's owner needs to know at a probe.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Edge {
    /// How long a failure with no dependency down holds its Warning: the
    /// slowest of its dependencies to fall, plus [`SPREAD`].
    pub hold: Duration,
    /// A dependency that is down for a reason of its own.
    pub blocker: Option<Blocker>,
    /// A dependency that depends back on it, if any.
    pub cycle: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Blocker {
    pub name: String,
    pub reason: String,
}

/// Every namespace's checkers.
#[derive(Debug, Default)]
pub struct Graph {
    namespaces: HashMap<String, BTreeMap<String, Node>>,
}

impl Graph {
    pub fn set(&mut self, namespace: &str, name: &str, node: Node) {
        self.namespaces
            .entry(namespace.to_string())
            .or_default()
            .insert(name.to_string(), node);
    }

    pub fn remove(&mut self, namespace: &str, name: &str) {
        if let Some(ns) = self.namespaces.get_mut(namespace) {
            ns.remove(name);
            if ns.is_empty() {
                self.namespaces.remove(namespace);
            }
        }
    }

    pub fn get(&self, namespace: &str, name: &str) -> Option<&Node> {
        self.namespaces.get(namespace)?.get(name)
    }

    pub fn clear(&mut self) {
        self.namespaces.clear();
    }

    pub fn namespaces(&self) -> impl Iterator<Item = &String> {
        self.namespaces.keys()
    }

    /// Whether any checker of the namespace has dependencies.
    pub fn has_dependents(&self, namespace: &str) -> bool {
        self.namespaces
            .get(namespace)
            .is_some_and(|ns| ns.values().any(|n| n.depends.is_some()))
    }

    /// The edges of every checker of the namespace that has dependencies.
    pub fn edges(&self, namespace: &str) -> BTreeMap<String, Edge> {
        let Some(ns) = self.namespaces.get(namespace) else {
            return BTreeMap::new();
        };
        let walk = Walk::new(ns);
        ns.iter()
            .filter(|(_, n)| n.depends.is_some())
            .map(|(name, _)| (name.clone(), walk.edge(name)))
            .collect()
    }
}

/// One namespace's edges, each checker's direct dependencies found once.
struct Walk<'a> {
    ns: &'a BTreeMap<String, Node>,
    direct: HashMap<&'a str, Vec<&'a str>>,
}

impl<'a> Walk<'a> {
    fn new(ns: &'a BTreeMap<String, Node>) -> Self {
        let direct = ns
            .iter()
            .filter_map(|(name, n)| Some((name.as_str(), direct(ns, name, n.depends.as_ref()?))))
            .collect();
        Walk { ns, direct }
    }

    /// What `from` depends on, directly or not, nearest first (at most
    /// [`MAX_REACH`]); itself included when a cycle leads back to it.
    fn reach(&self, from: &str) -> Vec<&'a str> {
        let mut seen = BTreeSet::new();
        let mut order = Vec::new();
        let next = |k: &str| self.direct.get(k).into_iter().flatten().copied();
        let mut queue: VecDeque<&str> = next(from).collect();
        while let Some(k) = queue.pop_front() {
            if order.len() >= MAX_REACH {
                break;
            }
            if !seen.insert(k) {
                continue;
            }
            order.push(k);
            if k != from {
                queue.extend(next(k));
            }
        }
        order
    }

    fn edge(&self, name: &str) -> Edge {
        let reached = self.reach(name);
        let hold = reached
            .iter()
            .filter_map(|k| self.ns.get(*k))
            .map(|n| n.fall)
            .max()
            .unwrap_or_default()
            .saturating_add(SPREAD)
            .min(MAX_HOLD);
        let cycle = reached
            .iter()
            .find(|k| **k != name && self.reach(k).contains(&name))
            .map(|k| k.to_string());
        let blocker = reached.iter().find_map(|k| {
            let down = self.ns.get(*k)?.down.as_deref()?;
            let root = *k != name && down != DEPENDENCY_DOWN && !self.reach(k).contains(&name);
            root.then(|| Blocker {
                name: k.to_string(),
                reason: down.to_string(),
            })
        });
        Edge {
            hold,
            blocker,
            cycle,
        }
    }
}

/// The checkers a checker depends on directly, that exist.
fn direct<'a>(ns: &'a BTreeMap<String, Node>, name: &str, d: &Depends) -> Vec<&'a str> {
    let named = d
        .names
        .iter()
        .filter_map(|n| ns.get_key_value(n).map(|(k, _)| k.as_str()));
    let selected = d.selector.iter().flat_map(|s| {
        ns.iter()
            .filter(move |(_, n)| s.matches(&n.labels))
            .map(|(k, _)| k.as_str())
            .take(MAX_SELECTED)
    });
    named.chain(selected).filter(|k| *k != name).collect()
}

/// Each namespace's edges, for the table. A namespace's map is shared, so
/// a change in one namespace copies only that one.
#[derive(Clone, Debug, Default)]
pub struct Dependencies {
    namespaces: HashMap<String, Arc<BTreeMap<String, Edge>>>,
}

impl Dependencies {
    pub fn of(&self, namespace: &str, name: &str) -> Option<&Edge> {
        self.namespaces.get(namespace)?.get(name)
    }

    /// Sets a namespace's edges; whether they changed.
    pub fn set(&mut self, namespace: &str, edges: BTreeMap<String, Edge>) -> bool {
        let old = self.namespaces.get(namespace);
        if old.map_or(edges.is_empty(), |o| **o == edges) {
            return false;
        }
        if edges.is_empty() {
            self.namespaces.remove(namespace);
        } else {
            self.namespaces
                .insert(namespace.to_string(), Arc::new(edges));
        }
        true
    }

    /// Namespaces with edges.
    pub fn namespaces(&self) -> Vec<String> {
        self.namespaces.keys().cloned().collect()
    }

    /// Checkers with dependencies, and those a dependency blocks now.
    pub fn counts(&self) -> (usize, usize) {
        let edges = self.namespaces.values().flat_map(|m| m.values());
        edges.fold((0, 0), |(all, blocked), e| {
            (all + 1, blocked + usize::from(e.blocker.is_some()))
        })
    }
}

#[cfg(test)]
mod tests;
