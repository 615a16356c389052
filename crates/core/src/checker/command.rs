//! What the engine is told: the checkers of its shard, fully resolved by the
//! intake (crate::intake), and the replica's fence and shutdown.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Instant;

use k8s_openapi::api::core::v1::ObjectReference;
use tokio::sync::oneshot;

use super::Resolved;
use crate::checker::CheckerInfo;
use webchecker_api::{WebCheckerSpec, WebCheckerStatus};
use webchecker_plan::Compiled;

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
    /// Its labels: what maintenance windows select it by.
    pub labels: BTreeMap<String, String>,
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

/// A change to the checkers of the shard: what the checker table takes as
/// it is (crate::table::Input::Change), from the intake's watch of the shard.
#[derive(Debug)]
pub enum Change {
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
        handover: Option<webchecker_api::assignment::Handover>,
    },
    /// Deleted, or no longer ours.
    Remove { key: String },
    /// The Secret/ConfigMap values a checker references changed (rotation).
    Refresh { key: String, resolved: Resolved },
    /// A checker's patterns changed without a new spec: its namespace's
    /// budget made room for them, or no longer does (crate::namespace_budget).
    Patterns { key: String, compiled: Compiled },
    /// A re-list finished: keys not in the set are no longer ours.
    Resync { present: HashSet<String> },
}

/// What the engine is told: a change to its checkers, or what only its
/// shell handles (the fence, shutdown, another replica's probe), each with
/// the channel it answers on.
#[derive(Debug)]
pub enum Command {
    /// A change the checker table takes as it is.
    Change(Change),
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
        plan: Arc<webchecker_plan::ProbePlan>,
        done: oneshot::Sender<Option<webchecker_plan::Outcome>>,
    },
    /// The maintenance windows of every namespace, after a change
    /// (crate::maintenance).
    Calendar(Arc<crate::maintenance::Calendar>),
    /// Each dependent checker's dependencies, after a change that moved
    /// them (crate::dependencies).
    Dependencies(Arc<crate::dependencies::Dependencies>),
    /// What the cluster says of a checker's fall (crate::diagnosis).
    Diagnosis {
        key: String,
        seq: u64,
        diagnosis: Option<webchecker_api::Diagnosis>,
    },
}

impl Change {
    /// Whether the change still holds for this replica whose epoch is now
    /// `epoch`. The intake classifies an object under the epoch of then and
    /// may wait for its Secrets and patterns; if the Lease was lost and
    /// taken again meanwhile, an Upsert or Drain found under the old epoch
    /// is not ours (the fence dropped every checker; the new watch lists
    /// ours again).
    pub fn current(&self, epoch: Option<&str>) -> bool {
        match self {
            Change::Upsert { checker, .. } => checker.epoch.as_deref() == epoch,
            Change::Drain { epoch: e, .. } => e.as_deref() == epoch,
            _ => true,
        }
    }
}

impl Command {
    /// Whether the command still holds for this replica whose epoch is now
    /// `epoch` ([`Change::current`]; the rest always does).
    pub fn current(&self, epoch: Option<&str>) -> bool {
        match self {
            Command::Change(c) => c.current(epoch),
            _ => true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_command_found_under_an_earlier_epoch_is_not_current() {
        let drain = |epoch: &str| {
            Command::Change(Change::Drain {
                key: "ns/a".into(),
                namespace: "ns".into(),
                name: "a".into(),
                resource_version: "1".into(),
                uid: "u1".into(),
                epoch: Some(epoch.into()),
                handover: None,
            })
        };
        assert!(drain("e2").current(Some("e2")));
        assert!(!drain("e1").current(Some("e2")));
        assert!(!drain("e1").current(None), "no Lease held: nothing is ours");
        let upsert = |epoch: &str| {
            let mut c = Command::Change(Change::Upsert {
                checker: Box::new(Checker {
                    key: "ns/a".into(),
                    namespace: "ns".into(),
                    name: "a".into(),
                    generation: Some(1),
                    resource_version: "1".into(),
                    object_ref: ObjectReference::default(),
                    source_ref: None,
                    definition: Err("bad".into()),
                    info: Arc::default(),
                    labels: Default::default(),
                    status: None,
                    last_probe: None,
                    epoch: None,
                }),
                initial: false,
                seen: Instant::now(),
            });
            if let Command::Change(Change::Upsert { checker, .. }) = &mut c {
                checker.epoch = Some(epoch.into());
            }
            c
        };
        assert!(upsert("e2").current(Some("e2")));
        assert!(!upsert("e1").current(Some("e2")));
        assert!(Command::Change(Change::Remove { key: "ns/a".into() }).current(None));
    }
}
