//! Start-up check: every permission the operator needs, all missing ones
//! named in one error (a person fixes the Role once, not once per restart).

use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use kube::api::PostParams;
use kube::{Api, Client};

use crate::error::Error;

/// Where a permission is needed.
enum Where {
    /// The Lease namespace.
    Lease,
    /// The watched namespace, or all of them.
    Watched,
    /// A cluster-scoped resource.
    Cluster,
}

/// (group, resource, verb, subresource, where).
type Check = (
    &'static str,
    &'static str,
    &'static str,
    Option<&'static str>,
    Where,
);

/// Checks every permission the operator needs and names all that are missing.
pub async fn preflight(
    client: &Client,
    lease_namespace: &str,
    watch_namespace: Option<&str>,
    restricted_namespaces: bool,
) -> Result<(), Error> {
    let mut checks: Vec<Check> = vec![
        (
            "test.network.io",
            "webcheckers",
            "list",
            None,
            Where::Watched,
        ),
        (
            "test.network.io",
            "webcheckers",
            "watch",
            None,
            Where::Watched,
        ),
        (
            "test.network.io",
            "webcheckers",
            "get",
            None,
            Where::Watched,
        ),
        (
            "test.network.io",
            "webcheckers",
            "patch",
            None,
            Where::Watched,
        ),
        (
            "test.network.io",
            "webcheckers",
            "patch",
            Some("status"),
            Where::Watched,
        ),
        ("events.k8s.io", "events", "create", None, Where::Watched),
        ("events.k8s.io", "events", "patch", None, Where::Watched),
        ("coordination.k8s.io", "leases", "get", None, Where::Lease),
        ("coordination.k8s.io", "leases", "list", None, Where::Lease),
        ("coordination.k8s.io", "leases", "watch", None, Where::Lease),
        (
            "coordination.k8s.io",
            "leases",
            "create",
            None,
            Where::Lease,
        ),
        (
            "coordination.k8s.io",
            "leases",
            "update",
            None,
            Where::Lease,
        ),
        (
            "coordination.k8s.io",
            "leases",
            "delete",
            None,
            Where::Lease,
        ),
    ];
    if restricted_namespaces {
        // --restricted-namespaces must be listed before probing starts.
        checks.push(("", "namespaces", "list", None, Where::Cluster));
        checks.push(("", "namespaces", "watch", None, Where::Cluster));
    }
    let api: Api<SelfSubjectAccessReview> = Api::all(client.clone());
    let mut missing = Vec::new();
    for (group, resource, verb, sub, scope) in &checks {
        let namespace = match scope {
            Where::Lease => Some(lease_namespace.to_string()),
            Where::Watched => watch_namespace.map(str::to_string),
            Where::Cluster => None,
        };
        let review = SelfSubjectAccessReview {
            spec: SelfSubjectAccessReviewSpec {
                resource_attributes: Some(ResourceAttributes {
                    group: Some(group.to_string()),
                    resource: Some(resource.to_string()),
                    verb: Some(verb.to_string()),
                    subresource: sub.map(str::to_string),
                    namespace: namespace.clone(),
                    ..Default::default()
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        let r = tokio::time::timeout(
            crate::kubeclient::CALL_DEADLINE,
            api.create(&PostParams::default(), &review),
        )
        .await
        .map_err(|_| {
            Error::Config("the API server did not answer a SelfSubjectAccessReview in time".into())
        })??;
        if !r.status.map(|s| s.allowed).unwrap_or(false) {
            let res = match sub {
                Some(s) => format!("{resource}/{s}"),
                None => resource.to_string(),
            };
            let scope = match (&namespace, scope) {
                (Some(ns), _) => format!("in namespace {ns}"),
                (None, Where::Cluster) => "(cluster-wide)".to_string(),
                (None, _) => "in all namespaces".to_string(),
            };
            let what = if group.is_empty() {
                res
            } else {
                format!("{group} {res}")
            };
            missing.push(format!("{verb} {what} {scope}"));
        }
    }
    if missing.is_empty() {
        Ok(())
    } else {
        Err(Error::Forbidden(missing.join("; ")))
    }
}
