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
/// (src/kubeio/preflight.rs) asks for (`patch` on events: the event recorder
/// counts a repeated event, event series), the forgery guard's, and the
/// confirmer's TokenReview of an asker's token.
pub fn operator_cluster_grants() -> BTreeSet<(String, String, String)> {
    grant_set(&[
        (
            "test.network.io",
            "webcheckers",
            &["get", "list", "watch", "patch"],
        ),
        ("test.network.io", "webcheckers/status", &["patch"]),
        // Maintenance windows: every replica's calendar, the leader's status.
        (
            "test.network.io",
            "webcheckermaintenances",
            &["list", "watch"],
        ),
        (
            "test.network.io",
            "webcheckermaintenances/status",
            &["patch"],
        ),
        ("events.k8s.io", "events", &["create", "patch"]),
        // The forgery guard: kubelet addresses, restricted namespaces.
        ("", "nodes", &["list", "watch"]),
        ("", "namespaces", &["list", "watch"]),
        // Confirmation: a confirmer reviews the asker's token.
        ("authentication.k8s.io", "tokenreviews", &["create"]),
    ])
}

/// What a diagnosis reads (rbac.diagnose, on by default): cluster-wide
/// without a watched namespace, else in the references Role.
pub fn diagnosis_grants() -> BTreeSet<(String, String, String)> {
    grant_set(&[
        ("", "services", &["get", "list"]),
        ("", "pods", &["get", "list"]),
        ("discovery.k8s.io", "endpointslices", &["list"]),
        ("networking.k8s.io", "ingresses", &["get"]),
        ("gateway.networking.k8s.io", "httproutes", &["get"]),
        ("gateway.networking.k8s.io", "grpcroutes", &["get"]),
        ("gateway.networking.k8s.io", "gateways", &["get"]),
        ("cert-manager.io", "certificates", &["list"]),
    ])
}

/// The operator's ClusterRole without a watched namespace: its own
/// grants and the diagnosis'.
pub fn operator_cluster_wide_grants() -> BTreeSet<(String, String, String)> {
    let mut g = operator_cluster_grants();
    g.extend(diagnosis_grants());
    g
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
        &[
            "get", "list", "watch", "create", "update", "patch", "delete",
        ],
    )])
}

/// Confirmation (release namespace, with operator.confirmFailures): the asker
/// makes a token of its own ServiceAccount (TokenRequest).
pub fn operator_token_grants() -> BTreeSet<(String, String, String)> {
    grant_set(&[("", "serviceaccounts/token", &["create"])])
}

/// The release namespace's Role: the Leases, and with confirmations the
/// token of the chart's ServiceAccount only.
pub fn operator_release_ns_grants() -> BTreeSet<(String, String, String)> {
    let mut g = operator_lease_grants();
    g.extend(operator_token_grants());
    g
}

/// The resourceNames of the rule of `role` on `resource` (empty: any name).
pub fn resource_names(role: &Value, resource: &str) -> Vec<String> {
    let rules: Vec<&Value> = role["rules"]
        .as_sequence()
        .expect("rules")
        .iter()
        .filter(|r| {
            r["resources"]
                .as_sequence()
                .is_some_and(|x| x.iter().any(|v| v.as_str() == Some(resource)))
        })
        .collect();
    assert_eq!(rules.len(), 1, "one rule on {resource}: {rules:?}");
    rules[0]["resourceNames"]
        .as_sequence()
        .map(|n| n.iter().map(|v| v.as_str().unwrap().to_string()).collect())
        .unwrap_or_default()
}

