//! `helm install` / `upgrade` / `uninstall` on a real control plane, with
//! the README's commands (the pods never run: there is no kubelet).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use super::*;
use support::release::text;
use support::{checker_yaml, eventually};

pub async fn helm_release(cluster: &Cluster) -> Vec<serde_json::Value> {
    let out = ok(
        cluster_helm(cluster, &["list", "-n", RELEASE_NS, "-o", "json"]).await,
        "helm list",
    );
    serde_json::from_str::<Vec<serde_json::Value>>(&out).unwrap()
}

fn revision(r: &serde_json::Value) -> String {
    r["revision"].to_string().trim_matches('"').to_string()
}

/// name -> value (or fieldRef path) of the operator container's env; the
/// memory limit in bytes, as the downward API gives it.
pub fn live_env(dep: &serde_json::Value) -> BTreeMap<String, String> {
    let container = &dep["spec"]["template"]["spec"]["containers"][0];
    let limit = container["resources"]["limits"]["memory"]
        .as_str()
        .map_or(rendered::NODE_MEMORY, rendered::quantity_bytes)
        .to_string();
    container["env"]
        .as_array()
        .expect("env")
        .iter()
        .map(|e| {
            let v = match e["valueFrom"]["resourceFieldRef"]["resource"].as_str() {
                Some("limits.memory") => limit.clone(),
                _ => e["value"]
                    .as_str()
                    .or(e["valueFrom"]["fieldRef"]["fieldPath"].as_str())
                    .unwrap_or_default()
                    .to_string(),
            };
            (e["name"].as_str().unwrap().to_string(), v)
        })
        .collect()
}

/// The objects of the release: (kubectl kind, namespaced, name suffix).
const RELEASE_OBJECTS: &[(&str, bool, &str)] = &[
    ("deployment", true, ""),
    ("serviceaccount", true, ""),
    ("service", true, ""),
    ("role", true, ""),
    ("rolebinding", true, ""),
    ("poddisruptionbudget", true, ""),
    ("clusterrole", false, ""),
    ("clusterrolebinding", false, ""),
    ("validatingadmissionpolicy", false, "-references"),
    ("validatingadmissionpolicybinding", false, "-references"),
    ("flowschema", false, "-leases"),
];

