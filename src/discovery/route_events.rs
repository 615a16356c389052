//! The source object a generated checker reports to: when its checker
//! turns Ready=False or back to True, the replica that writes the
//! transition also puts an Event on the route (or Service), where the
//! route's owner looks (`kubectl describe ingress`), through the same
//! per-namespace Event queue as the checker's own Events. A checker's
//! author may write any ownerReference and label, so before such an Event
//! is published [`is_the_source`] asks the API server whether that route
//! exists with the UID the checker names ([`source_of`] is pure).

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, ListParams};
use kube::{Api, Client};

use super::{SOURCE_LABEL, gateway, grpcroute, httproute, ingress, service};

/// The kinds a generated checker reports to: group, kind, the version read
/// (a UID is the same in every version) and resource.
const KINDS: &[(&str, &str, &str, &str)] = &[
    ("networking.k8s.io", "Ingress", "v1", "ingresses"),
    ("gateway.networking.k8s.io", "HTTPRoute", "v1", "httproutes"),
    ("gateway.networking.k8s.io", "GRPCRoute", "v1", "grpcroutes"),
    ("", "Service", "v1", "services"),
    ("gateway.networking.k8s.io", "Gateway", "v1", "gateways"),
];

/// Whether `r` (an Event's object) is a kind a generated checker reports to.
pub fn is_source_kind(r: &ObjectReference) -> bool {
    let kind = r.kind.as_deref().unwrap_or_default();
    KINDS.iter().any(|(_, k, _, _)| *k == kind)
}

/// Whether an Event may go to `r`: any object but a route (or Service) a
/// checker was generated from, and such a source only when it is the one its
/// checker names ([`is_the_source`]). The Event publisher's audience
/// (`crate::observe::events::Audience`).
pub async fn may_hear(client: &Client, r: &ObjectReference) -> bool {
    !is_source_kind(r) || is_the_source(client, r).await
}

/// Whether the route (or Service) `r` names exists with the UID `r` names:
/// the checker reporting to it is one its controller ownerReference really
/// ties to that object (a checker naming a route by name with another UID,
/// or a route deleted and made again, reports only on itself). One list
/// call with the name as field selector (the permission discovery has);
/// no answer or an error counts as no.
pub async fn is_the_source(client: &Client, r: &ObjectReference) -> bool {
    let (Some(kind), Some(ns), Some(name), Some(uid)) = (
        r.kind.as_deref(),
        r.namespace.as_deref(),
        r.name.as_deref(),
        r.uid.as_deref(),
    ) else {
        return false;
    };
    let Some((group, _, version, plural)) = KINDS.iter().find(|(_, k, _, _)| *k == kind) else {
        return false;
    };
    let gvk = GroupVersionKind::gvk(group, version, kind);
    let resource = ApiResource::from_gvk_with_plural(&gvk, plural);
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &resource);
    let params = ListParams::default().fields(&format!("metadata.name={name}"));
    let call = api.list_metadata(&params);
    match tokio::time::timeout(crate::kubeio::client::CALL_DEADLINE, call).await {
        Ok(Ok(list)) => list
            .items
            .iter()
            .any(|o| o.metadata.uid.as_deref() == Some(uid)),
        _ => false,
    }
}

pub use webchecker_core::table::{CHECKER_DOWN, CHECKER_UP};

