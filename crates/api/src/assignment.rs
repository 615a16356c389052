//! The assignment protocol: which replica probes a checker, written on the
//! WebChecker itself. One prober per checker rests on these rules alone:
//!
//! - The sharder **assigns** a checker by setting the owner label and the
//!   epoch (the owner's membership Lease UID when it was assigned); an
//!   assignment is valid only while the owner holds that very Lease, so a
//!   restarted replica never probes what its earlier incarnation owned.
//! - To move a checker, the sharder **drains** it: the drain annotation
//!   names the target, the drain epoch its Lease UID. The owner stops
//!   probing, then **acknowledges** with one write that assigns the target
//!   itself (owner, epoch, handed-over-from, and the time of its last probe
//!   so the target keeps the cadence). Without a drain epoch (a sharder of
//!   an earlier version) the acknowledgement clears owner and epoch and the
//!   sharder assigns. A drain nobody acknowledges is **withdrawn**.
//! - Every write carries the resourceVersion it was decided on: a write
//!   decided on a stale view is refused by the API server, never applied.
//! - Only the operator may write these keys: the chart's admission policy
//!   (templates/coordination-policy.yaml) refuses anyone else's change.
//!
//! Pure: parsing from an object's metadata and the merge patches of each
//! step. The feed, the status writer, the sharder's book and its writes and
//! the confirmer read and write assignments through this module only.

use std::collections::BTreeMap;

use kube::core::ObjectMeta;
use serde_json::{Value, json};

/// Label naming the replica that owns (probes) a checker.
pub const OWNER_LABEL: &str = "webchecker.test.network.io/owner";
/// UID of the owner's membership Lease when the assignment was written.
pub const EPOCH_ANNOTATION: &str = "webchecker.test.network.io/epoch";
/// The sharder asks the owner to hand the checker over (value: the target).
pub const DRAIN_ANNOTATION: &str = "webchecker.test.network.io/drain";
/// Beside the drain: the target's membership Lease UID.
pub const DRAIN_EPOCH_ANNOTATION: &str = "webchecker.test.network.io/drain-epoch";
/// Written by the old owner's acknowledgement: the replica that handed the
/// checker over. The sharder's assignments remove it, so an owner change
/// that carries it was made by the old owner, after it stopped.
pub const HANDED_OVER_FROM_ANNOTATION: &str = "webchecker.test.network.io/handed-over-from";
/// Left by the old owner on a handover: unix milliseconds of its last probe.
pub const LAST_PROBE_ANNOTATION: &str = "webchecker.test.network.io/last-probe";

/// Every key of the protocol (the admission policy guards each).
pub const KEYS: [&str; 6] = [
    OWNER_LABEL,
    EPOCH_ANNOTATION,
    DRAIN_ANNOTATION,
    DRAIN_EPOCH_ANNOTATION,
    HANDED_OVER_FROM_ANNOTATION,
    LAST_PROBE_ANNOTATION,
];

/// A checker's assignment as its metadata states it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Assignment {
    pub owner: Option<String>,
    pub epoch: Option<String>,
    /// The drain's target, while the sharder asks for a handover.
    pub drain: Option<String>,
    pub drain_epoch: Option<String>,
    pub handed_over_from: Option<String>,
    /// The previous owner's last probe (unix milliseconds), if it said.
    pub last_probe_unix_ms: Option<i64>,
}

/// Whom a drain hands the checker to: the target and its Lease UID.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Handover {
    pub to: String,
    pub epoch: String,
}

impl Assignment {
    pub fn of(meta: &ObjectMeta) -> Assignment {
        let label = |k: &str| meta.labels.as_ref().and_then(|l| l.get(k)).cloned();
        let ann = |k: &str| annotation(meta.annotations.as_ref(), k);
        Assignment {
            owner: label(OWNER_LABEL),
            epoch: ann(EPOCH_ANNOTATION),
            drain: ann(DRAIN_ANNOTATION),
            drain_epoch: ann(DRAIN_EPOCH_ANNOTATION),
            handed_over_from: ann(HANDED_OVER_FROM_ANNOTATION),
            last_probe_unix_ms: ann(LAST_PROBE_ANNOTATION).and_then(|v| v.parse().ok()),
        }
    }

