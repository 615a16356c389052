//! `WebCheckerMaintenance`: planned work on the targets of a namespace's
//! checkers. While a window is open the checkers it selects are still
//! probed, but their time counts for neither side of an objective, their
//! transitions are Normal Events and the shipped alerts stay silent.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

/// A maintenance window over WebCheckers of its own namespace: one-off (start and end) or weekly (schedule).
// The printcolumn(...) lists repeat `type_ = ...` on purpose.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "test.network.io",
    version = "v1alpha1",
    kind = "WebCheckerMaintenance",
    plural = "webcheckermaintenances",
    singular = "webcheckermaintenance",
    shortname = "wcm",
    category = "webchecker-operator",
    namespaced,
    status = "MaintenanceStatus",
    doc = "WebCheckerMaintenance is a window of planned work: the WebCheckers it selects in its namespace are still probed, but count for neither side of their objective, report transitions as Normal Events and do not page.",
    printcolumn(
        name = "Active",
        type_ = "string",
        json_path = ".status.active",
        description = "Whether the window is open now"
    ),
    printcolumn(
        name = "Covers",
        type_ = "integer",
        json_path = ".status.checkers",
        description = "WebCheckers of the namespace the selector matches"
    ),
    printcolumn(
        name = "Next",
        type_ = "date",
        json_path = ".status.nextStart",
        description = "When the window opens next"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("has(self.start) == has(self.end)").message("spec.start and spec.end go together: a one-off window needs both"))]
#[x_kube(validation = Rule::new("has(self.start) != has(self.schedule)").message("a WebCheckerMaintenance needs either start and end (one window) or schedule (a weekly one), not both"))]
#[x_kube(validation = Rule::new("!has(self.start) || !has(self.end) || timestamp(self.end) > timestamp(self.start)").message("spec.end must be after spec.start"))]
pub struct MaintenanceSpec {
    /// Which WebCheckers of this namespace the window covers; {} covers every one.
    #[schemars(schema_with = "bounded_selector_schema")]
    pub selector: LabelSelector,
    /// A one-off window opens at this time (RFC 3339, for example 2026-12-24T22:00:00Z).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("format" = "date-time"), length(max = 64))]
    pub start: Option<String>,
    /// ... and closes at this one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("format" = "date-time"), length(max = 64))]
    pub end: Option<String>,
    /// A weekly window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule: Option<WeeklySchedule>,
    /// What the work is, shown in the checkers' Maintenance condition.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 256))]
    pub reason: Option<String>,
}

/// A label selector as Kubernetes writes it, bounded: every replica keeps
/// every window, and each probe of the namespace's checkers may match it
/// (at most 16 requirements, 32 values each, label-sized text).
pub(crate) fn bounded_selector_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "object",
        "properties": {
            "matchLabels": {
                "type": "object",
                "maxProperties": 16,
                "additionalProperties": {"type": "string", "maxLength": 63},
                "x-kubernetes-validations": [{
                    "rule": "self.all(k, size(k) <= 317)",
                    "message": "a matchLabels key is at most 317 characters (a 253-character prefix, a slash and 63 characters)"
                }]
            },
            "matchExpressions": {
                "type": "array",
                "maxItems": 16,
                "items": {
                    "type": "object",
                    "required": ["key", "operator"],
                    "properties": {
                        "key": {"type": "string", "maxLength": 317},
                        "operator": {"type": "string", "enum": ["In", "NotIn", "Exists", "DoesNotExist"]},
                        "values": {
                            "type": "array",
                            "maxItems": 32,
                            "items": {"type": "string", "maxLength": 63}
                        }
                    }
                }
            }
        }
    })
}

/// A window that opens on some days of the week at a local time.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct WeeklySchedule {
    /// The days it opens on.
    #[schemars(length(min = 1, max = 7))]
    #[x_kube(validation = Rule::new("self.all(d, self.exists_one(e, e == d))").message("spec.schedule.days names a day twice"))]
    pub days: Vec<Weekday>,
    /// The local time it opens, HH:MM (24 h), for example 02:30.
    #[x_kube(validation = Rule::new("self.matches('^([01][0-9]|2[0-3]):[0-5][0-9]$')").message("spec.schedule.at must be a time of day written HH:MM, for example 02:30"))]
    #[schemars(length(max = 5))]
    pub at: String,
    /// How long it stays open: whole hours and minutes, from 1m to 168h, for example 2h, 90m or 1h30m.
    #[x_kube(validation = Rule::new("self.matches('^([0-9]{1,3}h)?([0-9]{1,5}m)?$') && self != ''").message("spec.schedule.duration must be whole hours and minutes, for example 2h, 90m or 1h30m"))]
    #[schemars(length(max = 10))]
    pub duration: String,
    /// The IANA time zone of `at`, for example Europe/Berlin; UTC by default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self == 'UTC' || self.matches('^[A-Za-z][A-Za-z0-9_+-]*(/[A-Za-z0-9_+-]+){1,2}$')").message("spec.schedule.timeZone must be an IANA time zone name, for example Europe/Berlin or America/New_York"))]
    #[schemars(length(max = 64))]
    pub time_zone: Option<String>,
}

/// A day of the week.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, schemars::JsonSchema)]
pub enum Weekday {
    Monday,
    Tuesday,
    Wednesday,
    Thursday,
    Friday,
    Saturday,
    Sunday,
}

impl Weekday {
    /// Monday 0 to Sunday 6.
    pub fn index(self) -> usize {
        self as usize
    }
}

/// What the operator's leader reports of a window.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MaintenanceStatus {
    /// Whether the window is open.
    #[serde(default)]
    pub active: bool,
    /// WebCheckers of the namespace the selector matches.
    #[serde(default)]
    pub checkers: i64,
    /// When it opens next (RFC 3339); absent once a one-off window has passed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("format" = "date-time"))]
    pub next_start: Option<String>,
    /// Why the window cannot be used (an unknown time zone), if so.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024))]
    pub problem: Option<String>,
}
