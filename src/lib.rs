//! webchecker-operator: probes HTTP endpoints described by `WebChecker`
//! resources, sharded over several replicas.
//!
//! The operator's I/O shells and their wiring, on top of the workspace's
//! crates (docs/architecture.md, "Layers"): `webchecker_api` (the CRD types
//! and the assignment protocol, re-exported as [`api`] and [`assignment`]),
//! `webchecker_plan` and `webchecker_probe` (the prober, re-exported as
//! [`probe`]) and `webchecker_core` (the pure state machines). The folders,
//! from the bottom up:
//! - `observe`: metrics, /metrics /healthz /readyz, Kubernetes Events;
//! - `kubeio`: API clients with deadlines, start-up checks, what the forgery
//!   guard learns from the cluster;
//! - `coordination`: this replica's Lease and gates, the member view, leader
//!   election, the sharder;
//! - [`ask`]: asking another replica to confirm a failure or probe from its
//!   zone: the client and its tokens;
//! - [`engine`]: the async shell of the checker table (timers, the worker
//!   pool, probe tasks) and the fenced status writer;
//! - `intake`: the shard's checkers with their Secret/ConfigMap values and
//!   compiled patterns, under per-namespace budgets;
//! - [`confirm`]: answering other replicas' asks;
//! - [`discovery`]: WebCheckers generated for the routes that opt in
//!   (`--discover-routes`), written by the leader;
//! - `replica`: the wiring: one replica's tasks, start-up and graceful shutdown.

pub use webchecker_api as api;
pub use webchecker_api::assignment;
pub mod ask;
pub use webchecker_core::checker;
/// The most counted probes a failover can lose from a checker's SLO (docs/slo.md).
pub use webchecker_core::status::SLO_WRITE_EVERY;
pub mod config;
pub mod confirm;
pub mod coordination;
pub mod dependencies;
pub mod diagnosis;
pub mod discovery;
pub mod engine;
pub(crate) mod error;
pub(crate) mod intake;
pub(crate) mod kubeio;
pub mod maintenance;
pub(crate) mod observe;
pub use webchecker_probe as probe;
mod replica;

/// Runs one replica until SIGTERM/SIGINT (Ok) or until a vital task dies (Err).
pub async fn run(cfg: config::Config) -> Result<(), error::Error> {
    replica::run(cfg).await
}
/// Name of the leader Lease (tests and tools read it).
pub use coordination::shard::elector::LEADER_LEASE;
/// Status writes (and drain acknowledgements) a replica has in flight at once
/// (the rebalance simulation's replicas acknowledge as many).
pub use engine::writer::STATUS_WRITERS;
/// How long a watch may stay silent before it is replaced (the chaos oracle's
/// bound for a stalled connection).
pub use kubeio::client::WATCH_IDLE_LIMIT;

pub(crate) use webchecker_core::shrink_if_sparse;
