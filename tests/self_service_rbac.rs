//! Self-service RBAC: the chart's ClusterRoles labelled
//! `rbac.authorization.k8s.io/aggregate-to-{view,edit,admin}` let users bound
//! to the built-in `edit` (or `admin`) role in a namespace create and list
//! WebCheckers there, and users bound to `view` list them only.
//!
//! On a real control plane: the chart as `helm template` renders it, applied
//! with kubectl; the built-in view/edit/admin roles of the API server's RBAC
//! bootstrap; kube-controller-manager running only its
//! clusterrole-aggregation controller (the test control plane runs no
//! controller-manager otherwise), which fills `edit` from the labelled roles;
//! ServiceAccounts bound with RoleBindings as the subjects, acting through
//! kubectl with their own tokens. Before the controller runs, the same user is
//! refused: the permission comes from the aggregation and nothing else.

use webchecker_kit as support;
use webchecker_kit::platform;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use platform::*;
use support::release::{helm_template, service_account};
use support::*;

/// bin directory of kube-controller-manager (hack/build-node-tools.sh node:
/// reuses the cached build, builds it the first time).
fn node_tools_bin() -> PathBuf {
    if let Some(b) = std::env::var_os("WEBCHECKER_NODE_TOOLS_BIN") {
        return PathBuf::from(b);
    }
    let out = bounded("bash", SETUP_LIMIT)
        .arg(repo().join("hack/build-node-tools.sh"))
        .arg("node")
        .stderr(Stdio::inherit())
        .output()
        .expect("run hack/build-node-tools.sh node");
    assert!(out.status.success(), "hack/build-node-tools.sh node failed");
    PathBuf::from(
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .last()
            .expect("hack/build-node-tools.sh prints the bin directory")
            .trim(),
    )
}

/// kube-controller-manager with the clusterrole-aggregation controller only,
/// as the cluster admin, serving nothing. Killed when dropped.
struct AggregationController {
    child: Child,
    log: PathBuf,
}

