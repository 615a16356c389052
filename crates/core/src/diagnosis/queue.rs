//! Diagnoses waiting for a reader, fair between namespaces: each namespace
//! keeps at most [`Queue::per_namespace`] waiting (the newest replace
//! nothing: the rest are dropped and counted), and the reader takes them
//! round-robin, so a flood of transitions in one namespace delays
//! another's diagnosis by at most one of its own.

use std::collections::{HashMap, VecDeque};

use super::Subject;

/// One checker's diagnosis to make.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Queued {
    pub key: String,
    pub seq: u64,
    pub namespace: String,
    pub subject: Subject,
}

#[derive(Debug)]
pub struct Queue {
    per_namespace: usize,
    waiting: HashMap<String, VecDeque<Queued>>,
    /// Namespaces with something waiting, in turn order.
    turns: VecDeque<String>,
}

impl Queue {
    pub fn new(per_namespace: usize) -> Self {
        Queue {
            per_namespace: per_namespace.max(1),
            waiting: HashMap::new(),
            turns: VecDeque::new(),
        }
    }

    /// Queues `q`; false when its namespace already has its fill waiting
    /// (or this checker waits already: one diagnosis per checker at a time).
    pub fn push(&mut self, q: Queued) -> bool {
        let waiting = self.waiting.entry(q.namespace.clone()).or_default();
        if waiting.len() >= self.per_namespace || waiting.iter().any(|w| w.key == q.key) {
            return false;
        }
        if waiting.is_empty() {
            self.turns.push_back(q.namespace.clone());
        }
        waiting.push_back(q);
        true
    }

    /// The next diagnosis to make: the oldest of the namespace whose turn it is.
    pub fn pop(&mut self) -> Option<Queued> {
        let ns = self.turns.pop_front()?;
        let waiting = self.waiting.get_mut(&ns)?;
        let q = waiting.pop_front();
        if waiting.is_empty() {
            self.waiting.remove(&ns);
        } else {
            self.turns.push_back(ns);
        }
        q
    }

    pub fn len(&self) -> usize {
        self.waiting.values().map(VecDeque::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.turns.is_empty()
    }
}
