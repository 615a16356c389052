//! webchecker-operator: probes HTTP endpoints described by `WebChecker`
//! resources, sharded over several replicas.
//!
//! Module map, one layer per folder (see docs/architecture.md):
//! - [`api`]: the CRD types;
//! - [`assignment`]: which replica probes a checker, as its metadata says
//!   (owner, epoch, drain), and the steps of the handover;
//! - [`probe`]: the HTTP prober with phase timings and the forgery guard;
//!   `probe::plan` is the only part that reads the API types;
//! - `intake`: the shard's checkers with their Secret/ConfigMap values and
//!   compiled patterns, under per-namespace budgets;
//! - [`engine`]: the per-replica engine (timer wheel, fair worker pool) and
//!   the pure status reducer;
//! - `coordination`: this replica's Lease and gates, the member view, leader
//!   election, the sharder, the ring;
//! - `kubeio`: API clients with deadlines, start-up checks, fenced status
//!   writes, what the forgery guard learns from the cluster;
//! - `observe`: metrics, /metrics /healthz /readyz, Kubernetes Events;
//! - `confirm`: a failure confirmed by another replica (another zone) before
//!   it turns a checker Ready=False: asks, the confirmer's service, tokens;
//! - [`discovery`]: WebCheckers generated for the Ingresses that opt in
//!   (`--discover-routes`), written by the leader;
//! - `replica`: the wiring: one replica's tasks, start-up and graceful shutdown.

pub use webchecker_api as api;
pub use webchecker_api::assignment;
pub mod ask;
pub use webchecker_core::checker;
pub mod config;
pub mod confirm;
pub mod coordination;
pub mod discovery;
pub mod engine;
pub(crate) mod error;
pub(crate) mod intake;
pub(crate) mod kubeio;
pub(crate) mod observe;
pub use webchecker_probe as probe;
mod replica;

/// Runs one replica until SIGTERM/SIGINT (Ok) or until a vital task dies (Err).
pub async fn run(cfg: config::Config) -> Result<(), error::Error> {
    replica::run(cfg).await
}
/// Name of the leader Lease (tests and tools read it).
pub use coordination::shard::elector::LEADER_LEASE;
/// How long a watch may stay silent before it is replaced (the chaos oracle's
/// bound for a stalled connection).
pub use kubeio::client::WATCH_IDLE_LIMIT;

pub(crate) use webchecker_core::shrink_if_sparse;
