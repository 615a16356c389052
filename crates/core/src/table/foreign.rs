//! Probes other replicas ask this one for (confirmations, zones' probes:
//! crate::confirm::service) share the worker pool with the checkers' own:
//! they wait in the same fair queue, in the namespace of the checker they
//! probe, so `--workers` bounds them too and a namespace's asks take from
//! that namespace's share, not from everyone's.

use std::collections::HashMap;
use std::time::Duration;

use super::{Clock, Effect, Table};

/// Each foreign probe's namespace, and whether it started.
#[derive(Default)]
pub struct Foreign(HashMap<String, (String, bool)>);

impl Table {
    pub fn foreign_asked(&mut self, key: String, namespace: String, hold: Duration, clock: Clock) {
        if self.stopping {
            self.out.push(Effect::DropForeign { key });
            return;
        }
        // Counted as a checker of the namespace while it waits or runs, so
        // the namespace has a share even when this replica owns none of it.
        self.ready.add_checker(&namespace);
        self.ready.push(&namespace, key.clone(), clock.now, hold);
        self.foreign.0.insert(key, (namespace, false));
    }

    /// Starts the foreign probe `key` of `ns` if it is one; false otherwise.
    pub fn foreign_starts(&mut self, ns: &str, key: &str) -> bool {
        let Some((_, started)) = self.foreign.0.get_mut(key) else {
            return false;
        };
        *started = true;
        self.ready.started(ns);
        self.out.push(Effect::ProbeForeign { key: key.into() });
        true
    }

    pub fn foreign_done(&mut self, key: &str) {
        if let Some((ns, started)) = self.foreign.0.remove(key) {
            if started {
                self.ready.finished(&ns);
            }
            self.ready.remove_checker(&ns);
        }
    }

    /// Drops every due probe, telling those who wait for a foreign one.
    pub fn clear_ready(&mut self) {
        self.ready.clear_ready();
        let queued: Vec<String> = self
            .foreign
            .0
            .iter()
            .filter(|(_, (_, started))| !started)
            .map(|(k, _)| k.clone())
            .collect();
        for key in queued {
            self.foreign_done(&key);
            self.out.push(Effect::DropForeign { key });
        }
    }
}
