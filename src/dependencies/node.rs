//! A WebChecker as the dependency graph knows it, read from the watched
//! object: a checker whose spec does not deserialise still counts, by its
//! labels and its Ready.

use std::time::Duration;

use kube::ResourceExt;
use kube::core::DynamicObject;
use serde::Deserialize;

use webchecker_api::DependsOn;
use webchecker_api::assignment::is_assignment_label;
use webchecker_core::dependencies::{Depends, Node};
use webchecker_core::maintenance::Selector;

/// The parts of the spec the graph reads.
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct Spec {
    #[serde(default)]
    interval_seconds: Option<f64>,
    #[serde(default)]
    timeout_seconds: Option<f64>,
    #[serde(default)]
    failure_threshold: Option<f64>,
    #[serde(default)]
    depends_on: Option<DependsOn>,
}

#[derive(Deserialize)]
struct Condition {
    #[serde(rename = "type")]
    type_: String,
    status: String,
    #[serde(default)]
    reason: String,
}

/// Its namespace, name and node; `None` without a name.
pub fn read(o: &DynamicObject) -> Option<(String, String, Node)> {
    let name = o.metadata.name.clone()?;
    let namespace = o.namespace().unwrap_or_default();
    let spec: Spec = o
        .data
        .get("spec")
        .and_then(|s| Spec::deserialize(s).ok())
        .unwrap_or_default();
    let conditions: Vec<Condition> = o
        .data
        .pointer("/status/conditions")
        .and_then(|c| Vec::<Condition>::deserialize(c).ok())
        .unwrap_or_default();
    let down = conditions
        .iter()
        .find(|c| c.type_ == "Ready" && c.status == "False")
        .map(|c| c.reason.as_str().into());
    let interval = spec.interval_seconds.unwrap_or(60.0).clamp(1.0, 86_400.0);
    let threshold = spec.failure_threshold.unwrap_or(1.0).clamp(1.0, 100.0);
    let timeout = spec.timeout_seconds.unwrap_or(1.0).clamp(0.1, 600.0);
    // The owner label moves with the shard: no person selects by it.
    let labels = o
        .labels()
        .iter()
        .filter(|(k, _)| !is_assignment_label(k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let node = Node {
        labels,
        depends: spec.depends_on.map(|d| {
            Box::new(Depends {
                names: d.names.unwrap_or_default(),
                // A selector past the limits (the schema refuses them) selects nothing.
                selector: d.selector.and_then(|s| Selector::from_api(&s).ok()),
            })
        }),
        down,
        fall: Duration::from_secs_f64(interval * threshold + timeout),
    };
    Some((namespace, name, node))
}
