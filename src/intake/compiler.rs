//! Compiles the regular expressions of the checkers in this replica's shard,
//! in the feed, before a checker reaches the engine, and keeps each
//! namespace's compiled patterns within its budget (webchecker_core::namespace_budget).
//!
//! Compiling one checker's patterns takes up to a few milliseconds (bounded by
//! the limits of [`crate::probe::compile_patterns`]): too long for the engine
//! task, which dispatches every probe of the replica. The feed compiles them on
//! the blocking pool, one checker at a time, and remembers the result per
//! checker, so the watch events that do not touch the patterns (status writes,
//! label and annotation changes, Secret rotations) compile nothing. Patterns of
//! a suspended checker are not compiled, and those of a checker over its
//! namespace's budget are not kept: it is compiled again when room is made.

use std::collections::HashMap;
use std::sync::Arc;

use crate::api::{WebChecker, WebCheckerSpec};
use crate::checker::Change;
use crate::engine::Command;
use crate::intake::found::{Step, forgotten};
use crate::probe::{Compiled, PatternError, Patterns, compile_patterns, pattern_sources};
use webchecker_core::namespace_budget::{Admission, Budgets, Kind};

type Sources = Vec<Option<String>>;

/// One checker with patterns.
struct Held {
    sources: Sources,
    /// To compile again when the checker gets room in its namespace.
    spec: WebCheckerSpec,
    /// `None` while over the namespace's budget.
    compiled: Option<Compiled>,
    /// Compiled size, counted against the namespace's budget.
    cost: usize,
}

/// The compiled patterns of each checker that has any, with their sources,
/// within the namespaces' budgets.
pub struct PatternCache {
    by_key: HashMap<String, Held>,
    budgets: Budgets,
}

impl PatternCache {
    /// `budget`: the compiled size of one namespace's patterns.
    pub fn new(budget: usize) -> Self {
        PatternCache {
            by_key: HashMap::new(),
            budgets: Budgets::new(Kind::Patterns, budget),
        }
    }

    /// Attaches the compiled patterns to a valid checker, and forgets the
    /// checkers the commands remove. First the step, then a
    /// [`Command::Change(Change::Patterns)`] for each other checker that a change of budget
    /// use moved over or under its namespace's budget.
    pub async fn attach(&mut self, step: Step<()>) -> Vec<Step<Compiled>> {
        let mut moved = Vec::new();
        let step = match step {
            Step::Found(found, ()) => {
                let (compiled, others) = self.compiled(&found.wc).await;
                moved = others;
                Step::Found(found, compiled)
            }
            Step::Command(Command::Change(Change::Resync { present })) => {
                let gone: Vec<String> = self
                    .by_key
                    .keys()
                    .filter(|k| !present.contains(*k))
                    .cloned()
                    .collect();
                for k in gone {
                    moved.extend(self.forget(&k));
                }
                Step::Command(Command::Change(Change::Resync { present }))
            }
            Step::Command(cmd) => {
                if let Some(key) = forgotten(&cmd) {
                    moved = self.forget(&key);
                }
                Step::Command(cmd)
            }
        };
        let mut out = vec![step];
        for (key, verdict) in moved {
            let compiled = self.settle(&key, verdict).await;
            out.push(Step::Command(Command::Change(Change::Patterns {
                key,
                compiled,
            })));
        }
        out
    }

    /// Drops a checker; the others that now fit.
    fn forget(&mut self, key: &str) -> Vec<(String, Admission)> {
        self.by_key.remove(key);
        self.budgets.remove(key)
    }

