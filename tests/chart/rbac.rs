//! Least privilege as rendered: the operator's ClusterRole, its Lease and
//! discovery Roles, and the Secret/ConfigMap reads of rbac.readSecrets and
//! rbac.readConfigMaps, are exactly what the operator uses.

use std::collections::BTreeSet;

use super::rendered::*;
use super::*;

/// (apiGroup, resource, verb) granted by a rendered Role or ClusterRole.
pub fn grants(role: &Value) -> BTreeSet<(String, String, String)> {
    let mut s = BTreeSet::new();
    for r in role["rules"].as_sequence().expect("rules") {
        let list = |k: &str| -> Vec<String> {
            r[k].as_sequence()
                .unwrap_or_else(|| panic!("{k} in {r:?}"))
                .iter()
                .map(|v| v.as_str().unwrap().to_string())
                .collect()
        };
        for g in list("apiGroups") {
            for res in list("resources") {
                for v in list("verbs") {
                    s.insert((g.clone(), res.clone(), v));
                }
            }
        }
    }
    s
}

pub fn grant_set(v: &[(&str, &str, &[&str])]) -> BTreeSet<(String, String, String)> {
    let mut s = BTreeSet::new();
    for (g, r, verbs) in v {
        for verb in *verbs {
            s.insert((g.to_string(), r.to_string(), verb.to_string()));
        }
    }
    s
}

/// Cluster-wide permissions the operator uses: those its start-up check
/// (src/lib.rs `preflight`) asks for, plus `patch` on events, with which the
/// event recorder counts a repeated event (event series).
pub fn operator_cluster_grants() -> BTreeSet<(String, String, String)> {
    grant_set(&[
        (
            "test.network.io",
            "webcheckers",
            &["get", "list", "watch", "patch"],
        ),
        ("test.network.io", "webcheckers/status", &["patch"]),
        ("events.k8s.io", "events", &["create", "patch"]),
        // The forgery guard: kubelet addresses, restricted namespaces.
        ("", "nodes", &["list", "watch"]),
        ("", "namespaces", &["list", "watch"]),
    ])
}

/// The forgery guard's permissions in namespace default: the API server's
/// Service (by name) and EndpointSlices.
pub fn operator_discovery_grants() -> BTreeSet<(String, String, String)> {
    grant_set(&[
        ("", "services", &["list", "watch"]),
        ("discovery.k8s.io", "endpointslices", &["list", "watch"]),
    ])
}

/// Lease permissions (release namespace) the operator uses.
pub fn operator_lease_grants() -> BTreeSet<(String, String, String)> {
    grant_set(&[(
        "coordination.k8s.io",
        "leases",
        &["get", "list", "watch", "create", "update", "delete"],
    )])
}

#[test]
fn rbac_grants_exactly_what_the_operator_uses() {
    let docs = render(&[]);
    assert_eq!(
        grants(operator_clusterrole(&docs)),
        operator_cluster_grants(),
        "ClusterRole"
    );
    let role = one_in(&docs, "Role", RELEASE_NS);
    assert_eq!(grants(role), operator_lease_grants(), "Role");
    let discovery = one_in(&docs, "Role", "default");
    assert_eq!(grants(discovery), operator_discovery_grants(), "Role");
    assert_eq!(
        discovery["rules"][0]["resourceNames"][0].as_str(),
        Some("kubernetes"),
        "only the kubernetes Service"
    );
    assert_eq!(of_kind(&docs, "Role").len(), 2);
    // Without restricted namespaces the operator does not read namespaces.
    let docs = render(&["--set", "operator.restrictedNamespaces="]);
    let mut without = operator_cluster_grants();
    without.retain(|(_, r, _)| r != "namespaces");
    assert_eq!(grants(operator_clusterrole(&docs)), without);
    // readSecrets/readConfigMaps without a watched namespace: cluster-wide.
    let docs = render(&[
        "--set",
        "rbac.readSecrets=true",
        "--set",
        "rbac.readConfigMaps=true",
    ]);
    let mut cluster = operator_cluster_grants();
    cluster.extend(grant_set(&[
        ("", "secrets", &["get"]),
        ("", "configmaps", &["get"]),
    ]));
    assert_eq!(grants(operator_clusterrole(&docs)), cluster);
    assert_eq!(
        of_kind(&docs, "Role").len(),
        2,
        "only the Lease and discovery Roles"
    );
    // With a watched namespace: there only, one permission per switch.
    for (set, want) in [
        ("rbac.readSecrets=true", "secrets"),
        ("rbac.readConfigMaps=true", "configmaps"),
    ] {
        let docs = render(&["--set", "operator.watchNamespace=shop", "--set", set]);
        assert_eq!(
            grants(operator_clusterrole(&docs)),
            operator_cluster_grants(),
            "{set}"
        );
        let (role, _) = references_role(&docs, "shop");
        assert_eq!(grants(role), grant_set(&[("", want, &["get"])]), "{set}");
    }
    // Neither switch: no such Role.
    let docs = render(&["--set", "operator.watchNamespace=shop"]);
    assert_eq!(
        of_kind(&docs, "Role").len(),
        2,
        "only the Lease and discovery Roles"
    );
    assert_eq!(of_kind(&docs, "RoleBinding").len(), 2);
    // No RBAC at all with rbac.create=false.
    let docs = render(&[
        "--set",
        "rbac.create=false",
        "--set",
        "operator.watchNamespace=shop",
        "--set",
        "rbac.readSecrets=true",
    ]);
    let k = kinds(&docs);
    for kind in ["ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"] {
        assert!(!k.contains(kind), "{kind} rendered with rbac.create=false");
    }
}

/// The Role and RoleBinding granting Secret/ConfigMap reads in `namespace`.
pub fn references_role<'a>(docs: &'a [Value], namespace: &str) -> (&'a Value, &'a Value) {
    let find = |kind: &str| {
        let v: Vec<&Value> = of_kind(docs, kind)
            .into_iter()
            .filter(|d| d["metadata"]["namespace"].as_str() == Some(namespace))
            .collect();
        assert_eq!(v.len(), 1, "one {kind} in namespace {namespace}");
        v[0]
    };
    let (role, binding) = (find("Role"), find("RoleBinding"));
    assert_eq!(
        binding["roleRef"]["name"].as_str(),
        role["metadata"]["name"].as_str()
    );
    assert_eq!(binding["roleRef"]["kind"].as_str(), Some("Role"));
    assert_eq!(
        binding["subjects"][0]["kind"].as_str(),
        Some("ServiceAccount")
    );
    (role, binding)
}
