//! Compiles the regular expressions of the checkers in this replica's shard,
//! in the feed, before a checker reaches the engine.
//!
//! Compiling one checker's patterns takes up to a few milliseconds (bounded by
//! the limits of [`crate::probe::compile_patterns`]): too long for the engine
//! task, which dispatches every probe of the replica. The feed compiles them on
//! the blocking pool, one checker at a time, and remembers the result per
//! checker, so the watch events that do not touch the patterns (status writes,
//! label and annotation changes, Secret rotations) compile nothing.

use std::collections::HashMap;
use std::sync::Arc;

use crate::api::WebCheckerSpec;
use crate::probe::{Compiled, Patterns, compile_patterns, pattern_sources};
use crate::scheduler::{Command, Incoming};

/// The compiled patterns of each checker that has any, with their sources.
#[derive(Default)]
pub struct PatternCache {
    by_key: HashMap<String, (Vec<Option<String>>, Compiled)>,
}

impl PatternCache {
    /// Attaches the compiled patterns to an Upsert, and forgets the checkers
    /// the other commands remove.
    pub async fn attach(&mut self, cmd: Command) -> Command {
        if let Some(key) = cmd.forgotten_key() {
            self.by_key.remove(&key);
        }
        match cmd {
            Command::Upsert {
                checker: Incoming::Valid(wc, resolved, _),
                initial,
                seen,
            } => {
                let key = crate::api::object_key(
                    wc.metadata.namespace.as_deref().unwrap_or_default(),
                    wc.metadata.name.as_deref().unwrap_or_default(),
                );
                let compiled = self.compiled(key, &wc.spec).await;
                Command::Upsert {
                    checker: Incoming::Valid(wc, resolved, Some(compiled)),
                    initial,
                    seen,
                }
            }
            Command::Resync { present } => {
                self.by_key.retain(|k, _| present.contains(k));
                Command::Resync { present }
            }
            other => other,
        }
    }

    async fn compiled(&mut self, key: String, spec: &WebCheckerSpec) -> Compiled {
        let sources: Vec<Option<String>> = pattern_sources(spec)
            .into_iter()
            .map(|s| s.map(str::to_string))
            .collect();
        if sources.iter().all(Option::is_none) {
            self.by_key.remove(&key);
            return Arc::new(Ok(Patterns::default()));
        }
        if let Some((known, compiled)) = self.by_key.get(&key)
            && *known == sources
        {
            return compiled.clone();
        }
        let spec = spec.clone();
        let compiled = tokio::task::spawn_blocking(move || compile_patterns(&spec))
            .await
            .unwrap_or_else(|_| Err("the regular expressions could not be compiled".into()));
        let compiled = Arc::new(compiled);
        self.by_key.insert(key, (sources, compiled.clone()));
        compiled
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::WebChecker;

    fn upsert(name: &str, spec: &str) -> Command {
        let wc: WebChecker = serde_yaml::from_str(&format!(
            "apiVersion: test.network.io/v1alpha1\nkind: WebChecker\nmetadata: {{name: {name}, namespace: ns}}\nspec: {spec}"
        ))
        .unwrap();
        Command::Upsert {
            checker: Incoming::Valid(Box::new(wc), Default::default(), None),
            initial: false,
            seen: std::time::Instant::now(),
        }
    }

    fn compiled(cmd: Command) -> Compiled {
        match cmd {
            Command::Upsert {
                checker: Incoming::Valid(_, _, Some(c)),
                ..
            } => c,
            other => panic!("no patterns attached: {other:?}"),
        }
    }

    #[tokio::test]
    async fn compiles_once_per_pattern_change_and_forgets_removed_checkers() {
        let mut cache = PatternCache::default();
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
        assert!(e.as_ref().as_ref().unwrap_err().contains("too large"));
        assert!(Arc::ptr_eq(
            &e,
            &compiled(cache.attach(upsert("a", bad)).await)
        ));
        // No patterns: nothing kept.
        compiled(cache.attach(upsert("a", "{host: 'http://x'}")).await);
        assert!(cache.by_key.is_empty());
        compiled(cache.attach(upsert("a", a)).await);
        compiled(cache.attach(upsert("b", a)).await);
        cache.attach(Command::Remove { key: "ns/a".into() }).await;
        cache
            .attach(Command::Resync {
                present: Default::default(),
            })
            .await;
        assert!(cache.by_key.is_empty());
    }
}