    /// Assigned to this incarnation (`epoch`: its Lease UID) of `identity`,
    /// not to another replica nor to an earlier incarnation of this one.
    pub fn held_by(&self, identity: &str, epoch: Option<&str>) -> bool {
        self.owner.as_deref() == Some(identity) && self.epoch.as_deref() == epoch
    }

    pub fn draining(&self) -> bool {
        self.drain.is_some()
    }

    /// The handover the drain asks for; None without a drain epoch (the
    /// acknowledgement then clears the assignment for the sharder).
    pub fn handover(&self) -> Option<Handover> {
        Some(Handover {
            to: self.drain.clone()?,
            epoch: self.drain_epoch.clone()?,
        })
    }
}

fn annotation(annotations: Option<&BTreeMap<String, String>>, key: &str) -> Option<String> {
    annotations.and_then(|a| a.get(key)).cloned()
}

/// The label selector of the checkers assigned to `identity`.
/// Whether a label is the operator's own, moved with the shard (no person
/// selects checkers by it).
pub fn is_assignment_label(key: &str) -> bool {
    key == OWNER_LABEL
}

pub fn owned_by(identity: &str) -> String {
    format!("{OWNER_LABEL}={identity}")
}

/// The sharder assigns the checker to `to` (its Lease UID `epoch`); any
/// drain and handover mark go.
pub fn assign(resource_version: &str, to: &str, epoch: Option<&str>) -> Value {
    json!({
        "metadata": {
            "resourceVersion": resource_version,
            "labels": { OWNER_LABEL: to },
            "annotations": {
                EPOCH_ANNOTATION: epoch,
                DRAIN_ANNOTATION: null,
                DRAIN_EPOCH_ANNOTATION: null,
                HANDED_OVER_FROM_ANNOTATION: null,
            },
        }
    })
}

/// The sharder asks the owner to hand the checker to `to`; the target's
/// epoch goes with it, so the acknowledgement can assign the target itself.
pub fn drain(resource_version: &str, to: &str, epoch: Option<&str>) -> Value {
    json!({
        "metadata": {
            "resourceVersion": resource_version,
            "annotations": { DRAIN_ANNOTATION: to, DRAIN_EPOCH_ANNOTATION: epoch },
        }
    })
}

/// The sharder withdraws a drain.
pub fn withdraw_drain(resource_version: &str) -> Value {
    json!({
        "metadata": {
            "resourceVersion": resource_version,
            "annotations": { DRAIN_ANNOTATION: null, DRAIN_EPOCH_ANNOTATION: null },
        }
    })
}

/// The owner `me` acknowledges a drain, having stopped probing: with a
/// handover, one write assigns the target; without one, owner and epoch are
/// cleared and the sharder assigns. Either way it carries the last probe's
/// time, so the new owner keeps the cadence.
pub fn acknowledge_drain(
    resource_version: Option<&str>,
    last_probe_unix_ms: Option<i64>,
    handover: Option<&Handover>,
    me: &str,
) -> Value {
    let last = last_probe_unix_ms.map(|t| t.to_string());
    match handover {
        Some(h) => json!({
            "metadata": {
                "resourceVersion": resource_version,
                "labels": { OWNER_LABEL: h.to },
                "annotations": {
                    EPOCH_ANNOTATION: h.epoch,
                    DRAIN_ANNOTATION: null,
                    DRAIN_EPOCH_ANNOTATION: null,
                    HANDED_OVER_FROM_ANNOTATION: me,
                    LAST_PROBE_ANNOTATION: last,
                },
            }
        }),
        None => json!({
            "metadata": {
                "resourceVersion": resource_version,
                "labels": { OWNER_LABEL: null },
                "annotations": { EPOCH_ANNOTATION: null, LAST_PROBE_ANNOTATION: last },
            }
        }),
    }
}

#[cfg(test)]
mod tests;
