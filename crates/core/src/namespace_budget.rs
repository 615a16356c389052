//! Per-namespace budgets of a replica's memory: which checkers of a namespace
//! the replica keeps compiled patterns for, and Secret/ConfigMap values
//! (docs/security.md, "Take the replica's memory").
//!
//! Each checker costs what the replica keeps for it while it probes: the
//! compiled size of its patterns (counted by the feed), the bytes of the
//! values it references (counted by the resolver). The checkers of a namespace are admitted
//! oldest first (creation time, then name, so every replica and every
//! restart decides the same way) as long as they fit; the others are
//! `Ready=False` with reason `QuotaExceeded` and cost nothing. A checker
//! that is removed or shrinks makes room for the next ones in that order.
//!
//! Pure: the feed tells it what each checker costs and hears which checkers
//! changed sides.

use std::collections::{BTreeMap, HashMap};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

/// What the checkers of one namespace may cost on one replica together.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Compiled size of the patterns (`--namespace-pattern-budget-mib`).
    pub pattern_bytes: usize,
    /// Bytes of the referenced values (`--namespace-value-budget-mib`).
    pub value_bytes: usize,
}

/// What a budget counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Patterns,
    Values,
}

/// Where a checker stands in its namespace's queue: oldest first.
pub type Order = (Option<Time>, String);

/// Whether a checker fits its namespace's budget.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Admission {
    Admitted,
    /// The `QuotaExceeded` message.
    Over(String),
}

struct Member {
    key: String,
    cost: usize,
    admitted: bool,
}

/// The admitted checkers of every namespace, for one kind of cost. Owned by
/// the checker feed (patterns) or the resolver (values).
pub struct Budgets {
    kind: Kind,
    limit: usize,
    spaces: HashMap<String, BTreeMap<Order, Member>>,
    /// Checker key -> its namespace and order.
    placed: HashMap<String, (String, Order)>,
}

impl Budgets {
    pub fn new(kind: Kind, limit: usize) -> Self {
        Budgets {
            kind,
            limit,
            spaces: HashMap::new(),
            placed: HashMap::new(),
        }
    }

    /// A checker's cost is now `cost` bytes. Returns its verdict and the
    /// other checkers of the namespace whose verdict changed.
    pub fn set(
        &mut self,
        key: &str,
        namespace: &str,
        order: Order,
        cost: usize,
    ) -> (Admission, Vec<(String, Admission)>) {
        self.forget(key);
        let space = self.spaces.entry(namespace.to_string()).or_default();
        space.insert(
            order.clone(),
            Member {
                key: key.to_string(),
                cost,
                // Decided below; `true` so that a checker that does not fit
                // counts as a change (and gets its message).
                admitted: true,
            },
        );
        self.placed
            .insert(key.to_string(), (namespace.to_string(), order));
        let mut changed = self.rebalance(namespace);
        let mine = match changed.iter().position(|(k, _)| k == key) {
            Some(i) => changed.remove(i).1,
            None => Admission::Admitted,
        };
        (mine, changed)
    }

    /// Where a checker stands in its namespace's queue, if it is counted.
    pub fn order_of(&self, key: &str) -> Option<Order> {
        self.placed.get(key).map(|(_, o)| o.clone())
    }

    /// A checker is gone (deleted, moved, nothing to count): the checkers
    /// that now fit.
    pub fn remove(&mut self, key: &str) -> Vec<(String, Admission)> {
        match self.forget(key) {
            Some(namespace) => self.rebalance(&namespace),
            None => Vec::new(),
        }
    }

    fn forget(&mut self, key: &str) -> Option<String> {
        let (namespace, order) = self.placed.remove(key)?;
        let space = self.spaces.get_mut(&namespace)?;
        space.remove(&order);
        if space.is_empty() {
            self.spaces.remove(&namespace);
        }
        Some(namespace)
    }

    /// Admits the namespace's checkers oldest first while they fit; the
    /// checkers whose verdict changed.
    fn rebalance(&mut self, namespace: &str) -> Vec<(String, Admission)> {
        let Some(space) = self.spaces.get_mut(namespace) else {
            return Vec::new();
        };
        let limit = self.limit;
        let mut used = 0usize;
        let mut changed = Vec::new();
        for m in space.values_mut() {
            let fits = used + m.cost <= limit;
            if fits {
                used += m.cost;
            }
            if fits != m.admitted {
                m.admitted = fits;
                let verdict = if fits {
                    Admission::Admitted
                } else {
                    Admission::Over(over(self.kind, m.cost, limit))
                };
                changed.push((m.key.clone(), verdict));
            }
        }
        changed
    }

    /// Bytes the admitted checkers of `namespace` hold.
    #[cfg(test)]
    fn used(&self, namespace: &str) -> usize {
        self.spaces.get(namespace).map_or(0, |s| {
            s.values().filter(|m| m.admitted).map(|m| m.cost).sum()
        })
    }
}

