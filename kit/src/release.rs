//! A release of the chart as `helm template` renders it (the real helm),
//! applied to a real control plane, and an operator replica running as a pod
//! of it would: with a token of the chart's ServiceAccount (TokenRequest API),
//! Leases in the release namespace, one watched namespace. Also clients acting
//! as any ServiceAccount, for tests of what a user may do.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use kube::Client;
use kube::config::{KubeConfigOptions, Kubeconfig};

use super::{Cluster, FAST_LEASES, Operator, TOOL_LIMIT, bounded, repo};

pub const CHART: &str = "deploy/helm/webchecker-operator";

/// The image repository the tests render and install the chart with (it has
/// no default): the name of `make image`'s archive, loaded into the node.
pub const IMAGE_REPOSITORY: &str = "webchecker-operator";

/// A values file setting only `image.repository` ([`IMAGE_REPOSITORY`]),
/// for `helm -f` before a test's own values files (which may override it;
/// `--set` could not be overridden).
pub fn base_values() -> &'static Path {
    static FILE: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    FILE.get_or_init(|| {
        let dir = repo().join("target").join("e2e");
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("chart-image-values.yaml");
        let tmp = dir.join(format!("chart-image-values.yaml.{}", std::process::id()));
        std::fs::write(&tmp, format!("image:\n  repository: {IMAGE_REPOSITORY}\n")).unwrap();
        std::fs::rename(&tmp, &file).unwrap();
        file
    })
}

/// Asserts that `list` (`helm list -o json`) is one release, deployed, at
/// `revision`, of the chart at `version`.
pub fn assert_deployed(list: &serde_json::Value, revision: u32, version: &str) {
    let rel = &list[0];
    assert_eq!(list.as_array().map(Vec::len), Some(1), "{list}");
    assert_eq!(rel["revision"], revision.to_string(), "{list}");
    assert_eq!(rel["status"], "deployed", "{list}");
    assert_eq!(
        rel["chart"],
        format!("webchecker-operator-{version}"),
        "{list}"
    );
}

pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).to_string()
}

pub fn ok(out: Output, what: &str) -> String {
    assert!(
        out.status.success(),
        "{what} failed ({}):\nstdout: {}\nstderr: {}",
        out.status,
        text(&out.stdout),
        text(&out.stderr)
    );
    text(&out.stdout)
}

/// Runs a command off the async worker threads (the witnesses share them).
pub async fn run(mut cmd: Command) -> Output {
    tokio::task::spawn_blocking(move || cmd.output().expect("run command"))
        .await
        .unwrap()
}

pub async fn kubectl(cluster: &Cluster, args: &[&str]) -> String {
    let c = cluster.kubectl_as(&cluster.kubeconfig, args);
    ok(run(c).await, &format!("kubectl {args:?}"))
}

/// The helm of `bin` run from the repository root (chart paths are relative
/// to it, as in the README), with its own config/cache/data directories
/// (nothing written to $HOME), on the cluster of `kubeconfig` if any.
pub fn helm_command(bin: &Path, kubeconfig: Option<&Path>) -> Command {
    let home = repo().join("target").join("e2e").join("helm-home");
    let mut c = bounded(bin.join("helm"), TOOL_LIMIT);
    c.current_dir(repo())
        .env("HELM_CACHE_HOME", home.join("cache"))
        .env("HELM_CONFIG_HOME", home.join("config"))
        .env("HELM_DATA_HOME", home.join("data"));
    match kubeconfig {
        Some(k) => c.env("KUBECONFIG", k),
        None => c.env_remove("KUBECONFIG"),
    };
    c
}

/// The chart as users install it: `helm template` with the real helm.
pub async fn helm_template(
    cluster: &Cluster,
    release: &str,
    namespace: &str,
    sets: &[&str],
) -> String {
    let mut c = helm_command(&cluster.bin, None);
    c.args([
        "template",
        release,
        CHART,
        "-n",
        namespace,
        "--skip-tests",
        "-f",
    ])
    .arg(base_values());
    for s in sets {
        c.args(["--set", s]);
    }
    ok(run(c).await, &format!("helm template {sets:?}"))
}

/// RBAC for a ServiceAccount `limited` in `ns` with what the operator needs
/// (its checkers and their status, Events, namespaces, Leases in `ns`) and
/// nothing to read Nodes, the `kubernetes` Service or its EndpointSlices:
/// the operator runs without address discovery. `role` names the cluster-wide
/// objects (unique per test).
pub fn rbac_without_address_discovery(ns: &str, role: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: ServiceAccount
metadata: {{name: limited, namespace: {ns}}}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {{name: {role}}}
rules:
- {{apiGroups: [test.network.io], resources: [webcheckers], verbs: [get, list, watch, patch]}}
- {{apiGroups: [test.network.io], resources: [webcheckers/status], verbs: [patch]}}
- {{apiGroups: [test.network.io], resources: [webcheckermaintenances], verbs: [list, watch]}}
- {{apiGroups: [test.network.io], resources: [webcheckermaintenances/status], verbs: [patch]}}
- {{apiGroups: [events.k8s.io], resources: [events], verbs: [create, patch]}}
- {{apiGroups: [""], resources: [namespaces], verbs: [list, watch]}}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {{name: {role}}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: {role}}}
subjects: [{{kind: ServiceAccount, name: limited, namespace: {ns}}}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {{name: leases, namespace: {ns}}}
rules:
- {{apiGroups: [coordination.k8s.io], resources: [leases], verbs: [get, list, watch, create, update, patch, delete]}}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {{name: leases, namespace: {ns}}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: leases}}
subjects: [{{kind: ServiceAccount, name: limited, namespace: {ns}}}]
"#
    )
}

