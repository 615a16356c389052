//! Coordination: how replicas share the checkers. This replica's own Lease
//! and its dispatch/write gates (`membership`), the pure assignment
//! (`ring`), and the view of the others' Leases, leader election and the
//! sharder (`shard`); `standalone`, the sharder alone for the bench's
//! simulation. Runs on a runtime of its own thread, never behind
//! probe work.

pub(crate) mod membership;
pub mod ring;
pub(crate) mod shard;
pub mod standalone;
