//! What the engine is told: the checkers of its shard, fully resolved by the
//! intake (crate::intake), and the replica's fence and shutdown.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Instant;

use k8s_openapi::api::core::v1::ObjectReference;
use tokio::sync::oneshot;

use super::Resolved;
use crate::api::{WebCheckerSpec, WebCheckerStatus};
use crate::observe::metrics::CheckerInfo;
use crate::probe::Compiled;

/// A checker of our shard with everything the engine needs to plan it: the
/// intake read its object, compiled its patterns and resolved the values
/// it references before handing it over, so nothing is left to fill in.
#[derive(Debug)]
pub struct Checker {
    pub key: String,
    pub namespace: String,
    pub name: String,
    pub generation: Option<i64>,
    /// What the status writer fences its writes with.
    pub resource_version: String,
    /// The object its Events are about.
    pub object_ref: ObjectReference,
    /// The route (or Service) it was generated from, which hears of its
    /// Ready transitions too (crate::discovery::route_events).
    pub source_ref: Option<ObjectReference>,
    /// The spec and what it needs, or why the object does not deserialise
    /// (for example written under an older schema).
    pub definition: Result<Definition, String>,
    /// URL and allowlisted labels (`webchecker_checker_info`).
    pub info: Arc<CheckerInfo>,
    /// The status on the object: a checker that moves between replicas
    /// keeps its condition and transition time.
    pub status: Option<WebCheckerStatus>,
    /// The old owner's last probe (unix milliseconds), left on a handover
    /// (crate::assignment): its cadence is kept.
    pub last_probe: Option<i64>,
    /// The epoch of the assignment it was found under (crate::assignment).
    pub epoch: Option<String>,
}

/// A spec with the values of the Secret and ConfigMap keys it references
/// (crate::intake::resolver) and its compiled patterns
/// (crate::intake::compiler).
#[derive(Clone, Debug)]
pub struct Definition {
    pub spec: WebCheckerSpec,
    pub values: Resolved,
    pub patterns: Compiled,
}

#[derive(Debug)]
pub enum Command {
    /// A checker of our shard, added or changed. `initial` during a (re)list;
    /// `seen` when the watch delivered it (a new checker's first probe is
    /// measured from there).
    Upsert {
        checker: Box<Checker>,
        initial: bool,
        seen: Instant,
    },
    /// The sharder asks us to hand this checker over.
    Drain {
        key: String,
        namespace: String,
        name: String,
        resource_version: String,
        uid: String,
        /// The epoch of the assignment it was found under.
        epoch: Option<String>,
        /// Whom to hand it to, when the sharder named the target's epoch.
        handover: Option<crate::assignment::Handover>,
    },
    /// Deleted, or no longer ours.
    Remove { key: String },
    /// The Secret/ConfigMap values a checker references changed (rotation).
    Refresh { key: String, resolved: Resolved },
    /// A checker's patterns changed without a new spec: its namespace's
    /// budget made room for them, or no longer does (webchecker_core::namespace_budget).
    Patterns { key: String, compiled: Compiled },
    /// A re-list finished: keys not in the set are no longer ours.
    Resync { present: HashSet<String> },
    /// Our Lease is gone: drop every checker at once.
    Fence { done: oneshot::Sender<()> },
    /// Graceful shutdown: stop dispatching, wait for in-flight probes.
    Shutdown { done: oneshot::Sender<()> },
    /// One probe another replica asked for (crate::confirm::service), run on
    /// the pool with the namespace's own probes; its outcome to `done`
    /// (`None`: held back), or `done` dropped when it will not run. Dropping
    /// the receiver gives it up, running or not.
    Probe {
        namespace: String,
        plan: Arc<crate::probe::ProbePlan>,
        done: oneshot::Sender<Option<crate::probe::Outcome>>,
    },
}

impl Command {
    /// Whether the command still holds for this replica whose epoch is now
    /// `epoch`. The intake classifies an object under the epoch of then and
    /// may wait for its Secrets and patterns; if the Lease was lost and
    /// taken again meanwhile, an Upsert or Drain found under the old epoch
    /// is not ours (the fence dropped every checker; the new watch lists
    /// ours again).
    pub fn current(&self, epoch: Option<&str>) -> bool {
        match self {
            Command::Upsert { checker, .. } => checker.epoch.as_deref() == epoch,
            Command::Drain { epoch: e, .. } => e.as_deref() == epoch,
            _ => true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_command_found_under_an_earlier_epoch_is_not_current() {
        let drain = |epoch: &str| Command::Drain {
            key: "ns/a".into(),
            namespace: "ns".into(),
            name: "a".into(),
            resource_version: "1".into(),
            uid: "u1".into(),
            epoch: Some(epoch.into()),
            handover: None,
        };
        assert!(drain("e2").current(Some("e2")));
        assert!(!drain("e1").current(Some("e2")));
        assert!(!drain("e1").current(None), "no Lease held: nothing is ours");
        let upsert = |epoch: &str| {
            let mut c = crate::intake::found::malformed(
                "ns".into(),
                "a".into(),
                "1".into(),
                Some(1),
                "bad".into(),
                false,
                Instant::now(),
            );
            if let Command::Upsert { checker, .. } = &mut c {
                checker.epoch = Some(epoch.into());
            }
            c
        };
        assert!(upsert("e2").current(Some("e2")));
        assert!(!upsert("e1").current(Some("e2")));
        assert!(Command::Remove { key: "ns/a".into() }.current(None));
    }
}