#[test]
fn rbac_grants_exactly_what_the_operator_uses() {
    default_roles();
    // The token follows the ServiceAccount the pods run as.
    the_token_follows_the_service_account();
    // Without confirmations the operator makes no token (it still reviews
    // the tokens of asks: another revision's replicas may ask during a rollout).
    let docs = render(&["--set", "operator.confirmFailures=false"]);
    let role = one_in(&docs, "Role", RELEASE_NS);
    assert_eq!(grants(role), operator_lease_grants(), "Role");
    assert_eq!(
        grants(operator_clusterrole(&docs)),
        operator_cluster_wide_grants()
    );
    // Without restricted namespaces the operator does not read namespaces.
    let docs = render(&["--set", "operator.restrictedNamespaces="]);
    let mut without = operator_cluster_wide_grants();
    without.retain(|(_, r, _)| r != "namespaces");
    assert_eq!(grants(operator_clusterrole(&docs)), without);
    reads_of_secrets_and_config_maps();
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

/// The default values: the ClusterRole, the release namespace's Role (the
/// token of the chart's ServiceAccount only) and the discovery Role.
fn default_roles() {
    let docs = render(&[]);
    assert_eq!(
        grants(operator_clusterrole(&docs)),
        operator_cluster_wide_grants(),
        "ClusterRole"
    );
    // rbac.diagnose=false: nothing of the diagnosis.
    let docs_off = render(&["--set", "rbac.diagnose=false"]);
    assert_eq!(
        grants(operator_clusterrole(&docs_off)),
        operator_cluster_grants(),
        "ClusterRole without diagnosis"
    );
    let role = one_in(&docs, "Role", RELEASE_NS);
    assert_eq!(grants(role), operator_release_ns_grants(), "Role");
    assert_eq!(
        resource_names(role, "serviceaccounts/token"),
        [FULLNAME],
        "a token of the chart's own ServiceAccount only"
    );
    assert!(resource_names(role, "leases").is_empty());
    let discovery = one_in(&docs, "Role", "default");
    assert_eq!(grants(discovery), operator_discovery_grants(), "Role");
    assert_eq!(
        discovery["rules"][0]["resourceNames"][0].as_str(),
        Some("kubernetes"),
        "only the kubernetes Service"
    );
    assert_eq!(of_kind(&docs, "Role").len(), 2);
}

fn the_token_follows_the_service_account() {
    for (set, name) in [
        ("serviceAccount.name=webchecker", "webchecker"),
        ("serviceAccount.create=false", "default"),
    ] {
        let docs = render(&["--set", set]);
        let role = one_in(&docs, "Role", RELEASE_NS);
        assert_eq!(
            resource_names(role, "serviceaccounts/token"),
            [name],
            "{set}"
        );
        assert_eq!(
            pod_spec(one(&docs, "Deployment"))["serviceAccountName"].as_str(),
            Some(name),
            "{set}"
        );
    }
}

/// readSecrets/readConfigMaps: cluster-wide without a watched namespace,
/// else there only, one permission per switch.
fn reads_of_secrets_and_config_maps() {
    // Without a watched namespace: cluster-wide.
    let docs = render(&[
        "--set",
        "rbac.readSecrets=true",
        "--set",
        "rbac.readConfigMaps=true",
    ]);
    let mut cluster = operator_cluster_wide_grants();
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
        let mut expected = grant_set(&[("", want, &["get"])]);
        expected.extend(diagnosis_grants());
        assert_eq!(grants(role), expected, "{set}");
    }
    // Only the diagnosis: a Role with its reads.
    let docs = render(&["--set", "operator.watchNamespace=shop"]);
    let (role, _) = references_role(&docs, "shop");
    assert_eq!(grants(role), diagnosis_grants());
    // No switch at all: no such Role.
    let docs = render(&[
        "--set",
        "operator.watchNamespace=shop",
        "--set",
        "rbac.diagnose=false",
    ]);
    assert_eq!(
        of_kind(&docs, "Role").len(),
        2,
        "only the Lease and discovery Roles"
    );
    assert_eq!(of_kind(&docs, "RoleBinding").len(), 2);
}

/// The Role and RoleBinding granting Secret/ConfigMap reads in `namespace`
/// (route discovery may have a Role there too).
pub fn references_role<'a>(docs: &'a [Value], namespace: &str) -> (&'a Value, &'a Value) {
    let find = |kind: &str| {
        let v: Vec<&Value> = of_kind(docs, kind)
            .into_iter()
            .filter(|d| d["metadata"]["namespace"].as_str() == Some(namespace))
            .filter(|d| {
                d["metadata"]["name"]
                    .as_str()
                    .is_some_and(|n| n.ends_with("-references"))
            })
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
