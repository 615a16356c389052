//! Sharding: the view of members (every replica), leader election, and the
//! sharder (leader only) that writes assignments.
//!
//! Assignment protocol (labels and annotations in `crate::api`):
//! - unassigned checker: the sharder writes `owner` + `epoch` (the owner's
//!   membership Lease UID);
//! - owner gone (Lease released or replaced, or proven gone by the sharder,
//!   after a lease of silence or at once on evidence from [`peers`]): the
//!   sharder reassigns at once;
//! - owner suspect (its Lease stood still for a lease duration of time the
//!   judge could count, see [`view`]) but not proven gone: its checkers stay;
//! - move between two live members: the sharder writes `drain=<target>` and
//!   `drain-epoch=<target's Lease UID>`; the old owner stops probing, waits
//!   for its in-flight probe, then assigns the target itself (`owner`,
//!   `epoch`, drain cleared, `handed-over-from`) in one write. A drain without
//!   `drain-epoch` (an earlier sharder's) is acknowledged by clearing `owner`
//!   and `epoch`, and the sharder assigns.
//!
//! Every write carries a resourceVersion precondition and is made only while
//! this replica leads ([`elector::LeaderGate`]).

pub use webchecker_core::book;
pub mod elector;
pub mod metrics;
pub mod peers;
pub mod sharder;
pub mod view;
pub use webchecker_core::window;

pub use elector::{LeaderElector, LeaderGate};
pub use metrics::ShardMetrics;
pub use peers::Peers;
pub use sharder::Sharder;
pub use view::MemberView;