/// The QuotaExceeded message: what the checker needs, the budget, the flag
/// and what to do.
fn over(kind: Kind, need: usize, limit: usize) -> String {
    let (what, flag, fix) = match kind {
        Kind::Patterns => (
            "its patterns need",
            "--namespace-pattern-budget-mib",
            "simplify or remove checkers",
        ),
        Kind::Values => (
            "its Secret and ConfigMap values take",
            "--namespace-value-budget-mib",
            "reference smaller values or remove checkers",
        ),
    };
    format!(
        "{what} {}; older checkers of this namespace use its budget ({} per replica, {flag}): {fix}, \
         or ask for a larger budget",
        size(need),
        size(limit)
    )
}

/// A size for a person: KiB below 1 MiB, else MiB with one decimal.
pub fn size(bytes: usize) -> String {
    if bytes < 1 << 20 {
        format!("{} KiB", bytes.div_ceil(1 << 10))
    } else if bytes.is_multiple_of(1 << 20) {
        format!("{} MiB", bytes >> 20)
    } else {
        format!("{:.1} MiB", bytes as f64 / f64::from(1 << 20))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: usize = 1 << 20;

    fn at(secs: i64, name: &str) -> Order {
        let t = k8s_openapi::jiff::Timestamp::from_second(1_700_000_000 + secs).unwrap();
        (Some(Time(t)), name.to_string())
    }

    fn budgets() -> Budgets {
        Budgets::new(Kind::Patterns, 10 * MIB)
    }

    #[test]
    fn the_newest_checkers_of_a_namespace_over_its_budget_are_refused() {
        let mut b = budgets();
        for i in 0..3 {
            let (v, changed) = b.set(&format!("a/c{i}"), "a", at(i, &format!("c{i}")), 3 * MIB);
            assert_eq!(v, Admission::Admitted, "c{i}");
            assert!(changed.is_empty());
        }
        let (v, _) = b.set("a/c3", "a", at(3, "c3"), 3 * MIB);
        assert!(
            matches!(&v, Admission::Over(m) if m.contains("need 3 MiB") && m.contains("(10 MiB per replica")),
            "{v:?}"
        );
        // A smaller one still fits in what is left.
        assert_eq!(b.set("a/c4", "a", at(4, "c4"), MIB).0, Admission::Admitted);
        assert_eq!(b.used("a"), 10 * MIB);
        // Another namespace has a budget of its own.
        assert_eq!(
            b.set("b/x", "b", at(0, "x"), 9 * MIB).0,
            Admission::Admitted
        );
    }

    #[test]
    fn an_older_checker_listed_late_displaces_the_newest_and_removals_make_room() {
        let mut b = budgets();
        b.set("a/new", "a", at(10, "new"), 6 * MIB);
        // Listed after it (a re-list comes in name order), but created first.
        let (v, changed) = b.set("a/old", "a", at(1, "old"), 6 * MIB);
        assert_eq!(v, Admission::Admitted);
        assert_eq!(changed.len(), 1);
        assert_eq!(changed[0].0, "a/new");
        assert!(matches!(changed[0].1, Admission::Over(_)));
        // A small checker still fits beside "old": admission is per checker,
        // not a prefix.
        assert_eq!(
            b.set("a/small", "a", at(20, "small"), MIB).0,
            Admission::Admitted
        );
        // "old" shrinks: "new" fits again.
        let (v, changed) = b.set("a/old", "a", at(1, "old"), 2 * MIB);
        assert_eq!(v, Admission::Admitted);
        assert_eq!(changed, vec![("a/new".to_string(), Admission::Admitted)]);
        // "old" is deleted: nothing changes for the others (they fit).
        assert!(b.remove("a/old").is_empty());
        assert_eq!(b.used("a"), 7 * MIB);
        assert!(b.remove("a/unknown").is_empty());
    }

    #[test]
    fn same_creation_time_is_decided_by_name_and_empty_namespaces_are_forgotten() {
        let mut b = budgets();
        b.set("a/b", "a", at(0, "b"), 6 * MIB);
        let (v, changed) = b.set("a/a", "a", at(0, "a"), 6 * MIB);
        assert_eq!(v, Admission::Admitted);
        assert_eq!(changed[0].0, "a/b");
        // A checker without patterns costs nothing.
        assert_eq!(b.set("a/z", "a", at(0, "z"), 0).0, Admission::Admitted);
        b.remove("a/a");
        b.remove("a/b");
        b.remove("a/z");
        assert!(b.spaces.is_empty() && b.placed.is_empty());
    }

    #[test]
    fn sizes_read_well() {
        assert_eq!(size(1), "1 KiB");
        assert_eq!(size(64 << 10), "64 KiB");
        assert_eq!(size(MIB), "1 MiB");
        assert_eq!(size(3 * MIB / 2), "1.5 MiB");
    }
}
