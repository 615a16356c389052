//! The pure core of webchecker-operator: the state machines that decide,
//! with the clock and every random draw passed in, so each rule is tested in
//! milliseconds. No runtime, no client, no server, no metrics: the operator's
//! shells feed them what they heard and carry out what they return.
//!
//! - [`table`]: every checker's lifecycle as a pure state machine, with the
//!   [`status`] reducer of each checker and the nouns it shares with the
//!   operator's intake and confirmer ([`checker`], [`ask`]);
//! - [`ring`]: the consistent-hash ring that places checkers on members;
//! - [`book`]: the sharder's book of who owns what and the moves it plans,
//!   within the handover [`window`];
//! - [`election`]: when a candidate takes the leader Lease;
//! - [`members`]: the view of the member Leases and the judge rule;
//! - [`gate`]: what a replica may do (dispatch, write, judge) given what its
//!   Lease renewals heard;
//! - [`fairness`]: the engine's ready queue, namespaces in turn;
//! - [`arrival`]: when a checker's first probe is due;
//! - [`namespace_budget`]: per-namespace budgets of a replica's memory;
//! - [`generated_cap`]: the cap on the checkers discovery generates in one
//!   namespace;
//! - [`slo`]: the ledger of a checker's objective (availability, error
//!   budget, burn rates) and the snapshot a new owner resumes it from.

pub mod arrival;
pub mod ask;
pub mod book;
pub mod checker;
pub mod dependencies;
pub mod diagnosis;
pub mod election;
pub mod fairness;
pub mod gate;
pub mod generated_cap;
pub mod maintenance;
pub mod members;
pub mod namespace_budget;
pub mod ring;
pub mod slo;
pub mod status;
pub mod table;
pub mod window;

/// Gives a map's memory back once it holds less than a quarter of its
/// capacity (a shard that shrank: load dropped, checkers moved away); maps
/// otherwise keep their largest capacity for good. Returns whether it shrank.
pub fn shrink_if_sparse<C: Shrinkable>(map: &mut C) -> bool {
    let (len, capacity) = map.fill();
    let sparse = capacity > 1024 && len < capacity / 4;
    if sparse {
        map.shrink();
    }
    sparse
}

/// A collection that keeps its largest capacity, for [`shrink_if_sparse`].
pub trait Shrinkable {
    /// (len, capacity)
    fn fill(&self) -> (usize, usize);
    fn shrink(&mut self);
}

impl<K: Eq + std::hash::Hash, V, S: std::hash::BuildHasher> Shrinkable
    for std::collections::HashMap<K, V, S>
{
    fn fill(&self) -> (usize, usize) {
        (self.len(), self.capacity())
    }
    fn shrink(&mut self) {
        self.shrink_to_fit();
    }
}

impl<T> Shrinkable for std::collections::VecDeque<T> {
    fn fill(&self) -> (usize, usize) {
        (self.len(), self.capacity())
    }
    fn shrink(&mut self) {
        self.shrink_to_fit();
    }
}

impl<K: Eq + std::hash::Hash, S: std::hash::BuildHasher> Shrinkable
    for std::collections::HashSet<K, S>
{
    fn fill(&self) -> (usize, usize) {
        (self.len(), self.capacity())
    }
    fn shrink(&mut self) {
        self.shrink_to_fit();
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    #[test]
    fn a_map_shrinks_only_once_mostly_empty() {
        let mut m: HashMap<u32, u32> = (0..4000).map(|i| (i, i)).collect();
        let full = m.capacity();
        m.retain(|k, _| *k < 2000);
        assert!(!super::shrink_if_sparse(&mut m), "half full stays");
        assert!(
            m.capacity() * 2 > full,
            "capacity {} of {full}",
            m.capacity()
        );
        m.retain(|k, _| *k < 10);
        assert!(super::shrink_if_sparse(&mut m));
        assert!(m.capacity() < 100, "capacity {}", m.capacity());
        let mut small: HashMap<u32, u32> = (0..100)
            .collect::<Vec<_>>()
            .into_iter()
            .map(|i| (i, i))
            .collect();
        small.clear();
        assert!(
            !super::shrink_if_sparse(&mut small),
            "small maps are left alone"
        );
    }
}
