//! Route discovery (`discovery.enabled`, the operator's `--discover-routes`):
//! off by default with no permission for it; on, the operator gets the flag
//! and exactly the permissions it uses (list/watch ingresses, services,
//! httproutes, grpcroutes, gateways and namespaces, create/delete webcheckers), within `operator.watchNamespace` when set,
//! where it is granted that Namespace and no other.

use super::rbac::{grant_set, grants, operator_cluster_wide_grants};
use super::rendered::*;
use super::*;

const ROUTES: &str = "wc-webchecker-operator-routes";

fn named<'a>(docs: &'a [Value], kind: &str, name: &str) -> Vec<&'a Value> {
    of_kind(docs, kind)
        .into_iter()
        .filter(|d| d["metadata"]["name"].as_str() == Some(name))
        .collect()
}

/// The binding `name` of `kind` names the role of the same name and the
/// chart's ServiceAccount.
fn binds_the_operator(docs: &[Value], kind: &str, role_kind: &str, name: &str) {
    let b = named(docs, kind, name);
    assert_eq!(b.len(), 1, "one {kind} {name}");
    assert_eq!(b[0]["roleRef"]["kind"].as_str(), Some(role_kind));
    assert_eq!(b[0]["roleRef"]["name"].as_str(), Some(name));
    let s = &b[0]["subjects"][0];
    assert_eq!(s["name"].as_str(), Some(FULLNAME));
    assert_eq!(s["namespace"].as_str(), Some(RELEASE_NS));
}

#[test]
fn route_discovery_is_off_by_default_with_no_permission_for_it() {
    let docs = render(&[]);
    let cfg = rendered_config(one(&docs, "Deployment"), "wc-webchecker-operator-0");
    assert!(!cfg.discover_routes);
    for kind in ["ClusterRole", "Role", "ClusterRoleBinding", "RoleBinding"] {
        let routes: Vec<_> = of_kind(&docs, kind)
            .into_iter()
            .filter(|d| {
                d["metadata"]["name"]
                    .as_str()
                    .unwrap_or("")
                    .starts_with(ROUTES)
            })
            .collect();
        assert!(routes.is_empty(), "{kind}: {routes:?}");
    }
    // The diagnosis gets a route, never lists or watches one.
    let g = grants(operator_clusterrole(&docs));
    assert!(
        !g.iter().any(|(_, r, v)| {
            ["ingresses", "httproutes", "grpcroutes", "gateways"].contains(&r.as_str())
                && v != "get"
        }),
        "no route lists without discovery: {g:?}"
    );
}

#[test]
fn route_discovery_gets_the_flag_and_what_it_uses_cluster_wide() {
    let docs = render(&["--set", "discovery.enabled=true"]);
    let cfg = rendered_config(one(&docs, "Deployment"), "wc-webchecker-operator-0");
    assert!(cfg.discover_routes);
    assert_eq!(cfg.discovery_max_checkers_per_namespace, 500);
    assert_eq!(cfg.cluster_domain, "cluster.local");
    let set = render(&[
        "--set",
        "discovery.enabled=true",
        "--set",
        "discovery.maxCheckersPerNamespace=2000",
        "--set",
        "discovery.clusterDomain=corp.example",
    ]);
    let cfg = rendered_config(one(&set, "Deployment"), "wc-webchecker-operator-0");
    assert_eq!(cfg.discovery_max_checkers_per_namespace, 2000);
    assert_eq!(cfg.cluster_domain, "corp.example");
    let role = named(&docs, "ClusterRole", ROUTES);
    assert_eq!(role.len(), 1, "ClusterRole {ROUTES}");
    assert_eq!(
        grants(role[0]),
        grant_set(&[
            ("networking.k8s.io", "ingresses", &["list", "watch"]),
            ("", "services", &["list", "watch"]),
            (
                "gateway.networking.k8s.io",
                "httproutes",
                &["list", "watch"]
            ),
            (
                "gateway.networking.k8s.io",
                "grpcroutes",
                &["list", "watch"]
            ),
            ("gateway.networking.k8s.io", "gateways", &["list", "watch"]),
            ("", "namespaces", &["list", "watch"]),
            ("test.network.io", "webcheckers", &["create", "delete"]),
        ])
    );
    binds_the_operator(&docs, "ClusterRoleBinding", "ClusterRole", ROUTES);
    // The operator's own ClusterRole is unchanged: it grants patch (the
    // apply), list and watch (the generated checkers) already.
    assert_eq!(
        grants(operator_clusterrole(&docs)),
        operator_cluster_wide_grants()
    );
    // rbac.create=false: none of it.
    let docs = render(&[
        "--set",
        "discovery.enabled=true",
        "--set",
        "rbac.create=false",
    ]);
    assert!(named(&docs, "ClusterRole", ROUTES).is_empty());
}

#[test]
fn with_a_watched_namespace_route_discovery_is_granted_that_namespace_only() {
    let docs = render(&[
        "--set",
        "discovery.enabled=true",
        "--set",
        "operator.watchNamespace=shop",
    ]);
    let cfg = rendered_config(one(&docs, "Deployment"), "wc-webchecker-operator-0");
    assert!(cfg.discover_routes);
    assert_eq!(cfg.watch_namespace.as_deref(), Some("shop"));
    assert!(
        named(&docs, "ClusterRole", ROUTES).is_empty(),
        "no cluster-wide grant"
    );
    let role = named(&docs, "Role", ROUTES);
    assert_eq!(role.len(), 1);
    assert_eq!(role[0]["metadata"]["namespace"].as_str(), Some("shop"));
    assert_eq!(
        grants(role[0]),
        grant_set(&[
            ("networking.k8s.io", "ingresses", &["list", "watch"]),
            ("", "services", &["list", "watch"]),
            (
                "gateway.networking.k8s.io",
                "httproutes",
                &["list", "watch"]
            ),
            (
                "gateway.networking.k8s.io",
                "grpcroutes",
                &["list", "watch"]
            ),
            ("gateway.networking.k8s.io", "gateways", &["list", "watch"]),
            ("test.network.io", "webcheckers", &["create", "delete"]),
        ])
    );
    binds_the_operator(&docs, "RoleBinding", "Role", ROUTES);
    let ns_role = named(&docs, "ClusterRole", &format!("{ROUTES}-namespace"));
    assert_eq!(ns_role.len(), 1);
    assert_eq!(
        grants(ns_role[0]),
        grant_set(&[("", "namespaces", &["list", "watch"])])
    );
    assert_eq!(
        ns_role[0]["rules"][0]["resourceNames"],
        serde_yaml::from_str::<Value>("[shop]").unwrap(),
        "the watched Namespace only"
    );
    binds_the_operator(
        &docs,
        "ClusterRoleBinding",
        "ClusterRole",
        &format!("{ROUTES}-namespace"),
    );
}