impl AggregationController {
    fn start(cluster: &Cluster) -> AggregationController {
        let log = cluster.dir.join("kube-controller-manager.log");
        let f = std::fs::File::create(&log).unwrap();
        let child = Command::new(node_tools_bin().join("kube-controller-manager"))
            .arg(format!("--kubeconfig={}", cluster.kubeconfig.display()))
            .arg("--controllers=clusterrole-aggregation-controller")
            .arg("--leader-elect=false")
            .arg("--secure-port=0")
            .arg("--profiling=false")
            .stdin(Stdio::null())
            .stdout(f.try_clone().unwrap())
            .stderr(f)
            .spawn()
            .expect("start kube-controller-manager");
        AggregationController { child, log }
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for AggregationController {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// kubectl with `kubeconfig`, stdin `input`; (success, stdout + stderr).
async fn kubectl_as(
    cluster: &Cluster,
    kubeconfig: &Path,
    args: &[&str],
    input: &str,
) -> (bool, String) {
    let c = cluster.kubectl_as(kubeconfig, args);
    let input = input.to_string();
    tokio::task::spawn_blocking(move || {
        let out = output_with_stdin(c, &input);
        (
            out.status.success(),
            format!("{}{}", text(&out.stdout), text(&out.stderr)),
        )
    })
    .await
    .unwrap()
}

fn admin(cluster: &Cluster, args: &[&str]) -> String {
    let out = cluster.kubectl(args);
    assert!(
        out.status.success(),
        "kubectl {args:?}: {}",
        text(&out.stderr)
    );
    text(&out.stdout)
}

/// A ServiceAccount of `ns` bound to the built-in ClusterRole `role` in `ns`;
/// a kubeconfig acting as it.
async fn user(cluster: &Cluster, ns: &str, name: &str, role: &str) -> PathBuf {
    admin(cluster, &["create", "serviceaccount", name, "-n", ns]);
    admin(
        cluster,
        &[
            "create",
            "rolebinding",
            &format!("{name}-{role}"),
            &format!("--clusterrole={role}"),
            &format!("--serviceaccount={ns}:{name}"),
            "-n",
            ns,
        ],
    );
    service_account(cluster, ns, name).await.0
}

fn checker(name: &str) -> String {
    checker_yaml(name, "https://shop.example.com", "/healthz", 30, "")
}

#[test]
fn aggregated_roles_are_rendered_by_default_and_can_be_turned_off() {
    let names = |values: &str| -> Vec<(String, Vec<String>)> {
        of_kind(&render_values(values), "ClusterRole")
            .into_iter()
            .filter_map(|r| {
                let labels: Vec<String> = r["metadata"]["labels"]
                    .as_mapping()?
                    .iter()
                    .filter(|(_, v)| v.as_str() == Some("true"))
                    .filter_map(|(k, _)| {
                        k.as_str()?
                            .strip_prefix("rbac.authorization.k8s.io/")
                            .map(String::from)
                    })
                    .collect();
                (!labels.is_empty())
                    .then(|| (r["metadata"]["name"].as_str().unwrap().to_string(), labels))
            })
            .collect()
    };
    assert_eq!(
        names(""),
        [
            (
                "wc-webchecker-operator-view".to_string(),
                vec![
                    "aggregate-to-view".to_string(),
                    "aggregate-to-edit".to_string(),
                    "aggregate-to-admin".to_string()
                ]
            ),
            (
                "wc-webchecker-operator-edit".to_string(),
                vec![
                    "aggregate-to-edit".to_string(),
                    "aggregate-to-admin".to_string()
                ]
            ),
        ]
    );
    assert!(names("rbac:\n  aggregateClusterRoles: false\n").is_empty());
    assert!(names("rbac:\n  create: false\n").is_empty());
}

/// The chart applied, and three users of the `team` namespace: an editor,
/// an admin and a viewer; `other` is a namespace none of them is bound in.
struct Team {
    cluster: &'static Cluster,
    team: String,
    other: String,
    dev: PathBuf,
    lead: PathBuf,
    auditor: PathBuf,
}

impl Team {
    async fn install() -> Team {
        let cluster = Cluster::shared("self-service-rbac");
        // The chart as users install it (no operator pod runs: no kubelet).
        let rendered = helm_template(cluster, "wc", "webchecker", &[]).await;
        admin(cluster, &["create", "namespace", "webchecker"]);
        let out = cluster.kubectl_stdin(&["apply", "--server-side", "-f", "-"], &rendered);
        assert!(
            out.status.success(),
            "apply the chart: {}",
            text(&out.stderr)
        );

        let team = cluster.namespace("team");
        let other = cluster.namespace("other");
        let dev = user(cluster, &team, "dev", "edit").await;
        let lead = user(cluster, &team, "lead", "admin").await;
        let auditor = user(cluster, &team, "auditor", "view").await;
        Team {
            cluster,
            team,
            other,
            dev,
            lead,
            auditor,
        }
    }

    /// kubectl as the user of `kubeconfig` (see [`kubectl_as`]).
    async fn kubectl(&self, kubeconfig: &Path, args: &[&str], input: &str) -> (bool, String) {
        kubectl_as(self.cluster, kubeconfig, args, input).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_namespace_editor_creates_and_lists_webcheckers_a_viewer_only_lists() {
    let t = Team::install().await;
    let team = &t.team;

    // Without the aggregation controller the built-in roles know nothing of
    // WebCheckers: refused.
    let (ok, out) = t
        .kubectl(
            &t.dev,
            &["create", "-n", team, "-f", "-"],
            &checker("early"),
        )
        .await;
    assert!(
        !ok && out.contains("forbidden"),
        "created before aggregation: {out}"
    );

    let kcm = AggregationController::start(t.cluster);
    edit_aggregates_every_verb_on_webcheckers(&t, &kcm).await;
    editor_and_admin_manage_checkers_in_their_namespace_only(&t).await;
    viewer_only_reads(&t).await;

    let (ok, out) = t
        .kubectl(&t.dev, &["delete", "wc", "shop", "-n", team], "")
        .await;
    assert!(ok, "editor delete: {out}");
}

/// The aggregation controller fills `edit` with the chart's rules: every
/// verb on WebCheckers.
async fn edit_aggregates_every_verb_on_webcheckers(t: &Team, kcm: &AggregationController) {
    let cluster = t.cluster;
    let edit_rules = eventually(
        Duration::from_secs(120),
        "edit aggregates the chart's rules",
        || async {
            let role: serde_json::Value = serde_json::from_str(&admin(
                cluster,
                &["get", "clusterrole", "edit", "-o", "json"],
            ))
            .ok()?;
            let rules = role["rules"].as_array()?.clone();
            let aggregated = rules.iter().any(|r| {
                r["resources"]
                    .as_array()
                    .is_some_and(|rs| rs.iter().any(|x| x == "webcheckers"))
            });
            aggregated.then_some(rules)
        },
    )
    .await;
    let verbs: Vec<String> = edit_rules
        .iter()
        .filter(|r| r["apiGroups"][0] == "test.network.io")
        .flat_map(|r| {
            r["verbs"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_str().unwrap().to_string())
        })
        .collect();
    for v in [
        "get", "list", "watch", "create", "update", "patch", "delete",
    ] {
        assert!(
            verbs.contains(&v.to_string()),
            "edit lacks {v}: {verbs:?}\n{}",
            kcm.log_text()
        );
    }
}

/// The editor and the admin: create, list, change, delete in their namespace.
async fn editor_and_admin_manage_checkers_in_their_namespace_only(t: &Team) {
    let (team, other) = (&t.team, &t.other);
    let (ok, out) = t
        .kubectl(&t.dev, &["create", "-n", team, "-f", "-"], &checker("shop"))
        .await;
    assert!(ok, "editor create: {out}");
    let (ok, out) = t
        .kubectl(
            &t.lead,
            &["create", "-n", team, "-f", "-"],
            &checker("admin-made"),
        )
        .await;
    assert!(ok, "admin create: {out}");
    let (ok, out) = t
        .kubectl(
            &t.dev,
            &["get", "webcheckers", "-n", team, "-o", "name"],
            "",
        )
        .await;
    assert!(ok, "editor list: {out}");
    assert!(
        out.contains("webchecker.test.network.io/shop") && out.contains("/admin-made"),
        "{out}"
    );
    let (ok, out) = t
        .kubectl(
            &t.dev,
            &[
                "patch",
                "webchecker",
                "shop",
                "-n",
                team,
                "--type=merge",
                "-p",
                r#"{"spec":{"intervalSeconds":60}}"#,
            ],
            "",
        )
        .await;
    assert!(ok, "editor patch: {out}");
    // The status stays the operator's.
    let (ok, out) = t
        .kubectl(
            &t.dev,
            &[
                "patch",
                "webchecker",
                "shop",
                "-n",
                team,
                "--subresource=status",
                "--type=merge",
                "-p",
                r#"{"status":{"owner":"me"}}"#,
            ],
            "",
        )
        .await;
    assert!(
        !ok && out.contains("forbidden"),
        "editor wrote status: {out}"
    );
    // Bound in their namespace only.
    let (ok, out) = t
        .kubectl(
            &t.dev,
            &["create", "-n", other, "-f", "-"],
            &checker("elsewhere"),
        )
        .await;
    assert!(
        !ok && out.contains("forbidden"),
        "editor created in another namespace: {out}"
    );
    let (ok, out) = t.kubectl(&t.dev, &["get", "webcheckers", "-A"], "").await;
    assert!(
        !ok && out.contains("forbidden"),
        "editor listed all namespaces: {out}"
    );
}

/// The viewer lists and reads, and may change nothing.
async fn viewer_only_reads(t: &Team) {
    let team = &t.team;
    let (ok, out) = t
        .kubectl(&t.auditor, &["get", "wc", "-n", team, "-o", "name"], "")
        .await;
    assert!(ok && out.contains("/shop"), "viewer list: {out}");
    let (ok, out) = t
        .kubectl(
            &t.auditor,
            &["create", "-n", team, "-f", "-"],
            &checker("viewer-made"),
        )
        .await;
    assert!(!ok && out.contains("forbidden"), "viewer created: {out}");
    let (ok, out) = t
        .kubectl(&t.auditor, &["delete", "wc", "shop", "-n", team], "")
        .await;
    assert!(!ok && out.contains("forbidden"), "viewer deleted: {out}");
}
