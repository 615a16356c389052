//! webchecker-operator: probes HTTP endpoints described by `WebChecker`
//! resources, sharded over several replicas.
//!
//! Module map (see docs/architecture.md):
//! - [`api`]: the CRD types;
//! - [`probe`]: the HTTP prober with phase timings and the forgery guard;
//! - [`scheduler`]: the per-replica engine (timer wheel, worker pool, reducer effects);
//! - `fairness`: the engine's ready queue, a fair share of the workers per namespace;
//! - `event_queue`: the Event publisher's queue, a fair share of it per namespace;
//! - [`status`]: the pure status reducer and write policy;
//! - [`writer`]: fenced status writes and drain acknowledgements;
//! - [`membership`]: this replica's Lease and the dispatch/write gates;
//! - [`ring`]: pure assignment logic (rendezvous hashing with bounded loads);
//! - [`shard`]: member view and judge rule, leader election, the sharder;
//! - [`feed`]: the watch of this replica's own shard;
//! - `resolver`: the Secret and ConfigMap values checkers reference, read off the feed,
//!   fairly per namespace (with [`secrets`]);
//! - [`compiler`]: the checkers' regular expressions, compiled in the feed;
//! - `budget`: per-namespace budgets of the replica's memory (`QuotaExceeded`);
//! - [`replica`]: one replica's tasks, start-up and graceful shutdown;
//! - [`egress`]: what the forgery guard learns from the cluster (API server, kubelets, restricted namespaces);
//! - [`kubeclient`]: API clients with deadlines and TCP keepalive;
//! - [`metrics`], [`server`]: Prometheus metrics and /metrics /healthz /readyz.

pub mod api;
mod budget;
mod compiler;
pub mod config;
pub(crate) mod egress;
pub(crate) mod error;
mod event_queue;
mod fairness;
mod feed;
pub(crate) mod kubeclient;
pub(crate) mod membership;
pub(crate) mod metrics;
#[cfg(test)]
mod mock_api;
mod preflight;
pub mod probe;
mod replica;
mod resolver;
pub mod ring;
pub(crate) mod scheduler;
pub(crate) mod secrets;
pub(crate) mod server;
pub(crate) mod shard;
pub mod status;
pub(crate) mod writer;

/// Runs one replica until SIGTERM/SIGINT (Ok) or until a vital task dies (Err).
pub async fn run(cfg: config::Config) -> Result<(), error::Error> {
    // Process-wide, like the log filter: read by the metrics of this process.
    metrics::configure_label_allowlist(&cfg.metric_labels_allowlist);
    replica::run(cfg).await
}
/// Name of the leader Lease (tests and tools read it).
pub use shard::elector::LEADER_LEASE;

/// Gives a map's memory back once it holds less than a quarter of its
/// capacity (a shard that shrank: load dropped, checkers moved away); maps
/// otherwise keep their largest capacity for good. Returns whether it shrank.
pub(crate) fn shrink_if_sparse<K: Eq + std::hash::Hash, V>(
    map: &mut std::collections::HashMap<K, V>,
) -> bool {
    let sparse = map.capacity() > 1024 && map.len() < map.capacity() / 4;
    if sparse {
        map.shrink_to_fit();
    }
    sparse
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
