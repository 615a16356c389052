//! Which listeners of a Gateway a route may use, as the Gateway API itself
//! attaches routes: a listener's `allowedRoutes` says from which namespaces
//! (`Same`, the default; `All`; or `Selector` over the route's Namespace's
//! labels) and of which kinds (by default those its protocol carries: HTTP
//! routes on an `HTTP` or `HTTPS` listener). Only the Gateway's owner and
//! the cluster admin (Namespace labels) decide it; nothing the route's
//! author writes (its `status.parents`, which a tenant with `*` on their
//! namespace may write, is not read). Pure.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use super::gateway_api::{GROUP, Listener};

/// A route looking for a listener: its kind (`HTTPRoute`, `GRPCRoute`),
/// its namespace, and that Namespace's labels (None when not known in full:
/// then no `Selector` admits it).
#[derive(Debug, Clone, Copy)]
pub(super) struct Route<'a> {
    pub kind: &'a str,
    pub namespace: &'a str,
    pub labels: Option<&'a BTreeMap<String, String>>,
}

/// Whether `listener`, of a Gateway in `gateway_ns`, admits `route`.
pub(super) fn admits(listener: &Listener, gateway_ns: &str, route: &Route<'_>) -> bool {
    let allowed = listener.allowed_routes.as_ref();
    let from = allowed.and_then(|a| a.namespaces.as_ref());
    let namespace_ok = match from.and_then(|n| n.from.as_deref()).unwrap_or("Same") {
        "Same" => route.namespace == gateway_ns,
        "All" => true,
        "Selector" => match (from.and_then(|n| n.selector.as_ref()), route.labels) {
            (Some(selector), Some(labels)) => selects(selector, labels),
            _ => false,
        },
        _ => false,
    };
    if !namespace_ok {
        return false;
    }
    match allowed.and_then(|a| a.kinds.as_deref()) {
        Some(kinds) if !kinds.is_empty() => kinds
            .iter()
            .any(|k| k.group.as_deref().unwrap_or(GROUP) == GROUP && k.kind == route.kind),
        _ => matches!(listener.protocol.as_str(), "HTTP" | "HTTPS"),
    }
}

/// Whether `selector` selects an object with `labels` (Kubernetes' rules:
/// every `matchLabels` pair and every expression; an empty selector selects
/// all; an operator it does not know selects nothing).
pub(super) fn selects(selector: &LabelSelector, labels: &BTreeMap<String, String>) -> bool {
    let pairs = selector.match_labels.iter().flatten();
    if !pairs.into_iter().all(|(k, v)| labels.get(k) == Some(v)) {
        return false;
    }
    selector.match_expressions.iter().flatten().all(|e| {
        let values = e.values.as_deref().unwrap_or_default();
        let value = labels.get(&e.key);
        match e.operator.as_str() {
            "In" => value.is_some_and(|v| values.contains(v)),
            "NotIn" => value.is_none_or(|v| !values.contains(v)),
            "Exists" => value.is_some(),
            "DoesNotExist" => value.is_none(),
            _ => false,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::discovery::gateway_api::{AllowedRoutes, RouteGroupKind, RouteNamespaces};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

    fn listener(protocol: &str, allowed: Option<AllowedRoutes>) -> Listener {
        Listener {
            name: "l".into(),
            protocol: protocol.into(),
            port: 80,
            allowed_routes: allowed,
            ..Default::default()
        }
    }

    fn from(from: &str, selector: Option<LabelSelector>) -> Option<AllowedRoutes> {
        Some(AllowedRoutes {
            namespaces: Some(RouteNamespaces {
                from: Some(from.into()),
                selector,
            }),
            kinds: None,
        })
    }

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn route<'a>(ns: &'a str, l: Option<&'a BTreeMap<String, String>>) -> Route<'a> {
        Route {
            kind: "HTTPRoute",
            namespace: ns,
            labels: l,
        }
    }

    #[test]
    fn by_default_only_routes_of_the_gateways_namespace_attach() {
        let l = listener("HTTP", None);
        assert!(admits(&l, "infra", &route("infra", None)));
        assert!(!admits(&l, "infra", &route("tenant", None)));
        let all = listener("HTTPS", from("All", None));
        assert!(admits(&all, "infra", &route("tenant", None)));
        let tls = listener("TLS", from("All", None));
        assert!(
            !admits(&tls, "infra", &route("tenant", None)),
            "TLS carries TLSRoutes"
        );
        let odd = listener("HTTP", from("Elsewhere", None));
        assert!(!admits(&odd, "infra", &route("infra", None)));
    }

    #[test]
    fn a_selector_admits_the_namespaces_it_selects_and_unknown_labels_none() {
        let sel = LabelSelector {
            match_labels: Some([("team".to_string(), "web".to_string())].into()),
            ..Default::default()
        };
        let l = listener("HTTP", from("Selector", Some(sel)));
        let web = labels(&[("team", "web")]);
        let other = labels(&[("team", "shop")]);
        assert!(admits(&l, "infra", &route("tenant", Some(&web))));
        assert!(!admits(&l, "infra", &route("tenant", Some(&other))));
        assert!(
            !admits(&l, "infra", &route("tenant", None)),
            "labels not kept"
        );
        let none = listener("HTTP", from("Selector", None));
        assert!(!admits(&none, "infra", &route("tenant", Some(&web))));
    }

    #[test]
    fn expressions_follow_kubernetes() {
        let expr = |op: &str, values: &[&str]| LabelSelector {
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: "env".into(),
                operator: op.into(),
                values: Some(values.iter().map(|v| v.to_string()).collect()),
            }]),
            ..Default::default()
        };
        let prod = labels(&[("env", "prod")]);
        let bare = labels(&[]);
        assert!(selects(&expr("In", &["prod", "qa"]), &prod));
        assert!(!selects(&expr("In", &["qa"]), &prod));
        assert!(!selects(&expr("In", &["prod"]), &bare));
        assert!(selects(&expr("NotIn", &["qa"]), &prod));
        assert!(selects(&expr("NotIn", &["qa"]), &bare));
        assert!(selects(&expr("Exists", &[]), &prod));
        assert!(selects(&expr("DoesNotExist", &[]), &bare));
        assert!(!selects(&expr("Gt", &["1"]), &prod));
        assert!(
            selects(&LabelSelector::default(), &bare),
            "empty selects all"
        );
    }

    #[test]
    fn kinds_name_the_routes_that_attach() {
        let kinds = |k: &[(&str, Option<&str>)]| {
            Some(AllowedRoutes {
                namespaces: None,
                kinds: Some(
                    k.iter()
                        .map(|(kind, group)| RouteGroupKind {
                            kind: kind.to_string(),
                            group: group.map(str::to_string),
                        })
                        .collect(),
                ),
            })
        };
        let grpc_only = listener("HTTPS", kinds(&[("GRPCRoute", None)]));
        assert!(!admits(&grpc_only, "ns", &route("ns", None)));
        let grpc = Route {
            kind: "GRPCRoute",
            ..route("ns", None)
        };
        assert!(admits(&grpc_only, "ns", &grpc));
        let foreign = listener("HTTP", kinds(&[("HTTPRoute", Some("example.com"))]));
        assert!(!admits(&foreign, "ns", &route("ns", None)));
    }
}
