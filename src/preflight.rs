//! Start-up check: every permission the operator needs, all missing ones
//! named in one error (a person fixes the Role once, not once per restart).

use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use kube::api::PostParams;
use kube::{Api, Client};

use crate::error::Error;

/// Checks every permission the operator needs and names all that are missing.
pub async fn preflight(
    client: &Client,
    lease_namespace: &str,
    watch_namespace: Option<&str>,
) -> Result<(), Error> {
    let checks: &[(&str, &str, &str, Option<&str>, bool)] = &[
        ("test.network.io", "webcheckers", "list", None, false),
        ("test.network.io", "webcheckers", "watch", None, false),
        ("test.network.io", "webcheckers", "get", None, false),
        ("test.network.io", "webcheckers", "patch", None, false),
        (
            "test.network.io",
            "webcheckers",
            "patch",
            Some("status"),
            false,
        ),
        ("events.k8s.io", "events", "create", None, false),
        ("events.k8s.io", "events", "patch", None, false),
        ("coordination.k8s.io", "leases", "get", None, true),
        ("coordination.k8s.io", "leases", "list", None, true),
        ("coordination.k8s.io", "leases", "watch", None, true),
        ("coordination.k8s.io", "leases", "create", None, true),
        ("coordination.k8s.io", "leases", "update", None, true),
        ("coordination.k8s.io", "leases", "delete", None, true),
    ];
    let api: Api<SelfSubjectAccessReview> = Api::all(client.clone());
    let mut missing = Vec::new();
    for (group, resource, verb, sub, in_lease_ns) in checks {
        let namespace = if *in_lease_ns {
            Some(lease_namespace.to_string())
        } else {
            watch_namespace.map(str::to_string)
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
            let scope = match &namespace {
                Some(ns) => format!("in namespace {ns}"),
                None => "in all namespaces".to_string(),
            };
            missing.push(format!("{verb} {group} {res} {scope}"));
        }
    }
    if missing.is_empty() {
        Ok(())
    } else {
        Err(Error::Forbidden(missing.join("; ")))
    }
}
