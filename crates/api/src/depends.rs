//! `spec.dependsOn`: the checkers of the same namespace whose failure
//! explains this one's (docs/dependencies.md).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::KubeSchema;
use serde::{Deserialize, Serialize};

/// Checkers of this namespace this one depends on: while one of them is Ready=False, this checker's own failure is reported as DependencyDown (a Normal Event, no alert) instead of paging on its own.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("has(self.names) || has(self.selector)").message("spec.dependsOn needs names (WebCheckers of this namespace) or a selector (their labels)"))]
pub struct DependsOn {
    /// Names of WebCheckers in this namespace, for example [gateway].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(min = 1, max = 16),
        inner(
            length(min = 1, max = 253),
            regex(pattern = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
        )
    )]
    #[x_kube(validation = Rule::new("self.all(n, self.exists_one(m, m == n))").message("spec.dependsOn.names names a checker twice"))]
    pub names: Option<Vec<String>>,
    /// WebCheckers of this namespace selected by their labels (the first 64 by name count).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::maintenance::bounded_selector_schema")]
    pub selector: Option<LabelSelector>,
}