/// A kubeconfig of the cluster whose only user is a ServiceAccount token
/// (TokenRequest API, `kubectl create token`), and a client using it.
pub async fn service_account(cluster: &Cluster, namespace: &str, name: &str) -> (PathBuf, Client) {
    let token = kubectl(
        cluster,
        &["create", "token", name, "-n", namespace, "--duration=1h"],
    )
    .await;
    let mut kc: serde_yaml::Value =
        serde_yaml::from_str(&std::fs::read_to_string(&cluster.kubeconfig).unwrap()).unwrap();
    kc["users"] = serde_yaml::from_str(&format!(
        "- name: {name}\n  user:\n    token: {}\n",
        token.trim()
    ))
    .unwrap();
    for ctx in kc["contexts"].as_sequence_mut().expect("contexts") {
        ctx["context"]["user"] = serde_yaml::Value::String(name.to_string());
    }
    let path = cluster.dir.join(format!("kubeconfig-{namespace}-{name}"));
    std::fs::write(&path, serde_yaml::to_string(&kc).unwrap()).unwrap();
    let kc = Kubeconfig::read_from(&path).unwrap();
    let cfg = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .unwrap();
    (path, Client::try_from(cfg).unwrap())
}

/// One operator replica as the chart's pod would run it: the chart's
/// ServiceAccount, Leases in the release namespace, one watched namespace,
/// every probe and every read at trace level (the log must still never hold
/// a value).
pub struct Replica(pub Operator);

impl Replica {
    pub fn spawn(cluster: &Cluster, kubeconfig: &Path, lease_ns: &str, watch_ns: &str) -> Replica {
        Self::spawn_as(
            cluster,
            kubeconfig,
            lease_ns,
            watch_ns,
            &format!("op-{watch_ns}"),
        )
    }

    /// [`Replica::spawn`] under the pod name `identity` (a release's
    /// replicas need one each).
    pub fn spawn_as(
        cluster: &Cluster,
        kubeconfig: &Path,
        lease_ns: &str,
        watch_ns: &str,
        identity: &str,
    ) -> Replica {
        let mut extra = FAST_LEASES.to_vec();
        extra.push("--log-level=info,webchecker=trace");
        Replica(Operator::spawn_scoped(
            cluster, identity, lease_ns, watch_ns, &extra, kubeconfig,
        ))
    }

    /// One replica as a pod of a Deployment runs: the operator container's
    /// environment `env` (name -> value, or the downward API's fieldPath, as
    /// the Deployment lists them), the credentials of `kubeconfig` (a token
    /// of the pod's ServiceAccount), `extra` flags, nothing else. The kit
    /// plays the kubelet: the pod name is `identity`, the namespace
    /// `namespace`, the pod UID `uid` until the kit made the pod's object
    /// (crate::pods: then its own UID, which the tokens of confirmation asks
    /// are bound to), the pod IP loopback. The listen ports (the pod binds
    /// 0.0.0.0:<port>; here every replica needs ports of its own) and the
    /// resolver files (the kit's name server) are the kit's.
    pub fn spawn_pod(
        cluster: &Cluster,
        kubeconfig: &Path,
        env: &BTreeMap<String, String>,
        (identity, namespace, uid): (&str, &str, &str),
        extra: &[&str],
    ) -> Replica {
        let kits = [
            "WEBCHECKER_LISTEN",
            "WEBCHECKER_CONFIRM_LISTEN",
            "WEBCHECKER_RESOLV_CONF",
            "WEBCHECKER_HOSTS_FILE",
        ];
        let env = env
            .iter()
            .filter(|(k, _)| !kits.contains(&k.as_str()))
            .map(|(k, v)| {
                let v = match v.as_str() {
                    "metadata.name" => identity,
                    "metadata.namespace" => namespace,
                    // Peers look at the listen address, on loopback.
                    "status.podIP" => "127.0.0.1",
                    "metadata.uid" => uid,
                    v => v,
                };
                (k.clone(), v.to_string())
            })
            .collect();
        Replica(Operator::spawn_pod(
            cluster, identity, env, extra, kubeconfig,
        ))
    }

    /// Ready within 60 s; a replica that exits instead fails at once, with its log.
    pub async fn wait_ready(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(st) = self.0.exited() {
                panic!("{} exited ({st}):\n{}", self.0.identity, self.0.log_text());
            }
            if let Some((200, _)) = self.0.get("/readyz").await {
                return;
            }
            assert!(Instant::now() < deadline, "{} not ready", self.0.identity);
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    pub fn log_text(&self) -> String {
        self.0.log_text()
    }
}

/// Installs the chart's objects (rendered for release `release` in `release_ns`,
/// watching `tenant`) and starts one replica with the chart's ServiceAccount.
pub async fn install(
    cluster: &Cluster,
    release: &str,
    release_ns: &str,
    tenant: &str,
    extra: &[&str],
) -> (String, Replica) {
    let watch = format!("operator.watchNamespace={tenant}");
    let mut sets = vec![
        watch.as_str(),
        "rbac.readSecrets=true",
        "rbac.readConfigMaps=true",
    ];
    sets.extend_from_slice(extra);
    let rendered = helm_template(cluster, release, release_ns, &sets).await;
    // Every namespaced object of the chart names its namespace.
    let out = cluster.kubectl_stdin(&["apply", "--server-side", "-f", "-"], &rendered);
    ok(out, "kubectl apply the rendered chart");
    let fullname = format!("{release}-webchecker-operator");
    let (kc, _) = service_account(cluster, release_ns, &fullname).await;
    let mut op = Replica::spawn(cluster, &kc, release_ns, tenant);
    op.wait_ready().await;
    (rendered, op)
}