    async fn compiled(&mut self, wc: &WebChecker) -> (Compiled, Vec<(String, Admission)>) {
        let namespace = wc.metadata.namespace.as_deref().unwrap_or_default();
        let name = wc.metadata.name.as_deref().unwrap_or_default();
        let key = crate::api::object_key(namespace, name);
        let spec = &wc.spec;
        let sources: Sources = pattern_sources(spec)
            .into_iter()
            .map(|s| s.map(str::to_string))
            .collect();
        if sources.iter().all(Option::is_none) || spec.suspend == Some(true) {
            // Nothing to compile (a suspended checker is compiled when it resumes).
            let others = self.forget(&key);
            return (Arc::new(Ok(Patterns::default())), others);
        }
        // The same patterns as before: their compilation, or what they cost
        // when they were over the budget (not compiled again until they fit).
        let known = self
            .by_key
            .get(&key)
            .filter(|h| h.sources == sources)
            .map(|h| (h.compiled.clone(), h.cost));
        let (compiled, cost) = match known {
            Some(k) => k,
            None => {
                let c = compile(spec).await;
                let cost = match c.as_ref() {
                    Ok(p) => p.bytes,
                    // A failure is remembered (with its message) and costs nothing.
                    Err(_) => 0,
                };
                (Some(c), cost)
            }
        };
        let order = (wc.metadata.creation_timestamp.clone(), name.to_string());
        let (verdict, others) = self.budgets.set(&key, namespace, order, cost);
        let compiled = match verdict {
            Admission::Admitted => Some(match compiled {
                Some(c) => c,
                None => compile(spec).await,
            }),
            Admission::Over(_) => None,
        };
        let held = Held {
            sources,
            spec: spec.clone(),
            compiled: compiled.clone(),
            cost,
        };
        self.by_key.insert(key, held);
        let compiled = match verdict {
            Admission::Admitted => compiled.expect("admitted: compiled above"),
            Admission::Over(msg) => Arc::new(Err(PatternError::OverBudget(msg))),
        };
        (compiled, others)
    }

    /// The patterns of a checker whose side of the budget changed: compiled
    /// again when it now fits, dropped when it no longer does.
    async fn settle(&mut self, key: &str, verdict: Admission) -> Compiled {
        let Some(held) = self.by_key.get_mut(key) else {
            return Arc::new(Ok(Patterns::default()));
        };
        match verdict {
            Admission::Over(msg) => {
                held.compiled = None;
                Arc::new(Err(PatternError::OverBudget(msg)))
            }
            Admission::Admitted => match held.compiled.clone() {
                Some(c) => c,
                None => {
                    let c = compile(&held.spec).await;
                    held.compiled = Some(c.clone());
                    c
                }
            },
        }
    }
}