async fn object_exists(cluster: &Cluster, kind: &str, namespaced: bool, suffix: &str) -> bool {
    let name = format!("{FULLNAME}{suffix}");
    let mut args = vec!["get", kind, &name];
    if namespaced {
        args.extend(["-n", RELEASE_NS]);
    }
    let out = kubectl(cluster, &args).await;
    if out.status.success() {
        return true;
    }
    let err = text(&out.stderr);
    assert!(err.contains("NotFound"), "kubectl get {kind}: {err}");
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn helm_install_upgrade_uninstall_on_a_real_control_plane() {
    let cluster = Cluster::shared("chart");
    // The README's commands, as they are written there.
    let env = install_the_release(cluster).await;
    upgrade_the_release(cluster, &env).await;
    uninstall_the_release(cluster).await;
}

/// `helm install`: revision 1 and every object of the release, three
/// replicas, the default Leases; and a WebChecker that must outlive the
/// release. The Deployment's environment.
async fn install_the_release(cluster: &Cluster) -> BTreeMap<String, String> {
    let t = Instant::now();
    helm_install(cluster, RELEASE, RELEASE_NS, &[]).await;
    println!("helm install: {:?}", t.elapsed());
    let rel = helm_release(cluster).await;
    assert_eq!(rel.len(), 1, "{rel:?}");
    assert_eq!(rel[0]["name"], "wc");
    assert_eq!(rel[0]["status"], "deployed");
    assert_eq!(revision(&rel[0]), "1");
    for (kind, namespaced, suffix) in RELEASE_OBJECTS {
        assert!(
            object_exists(cluster, kind, *namespaced, suffix).await,
            "{kind} {FULLNAME}{suffix} not installed"
        );
    }
    let dep = kubectl_json(cluster, &["get", "deployment", FULLNAME, "-n", RELEASE_NS]).await;
    assert_eq!(dep["spec"]["replicas"], 3);
    let env = live_env(&dep);
    assert_eq!(env["POD_NAME"], "metadata.name");
    assert_eq!(env["POD_NAMESPACE"], "metadata.namespace");
    assert_eq!(env["WEBCHECKER_LEASE_DURATION"], "10s");
    assert_eq!(env["WEBCHECKER_RENEW_DEADLINE"], "7s");
    assert_eq!(env["WEBCHECKER_RETRY_PERIOD"], "2s");
    // No controllers, no kubelet: the pods never exist, let alone run.
    assert!(dep["status"]["readyReplicas"].is_null());
    // A WebChecker that must outlive the release.
    let checker = checker_yaml("keep-me", "http://127.0.0.1:9", "/", 30, "");
    let out = cluster.kubectl_stdin(&["apply", "-n", RELEASE_NS, "-f", "-"], &checker);
    ok(out, "kubectl apply a WebChecker");
    env
}

/// `helm upgrade --reuse-values` of the replicas and the Leases: revision 2,
/// those changed, the rest of the environment `env` as it was.
async fn upgrade_the_release(cluster: &Cluster, env: &BTreeMap<String, String>) {
    let t = Instant::now();
    ok(
        cluster_helm(
            cluster,
            &[
                "upgrade",
                RELEASE,
                CHART,
                "-n",
                RELEASE_NS,
                "--reuse-values",
                "--set",
                "replicaCount=5",
                "--set",
                "operator.leaseDuration=15s",
                "--set",
                "operator.renewDeadline=10s",
                "--set",
                "operator.retryPeriod=3s",
            ],
        )
        .await,
        "helm upgrade",
    );
    println!("helm upgrade: {:?}", t.elapsed());
    let rel = helm_release(cluster).await;
    assert_eq!(rel[0]["status"], "deployed");
    assert_eq!(revision(&rel[0]), "2");
    let dep = kubectl_json(cluster, &["get", "deployment", FULLNAME, "-n", RELEASE_NS]).await;
    assert_eq!(dep["spec"]["replicas"], 5);
    let env2 = live_env(&dep);
    assert_eq!(env2["WEBCHECKER_LEASE_DURATION"], "15s");
    assert_eq!(env2["WEBCHECKER_RENEW_DEADLINE"], "10s");
    assert_eq!(env2["WEBCHECKER_RETRY_PERIOD"], "3s");
    for (k, v) in env {
        if !k.starts_with("WEBCHECKER_LEASE")
            && !k.starts_with("WEBCHECKER_RENEW")
            && !k.starts_with("WEBCHECKER_RETRY")
        {
            assert_eq!(&env2[k], v, "{k} changed by the upgrade");
        }
    }
}

/// `helm uninstall`: the release, its history and its objects go; the CRD and
/// the WebCheckers stay.
async fn uninstall_the_release(cluster: &Cluster) {
    let t = Instant::now();
    ok(
        cluster_helm(cluster, &["uninstall", RELEASE, "-n", RELEASE_NS]).await,
        "helm uninstall",
    );
    println!("helm uninstall: {:?}", t.elapsed());
    assert!(
        helm_release(cluster).await.is_empty(),
        "release still listed"
    );
    let history = kubectl_json(
        cluster,
        &[
            "get",
            "secrets",
            "-n",
            RELEASE_NS,
            "-l",
            "owner=helm,name=wc",
        ],
    )
    .await;
    assert_eq!(
        history["items"].as_array().map(Vec::len),
        Some(0),
        "release history left behind"
    );
    eventually(
        Duration::from_secs(30),
        "every object of the release deleted",
        || async {
            for (kind, namespaced, suffix) in RELEASE_OBJECTS {
                if object_exists(cluster, kind, *namespaced, suffix).await {
                    return None;
                }
            }
            Some(())
        },
    )
    .await;
    // The CRD and the WebCheckers stay.
    let crd = kubectl_json(cluster, &["get", "crd", CRD]).await;
    assert!(crd["metadata"]["deletionTimestamp"].is_null());
    ok(
        kubectl(cluster, &["get", "wc", "keep-me", "-n", RELEASE_NS]).await,
        "the WebChecker after uninstall",
    );
}
