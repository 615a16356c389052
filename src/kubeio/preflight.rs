//! Start-up check: every permission the operator needs, all missing ones
//! named in one error (a person fixes the Role once, not once per restart).
//! A busy API server (429 from Priority and Fairness, a 5xx, no answer in
//! time) is waited for with back-off, never a reason to exit: a replica
//! that exits at start-up on a busy cluster crash-loops exactly when the
//! API server can least afford it.

use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use std::time::Duration;

use kube::api::PostParams;
use kube::{Api, Client};
use tracing::warn;

use crate::error::Error;

/// First and longest wait before asking again after a busy answer.
const FIRST_RETRY: Duration = Duration::from_millis(200);
const LONGEST_RETRY: Duration = Duration::from_secs(5);

/// One SelfSubjectAccessReview, asked again with back-off while the API
/// server is busy; an answer that will not change (403, 400) is final.
async fn review(
    api: &Api<SelfSubjectAccessReview>,
    review: &SelfSubjectAccessReview,
) -> Result<SelfSubjectAccessReview, Error> {
    let mut wait = FIRST_RETRY;
    loop {
        let why = match tokio::time::timeout(
            crate::kubeio::client::CALL_DEADLINE,
            api.create(&PostParams::default(), review),
        )
        .await
        {
            Ok(Ok(r)) => return Ok(r),
            Ok(Err(kube::Error::Api(e))) if e.code == 429 || e.code >= 500 => {
                format!("HTTP {} {}", e.code, e.reason)
            }
            Ok(Err(e)) => return Err(e.into()),
            Err(_) => "no answer in time".to_string(),
        };
        warn!(
            %why,
            retry_in = ?wait,
            "the API server is busy: start-up checks wait (not ready until they pass)"
        );
        tokio::time::sleep(wait).await;
        wait = (wait * 2).min(LONGEST_RETRY);
    }
}

/// Where a permission is needed.
#[derive(Clone, Copy)]
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

const WEBCHECKERS: &str = "test.network.io";
const EVENTS: &str = "events.k8s.io";
const LEASES: &str = "coordination.k8s.io";

/// What the operator needs in every case.
const NEEDED: [Check; 14] = [
    (WEBCHECKERS, "webcheckers", "list", None, Where::Watched),
    (WEBCHECKERS, "webcheckers", "watch", None, Where::Watched),
    (WEBCHECKERS, "webcheckers", "get", None, Where::Watched),
    (WEBCHECKERS, "webcheckers", "patch", None, Where::Watched),
    (
        WEBCHECKERS,
        "webcheckers",
        "patch",
        Some("status"),
        Where::Watched,
    ),
    (EVENTS, "events", "create", None, Where::Watched),
    (EVENTS, "events", "patch", None, Where::Watched),
    (LEASES, "leases", "get", None, Where::Lease),
    (LEASES, "leases", "list", None, Where::Lease),
    (LEASES, "leases", "watch", None, Where::Lease),
    (LEASES, "leases", "create", None, Where::Lease),
    (LEASES, "leases", "update", None, Where::Lease),
    // Membership renewals are merge patches.
    (LEASES, "leases", "patch", None, Where::Lease),
    (LEASES, "leases", "delete", None, Where::Lease),
];

/// With --restricted-namespaces: they must be listed before probing starts.
const RESTRICTED: [Check; 2] = [
    ("", "namespaces", "list", None, Where::Cluster),
    ("", "namespaces", "watch", None, Where::Cluster),
];

/// Checks every permission the operator needs and names all that are missing.
pub async fn preflight(
    client: &Client,
    lease_namespace: &str,
    watch_namespace: Option<&str>,
    restricted_namespaces: bool,
) -> Result<(), Error> {
    let mut checks = NEEDED.to_vec();
    if restricted_namespaces {
        checks.extend(RESTRICTED);
    }
    let api: Api<SelfSubjectAccessReview> = Api::all(client.clone());
    let mut missing = Vec::new();
    for check in &checks {
        let (group, resource, verb, sub, scope) = *check;
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
        let r = self::review(&api, &review).await?;
        if !r.status.map(|s| s.allowed).unwrap_or(false) {
            missing.push(describe(check, namespace.as_deref()));
        }
    }
    if missing.is_empty() {
        Ok(())
    } else {
        Err(Error::Forbidden(missing.join("; ")))
    }
}

/// A missing permission as a person grants it: "list test.network.io
/// webcheckers in namespace x".
fn describe(&(group, resource, verb, sub, scope): &Check, namespace: Option<&str>) -> String {
    let res = match sub {
        Some(s) => format!("{resource}/{s}"),
        None => resource.to_string(),
    };
    let scope = match (namespace, scope) {
        (Some(ns), _) => format!("in namespace {ns}"),
        (None, Where::Cluster) => "(cluster-wide)".to_string(),
        (None, _) => "in all namespaces".to_string(),
    };
    let what = if group.is_empty() {
        res
    } else {
        format!("{group} {res}")
    };
    format!("{verb} {what} {scope}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kubeio::mock_api::{ApiHandle, ok, status};

    async fn answer(h: &mut ApiHandle, resp: http::Response<kube::client::Body>) {
        crate::kubeio::mock_api::answer(h, "POST", None, resp).await;
    }

    fn allowed(yes: bool) -> http::Response<kube::client::Body> {
        ok(serde_json::json!({
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SelfSubjectAccessReview",
            "spec": {},
            "status": {"allowed": yes},
        }))
    }

    #[tokio::test(start_paused = true)]
    async fn a_busy_api_server_is_waited_for_and_a_refusal_is_final() {
        let (client, mut h) = crate::kubeio::mock_api::client();
        let api: Api<SelfSubjectAccessReview> = Api::all(client);
        let asked = SelfSubjectAccessReview::default();
        let task = tokio::spawn({
            let api = api.clone();
            let asked = asked.clone();
            async move { review(&api, &asked).await }
        });
        // 429 (Priority and Fairness), 503, 500: asked again each time.
        for code in [429, 503, 500] {
            answer(&mut h, status(code)).await;
        }
        // No answer within the deadline: asked again.
        let (_req, _never) = h.next_request().await.expect("a request");
        answer(&mut h, allowed(true)).await;
        let r = task.await.unwrap().expect("the answer after the busy ones");
        assert!(r.status.unwrap().allowed);
        // A 403 (or any other final answer) ends start-up with its error.
        let task = tokio::spawn(async move { review(&api, &asked).await });
        answer(&mut h, status(403)).await;
        assert!(task.await.unwrap().is_err());
    }
}