/// Compiles on the blocking pool.
async fn compile(spec: &WebCheckerSpec) -> Compiled {
    let spec = spec.clone();
    let compiled = tokio::task::spawn_blocking(move || compile_patterns(&spec))
        .await
        .unwrap_or_else(|_| Err("the regular expressions could not be compiled".into()));
    Arc::new(compiled.map_err(PatternError::Invalid))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn checker(name: &str, created: i64, spec: &str) -> Step<()> {
        let wc: WebChecker = serde_yaml::from_str(&format!(
            "apiVersion: test.network.io/v1alpha1\nkind: WebChecker\nmetadata: {{name: {name}, namespace: ns, creationTimestamp: '2026-01-01T00:00:{created:02}Z'}}\nspec: {spec}"
        ))
        .unwrap();
        let found = crate::intake::found::Found {
            wc: Box::new(wc),
            info: Default::default(),
            initial: false,
            seen: std::time::Instant::now(),
        };
        Step::Found(Box::new(found), ())
    }

    fn upsert(name: &str, spec: &str) -> Step<()> {
        checker(name, 0, spec)
    }

    fn compiled(mut steps: Vec<Step<Compiled>>) -> Compiled {
        match steps.remove(0) {
            Step::Found(_, c) => c,
            other => panic!("no patterns attached: {other:?}"),
        }
    }

    fn command(c: Command) -> Step<()> {
        Step::Command(c)
    }

    fn cache() -> PatternCache {
        PatternCache::new(64 << 20)
    }

    #[tokio::test]
    async fn compiles_once_per_pattern_change_and_forgets_removed_checkers() {
        let mut cache = cache();
        let a = "{host: 'http://x', bodyMatch: {regex: 'ok'}}";
        let first = compiled(cache.attach(upsert("a", a)).await);
        assert!(first.as_ref().as_ref().unwrap().body.is_some());
        // The same patterns (a status write, a new label): the same compilation.
        let again = compiled(cache.attach(upsert("a", a)).await);
        assert!(Arc::ptr_eq(&first, &again));
        // Other patterns: compiled again.
        let b = "{host: 'http://x', bodyMatch: {regex: 'ko'}}";
        let other = compiled(cache.attach(upsert("a", b)).await);
        assert!(!Arc::ptr_eq(&first, &other));
        assert_eq!(
            other
                .as_ref()
                .as_ref()
                .unwrap()
                .body
                .as_ref()
                .unwrap()
                .as_str(),
            "ko"
        );
        // A failure is remembered too, with its message.
        let bad = "{host: 'http://x', bodyMatch: {regex: '\\w{1000}'}}";
        let e = compiled(cache.attach(upsert("a", bad)).await);
        assert!(matches!(e.as_ref(), Err(PatternError::Invalid(m)) if m.contains("too large")));
        assert!(Arc::ptr_eq(
            &e,
            &compiled(cache.attach(upsert("a", bad)).await)
        ));
        // No patterns, or suspended: nothing compiled, nothing kept.
        compiled(cache.attach(upsert("a", "{host: 'http://x'}")).await);
        assert!(cache.by_key.is_empty());
        let suspended = "{host: 'http://x', suspend: true, bodyMatch: {regex: 'ok'}}";
        let none = compiled(cache.attach(upsert("a", suspended)).await);
        assert!(none.as_ref().as_ref().unwrap().body.is_none());
        assert!(cache.by_key.is_empty());
        compiled(cache.attach(upsert("a", a)).await);
        compiled(cache.attach(upsert("b", a)).await);
        cache
            .attach(command(Command::Change(Change::Remove {
                key: "ns/a".into(),
            })))
            .await;
        cache
            .attach(command(Command::Change(Change::Resync {
                present: Default::default(),
            })))
            .await;
        assert!(cache.by_key.is_empty());
    }

    #[tokio::test]
    async fn checkers_over_the_namespace_budget_keep_no_patterns_until_room_is_made() {
        // A Unicode class compiles to some 100 KiB or more: room for two.
        let spec = "{host: 'http://x', bodyMatch: {regex: '\\w{3}'}}";
        let size = compile_patterns(&serde_yaml::from_str(spec).unwrap())
            .unwrap()
            .bytes;
        let mut cache = PatternCache::new(2 * size + size / 2);
        for (i, name) in ["c0", "c1"].iter().enumerate() {
            let c = compiled(cache.attach(checker(name, i as i64, spec)).await);
            assert!(c.is_ok(), "{name}");
        }
        let over = compiled(cache.attach(checker("c2", 2, spec)).await);
        assert!(
            matches!(over.as_ref(), Err(PatternError::OverBudget(m)) if m.contains("--namespace-pattern-budget-mib")),
            "{over:?}"
        );
        assert!(cache.by_key["ns/c2"].compiled.is_none(), "not kept");
        // c0 is deleted: c2 fits, compiled again, and the engine hears of it.
        let out = cache
            .attach(command(Command::Change(Change::Remove {
                key: "ns/c0".into(),
            })))
            .await;
        assert_eq!(out.len(), 2);
        match &out[1] {
            Step::Command(Command::Change(Change::Patterns { key, compiled })) => {
                assert_eq!(key, "ns/c2");
                assert!(compiled.as_ref().as_ref().unwrap().body.is_some());
            }
            other => panic!("{other:?}"),
        }
        // An older checker arrives: the newest (c2) makes way.
        let out = cache.attach(checker("old", 0, spec)).await;
        assert_eq!(out.len(), 2);
        assert!(matches!(
            &out[1],
            Step::Command(Command::Change(Change::Patterns { key, compiled })) if key == "ns/c2" && compiled.is_err()
        ));
    }
}
