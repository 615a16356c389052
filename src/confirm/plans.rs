//! The confirmer's probe plans, kept for [`PLAN_FRESH`] per checker and
//! purpose (a zone probes every interval, and an owner whose path is broken
//! asks at each failure: reading the object each time would cost a GET per
//! probe), charged to the asking checker's namespace.
//!
//! A plan costs what it holds: its compiled patterns and its Secret and
//! ConfigMap values. Each namespace's plans share that namespace's budgets
//! (`--namespace-pattern-budget-mib` and `--namespace-value-budget-mib`,
//! the same sizes as for the checkers it owns), and room is made by
//! dropping that namespace's least recently used plans, never another's: a
//! namespace that asks about many large checkers evicts only its own. A
//! plan larger than its namespace's budget is not kept (the ask is
//! refused); Secret reads go [`READS_PER_NAMESPACE`] at a time per
//! namespace and [`READS`] in all.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::Semaphore;

use crate::ask::{Ask, Purpose};
use webchecker_core::namespace_budget::Limits;

/// How long a plan is used before the checker and its Secrets are read
/// again; a Secret's new value reaches confirmations within this.
pub const PLAN_FRESH: Duration = Duration::from_secs(30);
/// Plans kept per namespace at most, whatever they cost.
const PLANS_PER_NAMESPACE: usize = 1024;
/// Secret and ConfigMap reads of one namespace's plans at once.
pub const READS_PER_NAMESPACE: usize = 4;
/// Secret and ConfigMap reads of plans at once, in all.
pub const READS: usize = 16;

struct Kept<P> {
    uid: String,
    generation: Option<i64>,
    owner: String,
    plan: Arc<P>,
    read: Instant,
    used: Instant,
    cost: usize,
}

struct Space<P> {
    plans: HashMap<(String, Purpose), Kept<P>>,
    cost: usize,
}

impl<P> Default for Space<P> {
    fn default() -> Self {
        Space {
            plans: HashMap::new(),
            cost: 0,
        }
    }
}

impl<P> Space<P> {
    /// Drops the least recently used plan; false when there is none.
    fn drop_oldest(&mut self) -> bool {
        let Some(key) = self
            .plans
            .iter()
            .min_by_key(|(_, k)| k.used)
            .map(|(key, _)| key.clone())
        else {
            return false;
        };
        if let Some(k) = self.plans.remove(&key) {
            self.cost -= k.cost;
        }
        true
    }
}

/// The plans (of type `P`: crate::probe::ProbePlan) of every namespace.
pub struct Plans<P> {
    budget: usize,
    spaces: Mutex<HashMap<String, Space<P>>>,
    reads: Arc<Semaphore>,
    reads_by_namespace: Mutex<HashMap<String, Arc<Semaphore>>>,
}

impl<P> Plans<P> {
    pub fn new(limits: Limits) -> Self {
        Plans {
            budget: limits.pattern_bytes + limits.value_bytes,
            spaces: Mutex::new(HashMap::new()),
            reads: Arc::new(Semaphore::new(READS)),
            reads_by_namespace: Mutex::new(HashMap::new()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Space<P>>> {
        self.spaces.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The plan kept for `ask`, if it is of the same object (UID),
    /// generation and owner, and fresh.
    pub fn get(&self, ask: &Ask, now: Instant) -> Option<Arc<P>> {
        let mut spaces = self.lock();
        let k = spaces
            .get_mut(&ask.namespace)?
            .plans
            .get_mut(&(ask.name.clone(), ask.purpose))?;
        let same = k.uid == ask.uid && k.generation == ask.generation && k.owner == ask.from;
        if !same || now.duration_since(k.read) >= PLAN_FRESH {
            return None;
        }
        k.used = now;
        Some(k.plan.clone())
    }

    /// Keeps `plan`, which holds `cost` bytes (patterns and values), for
    /// `ask`, making room among its namespace's plans; false when the plan
    /// alone is over the namespace's budget.
    pub fn put(&self, ask: &Ask, plan: Arc<P>, cost: usize, now: Instant) -> bool {
        if cost > self.budget {
            return false;
        }
        let mut spaces = self.lock();
        let space = spaces.entry(ask.namespace.clone()).or_default();
        if let Some(old) = space.plans.remove(&(ask.name.clone(), ask.purpose)) {
            space.cost -= old.cost;
        }
        space
            .plans
            .retain(|_, k| now.duration_since(k.read) < PLAN_FRESH);
        space.cost = space.plans.values().map(|k| k.cost).sum();
        while (space.cost + cost > self.budget || space.plans.len() >= PLANS_PER_NAMESPACE)
            && space.drop_oldest()
        {}
        space.cost += cost;
        space.plans.insert(
            (ask.name.clone(), ask.purpose),
            Kept {
                uid: ask.uid.clone(),
                generation: ask.generation,
                owner: ask.from.clone(),
                plan,
                read: now,
                used: now,
                cost,
            },
        );
        true
    }

    /// What `namespace`'s plans cost now.
    #[cfg(test)]
    fn cost_of(&self, namespace: &str) -> usize {
        self.lock().get(namespace).map_or(0, |s| s.cost)
    }

    /// A turn to read one Secret or ConfigMap for a plan of `namespace`.
    pub async fn read_turn(&self, namespace: &str) -> (ReadTurn, ReadTurn) {
        let mine = {
            let mut by = self
                .reads_by_namespace
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            by.retain(|_, s| Arc::strong_count(s) > 1);
            by.entry(namespace.to_string())
                .or_insert_with(|| Arc::new(Semaphore::new(READS_PER_NAMESPACE)))
                .clone()
        };
        let own = mine.acquire_owned().await.ok();
        let all = self.reads.clone().acquire_owned().await.ok();
        (ReadTurn(own), ReadTurn(all))
    }
}

/// Held while a read runs.
pub struct ReadTurn(#[allow(dead_code)] Option<tokio::sync::OwnedSemaphorePermit>);

#[cfg(test)]
mod tests {
    use super::*;

    fn ask(ns: &str, name: &str) -> Ask {
        Ask {
            from: "r1".into(),
            namespace: ns.into(),
            name: name.into(),
            uid: format!("{name}-uid"),
            generation: Some(1),
            purpose: Purpose::Zone,
            wait_millis: None,
        }
    }

    #[test]
    fn a_namespace_evicts_only_its_own_plans() {
        let plans = Plans::<()>::new(Limits {
            pattern_bytes: 600,
            value_bytes: 400,
        });
        let now = Instant::now();
        assert!(plans.put(&ask("quiet", "q"), Arc::new(()), 300, now));
        for i in 0..50 {
            let t = now + Duration::from_millis(i);
            assert!(plans.put(&ask("busy", &format!("b{i}")), Arc::new(()), 300, t));
            assert!(plans.cost_of("busy") <= 1000);
        }
        let later = now + Duration::from_secs(1);
        assert!(plans.get(&ask("quiet", "q"), later).is_some(), "kept");
        assert!(plans.get(&ask("busy", "b49"), later).is_some());
        assert!(plans.get(&ask("busy", "b0"), later).is_none(), "evicted");
        // Too large for the namespace's budget: not kept.
        assert!(!plans.put(&ask("busy", "huge"), Arc::new(()), 1001, later));
        // Another owner, generation or an old read: read again.
        let mut other = ask("quiet", "q");
        other.from = "r2".into();
        assert!(plans.get(&other, later).is_none());
        assert!(plans.get(&ask("quiet", "q"), now + PLAN_FRESH).is_none());
    }
}
