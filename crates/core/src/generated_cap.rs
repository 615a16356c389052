//! The cap on the checkers generated in one namespace
//! (`--discovery-max-checkers-per-namespace`): a namespace's sources are
//! served oldest first (by creation, then kind and name), each with all its
//! checkers while they fit; a source that does not fit gets none (and a
//! `TooManyCheckers` Warning), a later smaller one may still fit. The same
//! sources give the same choice on every leader. Pure.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::hash::Hash;

/// The checkers each source of each namespace wants, and the cap.
pub struct Budget<K> {
    cap: usize,
    /// Per namespace: (age, source) -> checkers wanted.
    wants: HashMap<String, BTreeMap<(i64, K), usize>>,
    /// A source -> its namespace and age.
    place: HashMap<K, (String, i64)>,
}

impl<K: Clone + Ord + Hash> Budget<K> {
    pub fn new(cap: usize) -> Self {
        Budget {
            cap,
            wants: HashMap::new(),
            place: HashMap::new(),
        }
    }

    pub fn cap(&self) -> usize {
        self.cap
    }

    /// Sources of `namespace` whose wants are known.
    pub fn count_in(&self, namespace: &str) -> usize {
        self.wants.get(namespace).map_or(0, BTreeMap::len)
    }

    /// Whether `k`'s wants are known.
    pub fn knows(&self, k: &K) -> bool {
        self.place.contains_key(k)
    }

    /// Source `k` of `namespace`, created at `age` (seconds), wants `n`
    /// checkers. Returns the other sources of the namespace whose fit it changed.
    pub fn set(&mut self, k: &K, namespace: &str, age: i64, n: usize) -> Vec<K> {
        let before = self.fitting(namespace);
        self.forget(k);
        self.place.insert(k.clone(), (namespace.to_string(), age));
        let of = self.wants.entry(namespace.to_string()).or_default();
        of.insert((age, k.clone()), n);
        self.changed(namespace, before, k)
    }

    /// Source `k` is gone; the other sources whose fit that changed.
    pub fn remove(&mut self, k: &K) -> Vec<K> {
        let Some((namespace, _)) = self.place.get(k).cloned() else {
            return Vec::new();
        };
        let before = self.fitting(&namespace);
        self.forget(k);
        self.changed(&namespace, before, k)
    }

    /// Whether all of `k`'s checkers are made (an unknown source has none).
    pub fn fits(&self, k: &K) -> bool {
        self.place
            .get(k)
            .is_some_and(|(ns, _)| self.fitting(ns).is_none_or(|f| f.contains(k)))
    }

    /// Checkers made in `namespace`.
    #[cfg(test)]
    pub fn used(&self, namespace: &str) -> usize {
        let Some(of) = self.wants.get(namespace) else {
            return 0;
        };
        match self.fitting(namespace) {
            None => of.values().sum(),
            Some(fit) => of
                .iter()
                .filter(|((_, k), _)| fit.contains(k))
                .map(|(_, n)| n)
                .sum(),
        }
    }

    fn forget(&mut self, k: &K) {
        if let Some((ns, age)) = self.place.remove(k)
            && let Some(of) = self.wants.get_mut(&ns)
        {
            of.remove(&(age, k.clone()));
            if of.is_empty() {
                self.wants.remove(&ns);
            }
        }
    }

    /// The sources of `namespace` that fit; None when all do (the common
    /// case, found without a walk).
    fn fitting(&self, namespace: &str) -> Option<HashSet<K>> {
        let of = self.wants.get(namespace)?;
        if of.values().sum::<usize>() <= self.cap {
            return None;
        }
        let mut used = 0;
        let mut fit = HashSet::new();
        for ((_, k), n) in of {
            if used + n <= self.cap {
                used += n;
                fit.insert(k.clone());
            }
        }
        Some(fit)
    }

    fn changed(&self, namespace: &str, before: Option<HashSet<K>>, but: &K) -> Vec<K> {
        let after = self.fitting(namespace);
        if before.is_none() && after.is_none() {
            return Vec::new();
        }
        let Some(of) = self.wants.get(namespace) else {
            return Vec::new();
        };
        let fits = |set: &Option<HashSet<K>>, k: &K| set.as_ref().is_none_or(|s| s.contains(k));
        of.keys()
            .map(|(_, k)| k)
            .filter(|k| *k != but && fits(&before, k) != fits(&after, k))
            .cloned()
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_oldest_sources_fit_first_and_a_later_small_one_may_too() {
        let mut b: Budget<&str> = Budget::new(10);
        assert!(b.set(&"old", "web", 1, 6).is_empty());
        assert!(b.set(&"big", "web", 2, 5).is_empty(), "a new source alone");
        assert!(b.fits(&"old") && !b.fits(&"big"));
        assert!(b.set(&"small", "web", 3, 4).is_empty());
        assert!(b.fits(&"small"), "6 + 4 fit; big's 5 did not");
        assert_eq!(b.used("web"), 10);
        assert!(b.set(&"elsewhere", "shop", 0, 10).is_empty());
        assert!(b.fits(&"elsewhere"), "each namespace has its own cap");
        assert!(!b.fits(&"unknown"));
    }

    #[test]
    fn a_change_says_which_others_now_fit_or_not() {
        let mut b: Budget<&str> = Budget::new(10);
        b.set(&"a", "web", 1, 4);
        b.set(&"b", "web", 2, 4);
        b.set(&"c", "web", 3, 2);
        assert!(b.fits(&"c"));
        let mut moved = b.set(&"a", "web", 1, 8);
        moved.sort();
        assert_eq!(moved, ["b"], "a grew: b no longer fits, c still does");
        assert!(!b.fits(&"b") && b.fits(&"c"));
        assert_eq!(b.remove(&"a"), ["b"]);
        assert!(b.fits(&"b") && b.fits(&"c"));
        assert!(b.remove(&"a").is_empty(), "gone already");
        assert_eq!(b.used("web"), 6);
    }

    #[test]
    fn equal_ages_are_ordered_by_the_key() {
        let mut b: Budget<(u8, &str)> = Budget::new(3);
        b.set(&(1, "z"), "web", 5, 3);
        b.set(&(0, "y"), "web", 5, 3);
        assert!(b.fits(&(0, "y")) && !b.fits(&(1, "z")));
    }
}
