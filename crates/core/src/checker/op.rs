//! What the engine tells the status writer to do for one checker.

use webchecker_api::WebCheckerStatus;
use webchecker_api::assignment::Handover;

#[derive(Clone, Debug)]
pub enum Op {
    Status(Box<WebCheckerStatus>),
    /// Hand the checker over: assign the drain's target (or, without one,
    /// clear owner and epoch and keep the drain for the sharder).
    AckDrain {
        last_probe_unix_ms: Option<i64>,
        handover: Option<Handover>,
    },
}