/// The source object of a generated checker: its controller ownerReference,
/// when it is of the kind its `source` label names (Ingress, HTTPRoute,
/// GRPCRoute, Service, Gateway), in the checker's namespace. None for any other checker: a
/// checker made by hand, or one another controller owns, reports only on
/// itself.
pub fn source_of(meta: &ObjectMeta) -> Option<ObjectReference> {
    let label = meta.labels.as_ref()?.get(SOURCE_LABEL)?;
    let (api_version, kind) = match label.as_str() {
        ingress::LABEL => ("networking.k8s.io/v1", "Ingress"),
        httproute::LABEL => ("gateway.networking.k8s.io/v1", "HTTPRoute"),
        grpcroute::LABEL => ("gateway.networking.k8s.io/v1", "GRPCRoute"),
        service::LABEL => ("v1", "Service"),
        gateway::LABEL => ("gateway.networking.k8s.io/v1", "Gateway"),
        _ => return None,
    };
    let owner = meta
        .owner_references
        .as_deref()?
        .iter()
        .find(|o| o.controller == Some(true))?;
    let group = |v: &str| v.rsplit_once('/').map_or("", |(g, _)| g).to_string();
    if owner.kind != kind || group(&owner.api_version) != group(api_version) {
        return None;
    }
    Some(ObjectReference {
        api_version: Some(owner.api_version.clone()),
        kind: Some(owner.kind.clone()),
        namespace: meta.namespace.clone(),
        name: Some(owner.name.clone()),
        uid: Some(owner.uid.clone()),
        ..ObjectReference::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

    fn meta(label: Option<&str>, owner: Option<(&str, &str, bool)>) -> ObjectMeta {
        ObjectMeta {
            namespace: Some("shop".into()),
            name: Some("web-www.example.com".into()),
            labels: label.map(|l| [(SOURCE_LABEL.to_string(), l.to_string())].into()),
            owner_references: owner.map(|(api_version, kind, controller)| {
                vec![OwnerReference {
                    api_version: api_version.into(),
                    kind: kind.into(),
                    name: "web".into(),
                    uid: "u-web".into(),
                    controller: Some(controller),
                    ..Default::default()
                }]
            }),
            ..Default::default()
        }
    }

    #[test]
    fn a_generated_checker_reports_to_its_controller_owner() {
        let r = source_of(&meta(
            Some("ingress"),
            Some(("networking.k8s.io/v1", "Ingress", true)),
        ))
        .unwrap();
        assert_eq!(r.kind.as_deref(), Some("Ingress"));
        assert_eq!(r.name.as_deref(), Some("web"));
        assert_eq!(r.uid.as_deref(), Some("u-web"));
        assert_eq!(r.namespace.as_deref(), Some("shop"));
        let svc = source_of(&meta(Some("service"), Some(("v1", "Service", true)))).unwrap();
        assert_eq!(svc.api_version.as_deref(), Some("v1"));
        let route = meta(
            Some("httproute"),
            Some(("gateway.networking.k8s.io/v1beta1", "HTTPRoute", true)),
        );
        assert!(source_of(&route).is_some(), "any version of the group");
        let grpc = meta(
            Some("grpcroute"),
            Some(("gateway.networking.k8s.io/v1", "GRPCRoute", true)),
        );
        assert_eq!(source_of(&grpc).unwrap().kind.as_deref(), Some("GRPCRoute"));
        let mixed = meta(
            Some("grpcroute"),
            Some(("gateway.networking.k8s.io/v1", "HTTPRoute", true)),
        );
        assert_eq!(source_of(&mixed), None, "the label names another kind");
    }

    #[test]
    fn other_checkers_report_only_on_themselves() {
        let cases = [
            ("made by hand", meta(None, None)),
            ("a label, no owner", meta(Some("ingress"), None)),
            (
                "an owner, no label",
                meta(None, Some(("networking.k8s.io/v1", "Ingress", true))),
            ),
            (
                "not the controller",
                meta(
                    Some("ingress"),
                    Some(("networking.k8s.io/v1", "Ingress", false)),
                ),
            ),
            (
                "the label names another kind",
                meta(
                    Some("service"),
                    Some(("networking.k8s.io/v1", "Ingress", true)),
                ),
            ),
            (
                "a kind of the same name in another group",
                meta(Some("ingress"), Some(("example.com/v1", "Ingress", true))),
            ),
            (
                "an unknown source",
                meta(Some("tlsroute"), Some(("v1", "Service", true))),
            ),
        ];
        for (case, m) in cases {
            assert_eq!(source_of(&m), None, "{case}");
        }
    }
}
