//! The Helm chart (deploy/helm/webchecker-operator) with the real helm and
//! kubectl binaries of hack/build-tools.sh:
//!
//! - the chart's copies of the CRD, the alert rules and the dashboards are
//!   identical to their sources (`make chart-sync`);
//! - `helm lint --strict` and `helm template` with the default values and with
//!   deploy/helm/ci/all-on-values.yaml, and every values file of
//!   deploy/helm/ci/invalid/ failing with the message of its first line;
//! - `helm install` / `upgrade` / `uninstall` on a real control plane (the
//!   pods never run: there is no kubelet);
//! - least privilege: three operator processes run with a token of the chart's
//!   ServiceAccount and nothing else, shard, probe, fail over; a replica started
//!   after a permission was taken away exits at once, naming it.

mod support;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use clap::Parser;
use k8s_openapi::api::events::v1::Event as K8sEvent;
use kube::api::ListParams;
use kube::{Api, ResourceExt};
use serde::Deserialize;
use serde_yaml::Value;
use support::release::{ok, text};
use support::*;
use webchecker::api::{OWNER_LABEL, WebChecker};
use webchecker::config::Config;

/// Paths relative to the repository root (helm runs there, as in the README).
const CHART: &str = "deploy/helm/webchecker-operator";
const ALL_ON: &str = "deploy/helm/ci/all-on-values.yaml";
const INVALID_DIR: &str = "deploy/helm/ci/invalid";
/// The README's release and namespace.
const RELEASE: &str = "wc";
const RELEASE_NS: &str = "webchecker";
/// `<release>-<chart>`: the Deployment, ServiceAccount, (Cluster)Role(Binding)s.
const FULLNAME: &str = "wc-webchecker-operator";
const CRD: &str = "webcheckers.test.network.io";

const INTERVAL: u32 = 2;
/// Must match support::FAST_LEASES.
const LEASE: Duration = Duration::from_secs(3);

// ------------------------------------------------------------------ tools

/// helm/kubectl directory for the tests that need no cluster.
fn tools_bin() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        if let Some(b) = std::env::var_os("WEBCHECKER_TOOLS_BIN") {
            return PathBuf::from(b);
        }
        let out = bounded("bash", SETUP_LIMIT)
            .arg(repo().join("hack/build-tools.sh"))
            .stderr(Stdio::inherit())
            .output()
            .expect("run hack/build-tools.sh");
        assert!(out.status.success(), "hack/build-tools.sh failed");
        PathBuf::from(
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .last()
                .expect("hack/build-tools.sh prints the bin directory")
                .trim(),
        )
    })
}

/// A helm command run from the repository root, with its own config/cache/data
/// directories (nothing written to $HOME) and the given cluster, if any.
fn helm_cmd(bin: &Path, kubeconfig: Option<&Path>, args: &[&str]) -> Command {
    let home = repo().join("target").join("e2e").join("helm-home");
    let mut c = bounded(bin.join("helm"), TOOL_LIMIT);
    c.current_dir(repo())
        .args(args)
        .env("HELM_CACHE_HOME", home.join("cache"))
        .env("HELM_CONFIG_HOME", home.join("config"))
        .env("HELM_DATA_HOME", home.join("data"));
    match kubeconfig {
        Some(k) => c.env("KUBECONFIG", k),
        None => c.env_remove("KUBECONFIG"),
    };
    c
}

fn helm(args: &[&str]) -> Output {
    helm_cmd(tools_bin(), None, args)
        .output()
        .expect("run helm")
}

/// Runs a command off the async worker threads (the witness shares them).
async fn run(mut cmd: Command) -> Output {
    tokio::task::spawn_blocking(move || cmd.output().expect("run command"))
        .await
        .unwrap()
}

fn kubectl_cmd(cluster: &Cluster, kubeconfig: &Path, args: &[&str]) -> Command {
    let mut c = bounded(cluster.bin.join("kubectl"), TOOL_LIMIT);
    c.env("KUBECONFIG", kubeconfig).args(args);
    c
}

/// kubectl as the cluster admin.
async fn kubectl(cluster: &Cluster, args: &[&str]) -> Output {
    run(kubectl_cmd(cluster, &cluster.kubeconfig, args)).await
}

async fn kubectl_json(cluster: &Cluster, args: &[&str]) -> serde_json::Value {
    let mut a = args.to_vec();
    a.extend(["-o", "json"]);
    let out = ok(kubectl(cluster, &a).await, &format!("kubectl {args:?}"));
    serde_json::from_str(&out).unwrap()
}

async fn cluster_helm(cluster: &Cluster, args: &[&str]) -> Output {
    run(helm_cmd(&cluster.bin, Some(&cluster.kubeconfig), args)).await
}

// -------------------------------------------------------------- rendering

/// `helm template` of the README's release, parsed into its YAML documents.
/// The `helm test` hook (templates/tests/) is left out: it is not part of
/// the release's objects (`render_tests` has it).
fn render(extra: &[&str]) -> Vec<Value> {
    let mut args = vec!["template", RELEASE, CHART, "-n", RELEASE_NS, "--skip-tests"];
    args.extend_from_slice(extra);
    let out = ok(helm(&args), &format!("helm template {extra:?}"));
    serde_yaml::Deserializer::from_str(&out)
        .map(|d| Value::deserialize(d).expect("helm template prints YAML"))
        .filter(|v| !v.is_null())
        .collect()
}

fn of_kind<'a>(docs: &'a [Value], kind: &str) -> Vec<&'a Value> {
    docs.iter()
        .filter(|d| d["kind"].as_str() == Some(kind))
        .collect()
}

fn one<'a>(docs: &'a [Value], kind: &str) -> &'a Value {
    let v = of_kind(docs, kind);
    assert_eq!(v.len(), 1, "exactly one {kind} rendered");
    v[0]
}

/// The one object of `kind` in `namespace`.
fn one_in<'a>(docs: &'a [Value], kind: &str, namespace: &str) -> &'a Value {
    let v: Vec<&Value> = of_kind(docs, kind)
        .into_iter()
        .filter(|d| d["metadata"]["namespace"].as_str() == Some(namespace))
        .collect();
    assert_eq!(v.len(), 1, "exactly one {kind} rendered in {namespace}");
    v[0]
}

/// The operator's own ClusterRole (the chart also renders the aggregated
/// view/edit ClusterRoles for users, tests/self_service_rbac.rs).
fn operator_clusterrole(docs: &[Value]) -> &Value {
    let v: Vec<&Value> = of_kind(docs, "ClusterRole")
        .into_iter()
        .filter(|d| d["metadata"]["name"].as_str() == Some(FULLNAME))
        .collect();
    assert_eq!(v.len(), 1, "exactly one ClusterRole {FULLNAME}");
    v[0]
}

fn kinds(docs: &[Value]) -> BTreeSet<String> {
    docs.iter()
        .filter_map(|d| d["kind"].as_str().map(str::to_string))
        .collect()
}

fn container(dep: &Value) -> &Value {
    let cs = dep["spec"]["template"]["spec"]["containers"]
        .as_sequence()
        .expect("containers");
    assert_eq!(cs.len(), 1, "one container");
    &cs[0]
}

fn env_entries(container: &Value) -> Vec<&Value> {
    container["env"]
        .as_sequence()
        .map(|s| s.iter().collect())
        .unwrap_or_default()
}

fn env_names(container: &Value) -> Vec<String> {
    env_entries(container)
        .iter()
        .map(|e| e["name"].as_str().unwrap().to_string())
        .collect()
}

/// (env, flag) of the flags table of docs/operator-interface.md, the contract
/// between the binary and the chart.
fn documented_env() -> BTreeMap<String, String> {
    let doc = std::fs::read_to_string(repo().join("docs/operator-interface.md")).unwrap();
    let m: BTreeMap<String, String> = doc
        .lines()
        .filter_map(|l| {
            let cols: Vec<&str> = l.split('|').map(str::trim).collect();
            let flag = cols.get(1)?.strip_prefix("`--")?.strip_suffix('`')?;
            let env = cols.get(2)?.strip_prefix('`')?.strip_suffix('`')?;
            Some((env.to_string(), flag.to_string()))
        })
        .collect();
    assert!(
        m.len() > 10 && m.contains_key("POD_NAME"),
        "flags table of docs/operator-interface.md not found: {m:?}"
    );
    m
}

/// The operator's configuration as a replica of the rendered Deployment gets
/// it: every documented variable of the container becomes its flag, parsed and
/// validated by the operator's own code.
/// Stands in for the downward API's pod UID.
const POD_UID: &str = "00000000-0000-4000-8000-000000000001";

fn rendered_config(dep: &Value, identity: &str) -> Config {
    let flags = documented_env();
    let mut args = vec!["webchecker-operator".to_string()];
    for e in env_entries(container(dep)) {
        let name = e["name"].as_str().unwrap();
        let value = match (
            e["value"].as_str(),
            e["valueFrom"]["fieldRef"]["fieldPath"].as_str(),
        ) {
            (Some(v), _) => v.to_string(),
            (None, Some("metadata.name")) => identity.to_string(),
            (None, Some("metadata.namespace")) => RELEASE_NS.to_string(),
            (None, Some("status.podIP")) => "10.0.0.7".to_string(),
            (None, Some("metadata.uid")) => POD_UID.to_string(),
            _ => panic!("env {name}: neither a value nor a known fieldRef: {e:?}"),
        };
        // extraEnv (e.g. RUST_BACKTRACE) is not an operator flag.
        if let Some(flag) = flags.get(name) {
            args.push(format!("--{flag}={value}"));
        }
    }
    let cfg = Config::try_parse_from(&args)
        .unwrap_or_else(|e| panic!("the operator refuses the chart's environment {args:?}: {e}"));
    cfg.validate()
        .unwrap_or_else(|e| panic!("the operator refuses the chart's settings {args:?}: {e}"));
    cfg
}

/// The pod-level checks that hold whatever the values: identity from the
/// downward API, hardening, health probes, shutdown budget.
fn check_pod(dep: &Value, cfg: &Config) {
    let pod = &dep["spec"]["template"]["spec"];
    let c = container(dep);
    let names = env_names(c);
    let unique: HashSet<&String> = names.iter().collect();
    assert_eq!(unique.len(), names.len(), "an env var set twice: {names:?}");
    for (var, path) in [
        ("POD_NAME", "metadata.name"),
        ("POD_NAMESPACE", "metadata.namespace"),
    ] {
        let e = env_entries(c)
            .into_iter()
            .find(|e| e["name"].as_str() == Some(var))
            .unwrap_or_else(|| panic!("{var} not set"));
        assert_eq!(
            e["valueFrom"]["fieldRef"]["fieldPath"].as_str(),
            Some(path),
            "{var} comes from the downward API"
        );
    }
    let psc = &pod["securityContext"];
    assert_eq!(
        psc["runAsNonRoot"].as_bool(),
        Some(true),
        "pod runAsNonRoot"
    );
    assert_eq!(
        psc["seccompProfile"]["type"].as_str(),
        Some("RuntimeDefault")
    );
    let sc = &c["securityContext"];
    assert_eq!(sc["runAsNonRoot"].as_bool(), Some(true), "runAsNonRoot");
    assert_eq!(
        sc["readOnlyRootFilesystem"].as_bool(),
        Some(true),
        "readOnlyRootFilesystem"
    );
    assert_eq!(sc["allowPrivilegeEscalation"].as_bool(), Some(false));
    assert!(
        sc["capabilities"]["drop"]
            .as_sequence()
            .is_some_and(|d| d.iter().any(|x| x.as_str() == Some("ALL"))),
        "capabilities drop ALL: {sc:?}"
    );
    assert_eq!(
        sc["seccompProfile"]["type"].as_str(),
        Some("RuntimeDefault")
    );
    let port = cfg.listen.port() as u64;
    let ports = c["ports"].as_sequence().expect("ports");
    assert!(
        ports
            .iter()
            .any(|p| p["name"].as_str() == Some("metrics")
                && p["containerPort"].as_u64() == Some(port)),
        "container port metrics = {port}: {ports:?}"
    );
    for (probe, path) in [("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")] {
        let g = &c[probe]["httpGet"];
        assert_eq!(g["path"].as_str(), Some(path), "{probe}");
        assert_eq!(g["port"].as_str(), Some("metrics"), "{probe}");
    }
    let grace = pod["terminationGracePeriodSeconds"]
        .as_u64()
        .expect("terminationGracePeriodSeconds");
    assert!(
        Duration::from_secs(grace) > cfg.shutdown_timeout,
        "terminationGracePeriodSeconds {grace} must exceed the shutdown timeout {:?}",
        cfg.shutdown_timeout
    );
    let mounts = c["volumeMounts"].as_sequence().expect("volumeMounts");
    assert!(
        mounts
            .iter()
            .any(|m| m["mountPath"].as_str() == Some("/tmp")),
        "a writable /tmp with the read-only root filesystem"
    );
}

/// (apiGroup, resource, verb) granted by a rendered Role or ClusterRole.
fn grants(role: &Value) -> BTreeSet<(String, String, String)> {
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

fn grant_set(v: &[(&str, &str, &[&str])]) -> BTreeSet<(String, String, String)> {
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
fn operator_cluster_grants() -> BTreeSet<(String, String, String)> {
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
fn operator_discovery_grants() -> BTreeSet<(String, String, String)> {
    grant_set(&[
        ("", "services", &["list", "watch"]),
        ("discovery.k8s.io", "endpointslices", &["list", "watch"]),
    ])
}

/// Lease permissions (release namespace) the operator uses.
fn operator_lease_grants() -> BTreeSet<(String, String, String)> {
    grant_set(&[(
        "coordination.k8s.io",
        "leases",
        &["get", "list", "watch", "create", "update", "delete"],
    )])
}

// ---------------------------------------------------- tests without a cluster

#[test]
fn chart_copies_are_identical_to_their_sources() {
    let chart = repo().join(CHART);
    let mut pairs = vec![
        (
            repo().join("crds/webcheckers.test.network.io.yaml"),
            chart.join("crds/webcheckers.test.network.io.yaml"),
        ),
        (
            repo().join("alerts/webchecker.rules.yaml"),
            chart.join("files/alerts.yaml"),
        ),
    ];
    let json_files = |dir: &Path| -> BTreeSet<String> {
        std::fs::read_dir(dir)
            .map(|rd| {
                rd.map(|e| e.unwrap().file_name().to_string_lossy().to_string())
                    .filter(|n| n.ends_with(".json"))
                    .collect()
            })
            .unwrap_or_default()
    };
    let sources = json_files(&repo().join("dashboards"));
    assert!(!sources.is_empty(), "no dashboards/*.json");
    let copies = json_files(&chart.join("files/dashboards"));
    let mut problems = Vec::new();
    for extra in copies.difference(&sources) {
        problems.push(format!(
            "{CHART}/files/dashboards/{extra} has no source in dashboards/"
        ));
    }
    for n in &sources {
        pairs.push((
            repo().join("dashboards").join(n),
            chart.join("files/dashboards").join(n),
        ));
    }
    for (src, copy) in &pairs {
        let a = std::fs::read(src).unwrap_or_else(|e| panic!("read {}: {e}", src.display()));
        match std::fs::read(copy) {
            Ok(b) if a == b => {}
            Ok(_) => problems.push(format!(
                "{} differs from {}",
                copy.strip_prefix(repo()).unwrap().display(),
                src.strip_prefix(repo()).unwrap().display()
            )),
            Err(e) => problems.push(format!(
                "{} is missing ({e})",
                copy.strip_prefix(repo()).unwrap().display()
            )),
        }
    }
    assert!(
        problems.is_empty(),
        "the Helm chart's copies are out of date; run `make chart-sync` and commit the result:\n  {}",
        problems.join("\n  ")
    );
}

#[test]
fn helm_lint_strict_is_clean() {
    for values in [None, Some(ALL_ON)] {
        let mut args = vec!["lint", "--strict", CHART];
        if let Some(v) = values {
            args.extend(["-f", v]);
        }
        let out = ok(helm(&args), &format!("helm lint --strict {values:?}"));
        assert!(
            !out.contains("[WARNING]") && !out.contains("[ERROR]"),
            "helm lint --strict {values:?}:\n{out}"
        );
        assert!(out.contains("0 chart(s) failed"), "{out}");
    }
}

#[test]
fn default_values_render_a_hardened_three_replica_deployment() {
    let docs = render(&[]);
    let dep = one(&docs, "Deployment");
    assert_eq!(dep["metadata"]["name"].as_str(), Some(FULLNAME));
    assert_eq!(dep["metadata"]["namespace"].as_str(), Some(RELEASE_NS));
    assert_eq!(dep["spec"]["replicas"].as_u64(), Some(3), "replicaCount 3");
    let identity = format!("{FULLNAME}-5c9f7d8b6-x2b7k");
    let cfg = rendered_config(dep, &identity);
    check_pod(dep, &cfg);

    // Every documented WEBCHECKER_* variable, except the two that are only set
    // when their value is not empty.
    let names: BTreeSet<String> = env_names(container(dep)).into_iter().collect();
    let optional = ["WEBCHECKER_WATCH_NAMESPACE", "WEBCHECKER_ALLOW_CIDRS"];
    for var in documented_env().keys() {
        if optional.contains(&var.as_str()) {
            assert!(!names.contains(var), "{var} set although empty");
        } else {
            assert!(names.contains(var), "{var} not set: {names:?}");
        }
    }
    assert_eq!(cfg.identity(), identity);
    assert_eq!(cfg.namespace, RELEASE_NS);
    assert_eq!(cfg.watch_namespace, None, "all namespaces by default");
    assert_eq!(cfg.listen.port(), 8080);
    assert_eq!(cfg.workers, 256);
    assert_eq!(cfg.lease_duration, Duration::from_secs(10));
    assert_eq!(cfg.renew_deadline, Duration::from_secs(7));
    assert_eq!(cfg.retry_period, Duration::from_secs(2));
    assert_eq!(cfg.shutdown_timeout, Duration::from_secs(20));
    assert!(cfg.replica_header && cfg.per_checker_histogram);
    assert!(
        cfg.deny_cidrs.0.is_empty(),
        "link-local, loopback... are denied without a flag"
    );
    assert!(cfg.allow_cidrs.0.is_empty());
    assert!(!cfg.allow_loopback && cfg.check_proxied_targets);
    assert_eq!(
        cfg.restricted_namespaces,
        webchecker::config::RESTRICTED_NAMESPACES
    );
    assert_eq!(cfg.private_cidrs.0.len(), 5);
    assert_eq!(
        cfg.resolv_conf,
        Path::new("/etc/resolv.conf"),
        "the pod's own"
    );
    assert_eq!(cfg.hosts_file, Path::new("/etc/hosts"));
    assert_eq!(
        dep["spec"]["template"]["spec"]["terminationGracePeriodSeconds"].as_u64(),
        Some(30)
    );

    // The pods run as the chart's ServiceAccount; the bindings name it.
    let sa = one(&docs, "ServiceAccount");
    assert_eq!(sa["metadata"]["name"].as_str(), Some(FULLNAME));
    assert_eq!(
        dep["spec"]["template"]["spec"]["serviceAccountName"].as_str(),
        Some(FULLNAME)
    );
    for b in [
        one(&docs, "ClusterRoleBinding"),
        one_in(&docs, "RoleBinding", RELEASE_NS),
        one_in(&docs, "RoleBinding", "default"),
    ] {
        let kind = b["kind"].as_str().unwrap();
        let s = &b["subjects"][0];
        assert_eq!(s["kind"].as_str(), Some("ServiceAccount"), "{kind}");
        assert_eq!(s["name"].as_str(), Some(FULLNAME), "{kind}");
        assert_eq!(s["namespace"].as_str(), Some(RELEASE_NS), "{kind}");
    }
    let svc = one(&docs, "Service");
    assert_eq!(
        svc["spec"]["ports"][0]["targetPort"].as_str(),
        Some("metrics")
    );
    assert_eq!(
        svc["spec"]["selector"],
        dep["spec"]["selector"]["matchLabels"]
    );
    assert_eq!(
        one(&docs, "PodDisruptionBudget")["spec"]["maxUnavailable"].as_u64(),
        Some(1)
    );
    let k = kinds(&docs);
    for off in ["ServiceMonitor", "PrometheusRule", "ConfigMap"] {
        assert!(!k.contains(off), "{off} rendered by default: {k:?}");
    }
}

#[test]
fn all_on_values_render_monitoring_and_every_option() {
    let docs = render(&["-f", ALL_ON]);
    let dep = one(&docs, "Deployment");
    assert_eq!(dep["spec"]["replicas"].as_u64(), Some(3));
    let identity = format!("{FULLNAME}-6d8b9c7f4-q9m4t");
    let cfg = rendered_config(dep, &identity);
    check_pod(dep, &cfg);
    let names: BTreeSet<String> = env_names(container(dep)).into_iter().collect();
    for var in documented_env().keys() {
        assert!(names.contains(var), "{var} not set: {names:?}");
    }
    assert!(names.contains("RUST_BACKTRACE"), "extraEnv");
    assert_eq!(cfg.watch_namespace.as_deref(), Some("probes"));
    assert_eq!(cfg.listen.port(), 9090);
    assert_eq!(cfg.workers, 512);
    assert_eq!(cfg.heartbeat, Duration::from_secs(120));
    assert_eq!(cfg.lease_duration, Duration::from_secs(15));
    assert_eq!(cfg.renew_deadline, Duration::from_secs(10));
    assert_eq!(cfg.retry_period, Duration::from_millis(2500));
    assert_eq!(cfg.shutdown_timeout, Duration::from_secs(25));
    assert!(!cfg.replica_header && !cfg.per_checker_histogram);
    assert_eq!(cfg.deny_cidrs.0.len(), 3);
    assert_eq!(cfg.allow_cidrs.0.len(), 3);
    assert!(cfg.allow_loopback && !cfg.check_proxied_targets);
    assert_eq!(cfg.restricted_namespaces, "tenancy in (external,partner)");
    assert_eq!(cfg.private_cidrs.0.len(), 2);
    assert_eq!(cfg.max_body_bytes, 1048576);
    assert_eq!(
        cfg.metric_labels_allowlist.0,
        [
            ("team".to_string(), "label_team".to_string()),
            (
                "app.kubernetes.io/part-of".to_string(),
                "label_app_kubernetes_io_part_of".to_string()
            )
        ]
    );
    assert_eq!(cfg.resolv_conf, Path::new("/etc/webchecker/resolv.conf"));
    assert_eq!(cfg.hosts_file, Path::new("/etc/webchecker/hosts"));
    assert_eq!(cfg.log_format, "json");
    assert_eq!(
        container(dep)["image"].as_str(),
        Some(
            "registry.example.com:5000/team/webchecker-operator@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
        )
    );
    assert_eq!(
        dep["spec"]["template"]["spec"]["serviceAccountName"].as_str(),
        Some("webchecker")
    );

    let selector = &dep["spec"]["selector"]["matchLabels"];
    let sm = one(&docs, "ServiceMonitor");
    assert_eq!(sm["apiVersion"].as_str(), Some("monitoring.coreos.com/v1"));
    assert_eq!(sm["metadata"]["namespace"].as_str(), Some("monitoring"));
    assert_eq!(
        sm["metadata"]["labels"]["release"].as_str(),
        Some("kube-prometheus-stack")
    );
    assert_eq!(&sm["spec"]["selector"]["matchLabels"], selector);
    assert_eq!(
        sm["spec"]["namespaceSelector"]["matchNames"][0].as_str(),
        Some(RELEASE_NS)
    );
    let ep = &sm["spec"]["endpoints"][0];
    assert_eq!(ep["port"].as_str(), Some("metrics"));
    assert_eq!(ep["path"].as_str(), Some("/metrics"));
    assert_eq!(ep["honorLabels"].as_bool(), Some(true));
    assert_eq!(ep["interval"].as_str(), Some("15s"));

    // The PrometheusRule carries the real alert groups.
    let rule = one(&docs, "PrometheusRule");
    assert_eq!(
        rule["apiVersion"].as_str(),
        Some("monitoring.coreos.com/v1")
    );
    assert_eq!(rule["metadata"]["namespace"].as_str(), Some("monitoring"));
    let source: Value = serde_yaml::from_str(
        &std::fs::read_to_string(repo().join("alerts/webchecker.rules.yaml")).unwrap(),
    )
    .unwrap();
    let groups = rule["spec"]["groups"].as_sequence().expect("groups");
    assert!(!groups.is_empty(), "PrometheusRule without alert groups");
    assert_eq!(
        &rule["spec"]["groups"], &source["groups"],
        "the PrometheusRule's groups are those of alerts/webchecker.rules.yaml"
    );
    let alerts: Vec<&str> = groups
        .iter()
        .flat_map(|g| g["rules"].as_sequence().unwrap().iter())
        .filter_map(|r| r["alert"].as_str())
        .collect();
    assert!(
        alerts.contains(&"WebCheckerDown") && alerts.contains(&"WebCheckerNoLeader"),
        "{alerts:?}"
    );

    // The dashboards ConfigMap: one key per dashboards/*.json, same content.
    let cms = of_kind(&docs, "ConfigMap");
    let cm = cms
        .iter()
        .find(|c| c["metadata"]["name"].as_str() == Some("wc-webchecker-operator-dashboards"))
        .expect("dashboards ConfigMap");
    assert_eq!(cm["metadata"]["namespace"].as_str(), Some("monitoring"));
    assert_eq!(
        cm["metadata"]["labels"]["grafana_dashboard"].as_str(),
        Some("1")
    );
    assert_eq!(
        cm["metadata"]["annotations"]["grafana_folder"].as_str(),
        Some("WebChecker")
    );
    let data = cm["data"].as_mapping().expect("data");
    let mut want = BTreeMap::new();
    for e in std::fs::read_dir(repo().join("dashboards")).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "json") {
            want.insert(
                p.file_name().unwrap().to_string_lossy().to_string(),
                std::fs::read_to_string(&p).unwrap(),
            );
        }
    }
    let got: BTreeMap<String, String> = data
        .iter()
        .map(|(k, v)| {
            (
                k.as_str().unwrap().to_string(),
                v.as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        got.keys().collect::<Vec<_>>(),
        want.keys().collect::<Vec<_>>()
    );
    for (k, v) in &got {
        assert_eq!(v, &want[k], "dashboard {k} differs from dashboards/{k}");
        let d: serde_json::Value = serde_json::from_str(v).unwrap();
        assert!(d["panels"].as_array().is_some_and(|p| !p.is_empty()), "{k}");
    }

    // readSecrets/readConfigMaps add exactly their one permission each, in
    // the watched namespace only: not in the ClusterRole.
    assert_eq!(
        grants(operator_clusterrole(&docs)),
        operator_cluster_grants()
    );
    let (role, binding) = references_role(&docs, "probes");
    assert_eq!(
        grants(role),
        grant_set(&[("", "secrets", &["get"]), ("", "configmaps", &["get"])])
    );
    let s = &binding["subjects"][0];
    assert_eq!(s["name"].as_str(), Some("webchecker"));
    assert_eq!(s["namespace"].as_str(), Some(RELEASE_NS));
    assert!(of_kind(&docs, "PodDisruptionBudget").len() == 1);
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
fn references_role<'a>(docs: &'a [Value], namespace: &str) -> (&'a Value, &'a Value) {
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

/// The most distinct Secrets and ConfigMaps a WebChecker can name, from the
/// CRD: every header, and the other reference fields.
fn most_references_of_the_crd() -> usize {
    let crd: Value = serde_yaml::from_str(
        &std::fs::read_to_string(repo().join("crds/webcheckers.test.network.io.yaml")).unwrap(),
    )
    .unwrap();
    let spec = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"];
    let headers = spec["headers"]["maxItems"]
        .as_u64()
        .expect("headers maxItems") as usize;
    // auth (basic or bearer), tls.caBundle (Secret or ConfigMap),
    // tls.clientCertificate: one object each at most.
    for (path, field) in [
        ("auth", "basic"),
        ("auth", "bearer"),
        ("tls", "caBundle"),
        ("tls", "clientCertificate"),
    ] {
        assert!(
            spec[path]["properties"][field].is_mapping(),
            "spec.{path}.{field} in the CRD"
        );
    }
    headers + 3
}

#[test]
fn admission_policy_is_on_by_default_and_checks_every_reference() {
    let docs = render(&[]);
    let policy = one(&docs, "ValidatingAdmissionPolicy");
    let binding = one(&docs, "ValidatingAdmissionPolicyBinding");
    let name = format!("{FULLNAME}-references");
    assert_eq!(
        policy["apiVersion"].as_str(),
        Some("admissionregistration.k8s.io/v1")
    );
    assert_eq!(policy["metadata"]["name"].as_str(), Some(name.as_str()));
    assert_eq!(binding["spec"]["policyName"].as_str(), Some(name.as_str()));
    assert_eq!(
        binding["spec"]["validationActions"],
        serde_yaml::from_str::<Value>("[Deny]").unwrap()
    );
    let spec = &policy["spec"];
    assert_eq!(spec["failurePolicy"].as_str(), Some("Fail"));
    let rules = spec["matchConstraints"]["resourceRules"]
        .as_sequence()
        .unwrap();
    assert_eq!(rules.len(), 1);
    // Not the status subresource: the operator's status writes pass untouched.
    assert_eq!(
        rules[0]["resources"],
        serde_yaml::from_str::<Value>("[webcheckers]").unwrap()
    );
    assert_eq!(
        rules[0]["operations"],
        serde_yaml::from_str::<Value>("[CREATE, UPDATE]").unwrap()
    );
    assert_eq!(rules[0]["apiGroups"][0].as_str(), Some("test.network.io"));
    // Every field of src/probe/plan/values.rs references() is read.
    let text = serde_yaml::to_string(spec).unwrap();
    for field in [
        "object.spec.auth.basic.secretName",
        "object.spec.auth.bearer.secretKeyRef.name",
        "object.spec.tls.caBundle.secretKeyRef.name",
        "object.spec.tls.caBundle.configMapKeyRef.name",
        "object.spec.tls.clientCertificate.secretName",
        "h.valueFrom.secretKeyRef.name",
    ] {
        assert!(text.contains(field), "{field} not read by the policy");
    }
    // One validation per distinct object the CRD allows, each calling the
    // authorizer, and the guard before them.
    let checks = spec["validations"]
        .as_sequence()
        .unwrap()
        .iter()
        .filter(|v| {
            v["expression"]
                .as_str()
                .is_some_and(|e| e.contains("authorizer"))
        })
        .count();
    let most = most_references_of_the_crd();
    assert_eq!(checks, most, "validations with an authorizer check");
    assert!(
        text.contains(&format!("size(variables.targets) <= {most}")),
        "the guard refuses more than {most} objects"
    );
    // Off on request, with nothing else changed.
    let off = render(&["--set", "admissionPolicy.enabled=false"]);
    let k = kinds(&off);
    for kind in [
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    ] {
        assert!(
            !k.contains(kind),
            "{kind} rendered with admissionPolicy.enabled=false"
        );
    }
    assert_eq!(off.len() + 2, docs.len());
}

#[test]
fn invalid_values_fail_with_their_documented_message() {
    let mut files: Vec<PathBuf> = std::fs::read_dir(repo().join(INVALID_DIR))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    assert!(files.len() >= 10, "too few files in {INVALID_DIR}");
    let mut problems = Vec::new();
    for f in &files {
        let rel = f
            .strip_prefix(repo())
            .unwrap()
            .to_str()
            .unwrap()
            .to_string();
        let first = std::fs::read_to_string(f)
            .unwrap()
            .lines()
            .next()
            .unwrap_or_default()
            .to_string();
        let want = first
            .split_once("helm prints: ")
            .map(|(_, m)| m.trim().to_string())
            .unwrap_or_else(|| panic!("{rel}: first line must be `# ... helm prints: <message>`"));
        let out = helm(&["template", RELEASE, CHART, "-n", RELEASE_NS, "-f", &rel]);
        let stderr = text(&out.stderr);
        if out.status.success() {
            problems.push(format!("{rel}: helm template succeeded"));
        } else if !stderr.contains(&want) {
            problems.push(format!("{rel}: expected {want:?}, helm printed:\n{stderr}"));
        }
    }
    println!("{} invalid values files checked", files.len());
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

// ---------------------------------------------------------- with a cluster

async fn helm_release(cluster: &Cluster) -> Vec<serde_json::Value> {
    let out = ok(
        cluster_helm(cluster, &["list", "-n", RELEASE_NS, "-o", "json"]).await,
        "helm list",
    );
    serde_json::from_str::<Vec<serde_json::Value>>(&out).unwrap()
}

fn revision(r: &serde_json::Value) -> String {
    r["revision"].to_string().trim_matches('"').to_string()
}

/// name -> value (or fieldRef path) of the operator container's env.
fn live_env(dep: &serde_json::Value) -> BTreeMap<String, String> {
    dep["spec"]["template"]["spec"]["containers"][0]["env"]
        .as_array()
        .expect("env")
        .iter()
        .map(|e| {
            let v = e["value"]
                .as_str()
                .or(e["valueFrom"]["fieldRef"]["fieldPath"].as_str())
                .unwrap_or_default();
            (e["name"].as_str().unwrap().to_string(), v.to_string())
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
    let t = Instant::now();
    ok(
        cluster_helm(
            cluster,
            &[
                "install",
                RELEASE,
                CHART,
                "-n",
                RELEASE_NS,
                "--create-namespace",
            ],
        )
        .await,
        "helm install",
    );
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
    for (k, v) in &env {
        if !k.starts_with("WEBCHECKER_LEASE")
            && !k.starts_with("WEBCHECKER_RENEW")
            && !k.starts_with("WEBCHECKER_RETRY")
        {
            assert_eq!(&env2[k], v, "{k} changed by the upgrade");
        }
    }

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

/// One replica as a pod of the Deployment would run it: the container's
/// environment (downward API filled in like the kubelet would), the
/// ServiceAccount's token, nothing else.
struct Replica {
    identity: String,
    port: u16,
    child: Mutex<Option<Child>>,
    log: PathBuf,
}

impl Replica {
    fn spawn(
        cluster: &Cluster,
        kubeconfig: &Path,
        env: &BTreeMap<String, String>,
        identity: &str,
        extra: &[&str],
    ) -> Replica {
        let port = free_port();
        let log = cluster.dir.join(format!("operator-{identity}.log"));
        let f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .unwrap();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_webchecker-operator"));
        cmd.env_clear().env("KUBECONFIG", kubeconfig);
        let dns = support::dns::Dns::shared();
        for (k, v) in env {
            let v = match (k.as_str(), v.as_str()) {
                (_, "metadata.name") => identity.to_string(),
                (_, "metadata.namespace") => RELEASE_NS.to_string(),
                // Peers look at the listen address below.
                (_, "status.podIP") => "127.0.0.1".to_string(),
                // No garbage collector runs here: an owner that never existed is harmless.
                (_, "metadata.uid") => POD_UID.to_string(),
                // The pod binds 0.0.0.0:<port>; here every replica needs a port of its own.
                ("WEBCHECKER_LISTEN", _) => format!("127.0.0.1:{port}"),
                // The pod's resolver files are the test kit's (tests/support/dns.rs).
                ("WEBCHECKER_RESOLV_CONF", _) => dns.resolv_conf().display().to_string(),
                ("WEBCHECKER_HOSTS_FILE", _) => dns.hosts_file().display().to_string(),
                _ => v.clone(),
            };
            cmd.env(k, v);
        }
        let child = cmd
            .args(extra)
            .stdout(f.try_clone().unwrap())
            .stderr(f)
            .spawn()
            .expect("start the operator");
        Replica {
            identity: identity.to_string(),
            port,
            child: Mutex::new(Some(child)),
            log,
        }
    }

    fn exited(&self) -> Option<std::process::ExitStatus> {
        self.child
            .lock()
            .unwrap()
            .as_mut()
            .and_then(|c| c.try_wait().unwrap())
    }

    fn alive(&self) -> bool {
        self.child.lock().unwrap().is_some()
    }

    fn kill(&self) {
        if let Some(mut c) = self.child.lock().unwrap().take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    async fn metrics(&self) -> Option<String> {
        http_get(&format!("127.0.0.1:{}", self.port), "/metrics")
            .await
            .map(|(_, b)| b)
    }

    async fn wait_ready(&self, timeout: Duration) {
        eventually(timeout, &format!("{} ready", self.identity), || async {
            if let Some(st) = self.exited() {
                panic!(
                    "{} exited ({st}) instead of becoming ready:\n{}",
                    self.identity,
                    self.log_text()
                );
            }
            match http_get(&format!("127.0.0.1:{}", self.port), "/readyz").await {
                Some((200, _)) => Some(()),
                _ => None,
            }
        })
        .await
    }

    /// Waits for the process to exit; returns its status and how long it ran.
    async fn wait_exit(
        &self,
        timeout: Duration,
        started: Instant,
    ) -> (std::process::ExitStatus, Duration) {
        let st = eventually(timeout, &format!("{} exits", self.identity), || async {
            self.exited()
        })
        .await;
        (st, started.elapsed())
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A kubeconfig of the cluster whose only user is a token.
fn token_kubeconfig(cluster: &Cluster, user: &str, token: &str) -> PathBuf {
    let mut kc: Value =
        serde_yaml::from_str(&std::fs::read_to_string(&cluster.kubeconfig).unwrap()).unwrap();
    let users: Value =
        serde_yaml::from_str(&format!("- name: {user}\n  user:\n    token: {token}\n")).unwrap();
    kc["users"] = users;
    for ctx in kc["contexts"].as_sequence_mut().expect("contexts") {
        ctx["context"]["user"] = Value::String(user.to_string());
    }
    let path = cluster.dir.join(format!("kubeconfig-{user}"));
    std::fs::write(&path, serde_yaml::to_string(&kc).unwrap()).unwrap();
    path
}

/// `kubectl auth can-i` with the given kubeconfig.
async fn can_i(cluster: &Cluster, kubeconfig: &Path, args: &[&str]) -> bool {
    let mut a = vec!["auth", "can-i"];
    a.extend_from_slice(args);
    let out = run(kubectl_cmd(cluster, kubeconfig, &a)).await;
    text(&out.stdout).trim() == "yes"
}

/// Edits the chart's ClusterRole as an administrator would (get, change, replace).
async fn edit_clusterrole(cluster: &Cluster, f: impl FnOnce(&mut Vec<serde_json::Value>)) {
    let mut cr = kubectl_json(cluster, &["get", "clusterrole", FULLNAME]).await;
    f(cr["rules"].as_array_mut().expect("rules"));
    let body = cr.to_string();
    let out = cluster.kubectl_stdin(&["replace", "-f", "-"], &body);
    ok(out, "kubectl replace clusterrole");
}

fn failover_gap(hits: &[Hit], of: &[String], at: Instant, victim: &str) -> (Duration, String) {
    let mut worst = (Duration::ZERO, String::new());
    for c in of {
        let mut mine: Vec<&Hit> = hits.iter().filter(|h| &h.checker == c).collect();
        mine.sort_by_key(|h| h.start);
        let before = mine
            .iter()
            .rev()
            .find(|h| h.start <= at)
            .map(|h| h.start)
            .unwrap_or(at);
        let gap = match mine.iter().find(|h| h.start > at && h.replica != victim) {
            Some(h) => h.start - before,
            None => Duration::MAX,
        };
        if gap > worst.0 {
            worst = (gap, c.clone());
        }
    }
    worst
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_service_account_of_the_chart_is_enough_and_each_permission_is_needed() {
    // A control plane of its own: without --watch-namespace the replicas see
    // every WebChecker of the cluster, and no other test's may interfere.
    let cluster: &'static Cluster = Box::leak(Box::new(Cluster::start("chart-rbac")));
    let t0 = Instant::now();
    // Let helm install the CRD from the chart's crds/.
    ok(
        kubectl(
            cluster,
            &["delete", "crd", CRD, "--wait=true", "--timeout=60s"],
        )
        .await,
        "kubectl delete crd",
    );
    ok(
        cluster_helm(
            cluster,
            &[
                "install",
                RELEASE,
                CHART,
                "-n",
                RELEASE_NS,
                "--create-namespace",
                "--set",
                "rbac.readSecrets=false",
                // The test's targets listen on loopback.
                "--set",
                "operator.allowLoopback=true",
            ],
        )
        .await,
        "helm install",
    );
    ok(
        kubectl(
            cluster,
            &[
                "wait",
                "--for=condition=Established",
                "--timeout=60s",
                &format!("crd/{CRD}"),
            ],
        )
        .await,
        "the chart's CRD established",
    );
    println!("helm install (with the CRD): {:?}", t0.elapsed());

    // A token of the chart's ServiceAccount (TokenRequest API), as a pod gets one.
    let token = ok(
        kubectl(
            cluster,
            &[
                "create",
                "token",
                FULLNAME,
                "-n",
                RELEASE_NS,
                "--duration=1h",
            ],
        )
        .await,
        "kubectl create token",
    );
    let sa_kc = token_kubeconfig(cluster, FULLNAME, token.trim());
    let who = ok(
        run(kubectl_cmd(
            cluster,
            &sa_kc,
            &[
                "auth",
                "whoami",
                "-o",
                "jsonpath={.status.userInfo.username}",
            ],
        ))
        .await,
        "kubectl auth whoami",
    );
    assert_eq!(
        who.trim(),
        format!("system:serviceaccount:{RELEASE_NS}:{FULLNAME}")
    );
    // A few things the ServiceAccount must not do.
    for denied in [
        &["get", "secrets", "-A"][..],
        &["update", "webcheckers.test.network.io", "-A"],
        &["delete", "webcheckers.test.network.io", "-A"],
        &["create", "webcheckers.test.network.io", "-A"],
        &["create", "leases.coordination.k8s.io", "-n", "default"],
        &["list", "pods", "-A"],
        &["create", "events", "-A"],
        &["list", "services", "-n", "default"],
        &["get", "services", "-n", "default"],
        &["list", "endpointslices.discovery.k8s.io", "-A"],
    ] {
        assert!(
            !can_i(cluster, &sa_kc, denied).await,
            "the ServiceAccount may {denied:?}"
        );
    }

    // Three replicas with the Deployment's environment and the token.
    let dep = kubectl_json(cluster, &["get", "deployment", FULLNAME, "-n", RELEASE_NS]).await;
    let env = live_env(&dep);
    assert!(!env.contains_key("WEBCHECKER_WATCH_NAMESPACE"));
    let ids: Vec<String> = ["x2b7k", "q9m4t", "h6v8p"]
        .iter()
        .map(|s| format!("{FULLNAME}-5c9f7d8b6-{s}"))
        .collect();
    let witness = Witness::start().await;
    let mut ops: Vec<Replica> = ids
        .iter()
        .map(|id| Replica::spawn(cluster, &sa_kc, &env, id, FAST_LEASES))
        .collect();
    for o in &ops {
        o.wait_ready(Duration::from_secs(60)).await;
    }
    println!("3 replicas ready: {:?}", t0.elapsed());
    // The chart's permissions are enough for every source of the forgery guard.
    for o in &ops {
        let m = o.metrics().await.expect("metrics");
        for source in ["service", "endpointslices", "nodes", "namespaces"] {
            assert_eq!(
                metric(&m, "webchecker_address_discovery_up", &[("source", source)]),
                Some(1.0),
                "{}: {source}",
                o.identity
            );
        }
    }

    // 60 checkers in a namespace of their own.
    let probes_ns = cluster.namespace("probes");
    let client = cluster.client().await;
    let names: Vec<String> = (0..60).map(|i| format!("c{i}")).collect();
    let created = Instant::now();
    create_checkers(&client, &probes_ns, &witness.url(), &names, INTERVAL).await;
    let api: Api<WebChecker> = Api::namespaced(client.clone(), &probes_ns);
    let owners = |live: Vec<String>| {
        let api = api.clone();
        let n = names.len();
        async move {
            let list = api.list(&ListParams::default()).await.ok()?;
            let m: HashMap<String, String> = list
                .items
                .iter()
                .filter_map(|o| Some((o.name_any(), o.labels().get(OWNER_LABEL)?.clone())))
                .collect();
            (m.len() == n && m.values().all(|o| live.contains(o))).then_some(m)
        }
    };
    let assigned = eventually(
        Duration::from_secs(60),
        "every checker assigned to a replica",
        || owners(ids.clone()),
    )
    .await;
    println!("60 checkers assigned: {:?}", created.elapsed());

    // Ready=True, status written by the owner.
    eventually(
        Duration::from_secs(60),
        "every checker Ready=True with its status written by its owner",
        || async {
            let list = api.list(&ListParams::default()).await.ok()?;
            let all = list.items.len() == names.len()
                && list.items.iter().all(|o| {
                    let owner = o.labels().get(OWNER_LABEL);
                    o.status.as_ref().is_some_and(|s| {
                        s.conditions
                            .iter()
                            .any(|c| c.type_ == "Ready" && c.status == "True")
                            && s.last_status_code == Some(200)
                            && s.last_probe_time.is_some()
                            && s.owner.as_ref() == owner
                    })
                });
            all.then_some(())
        },
    )
    .await;
    println!("60 checkers Ready=True: {:?}", created.elapsed());

    // Events, reported by the replicas.
    let events: Api<K8sEvent> = Api::namespaced(client.clone(), &probes_ns);
    eventually(
        Duration::from_secs(30),
        "an Event about every checker",
        || async {
            let list = events.list(&ListParams::default()).await.ok()?;
            let mut about = HashSet::new();
            for e in &list.items {
                let r = e.regarding.as_ref()?;
                if r.kind.as_deref() != Some("WebChecker")
                    || e.reporting_controller.as_deref() != Some("webchecker-operator")
                {
                    continue;
                }
                let by = e.reporting_instance.clone().unwrap_or_default();
                assert!(ids.contains(&by), "event reported by {by:?}");
                about.insert(r.name.clone().unwrap_or_default());
            }
            names.iter().all(|n| about.contains(n)).then_some(())
        },
    )
    .await;

    // Each checker probed by its owner only (two more intervals, owners stable).
    let owners_now = eventually(Duration::from_secs(30), "owners", || owners(ids.clone())).await;
    let since = Instant::now();
    eventually(
        Duration::from_secs(30),
        "every checker probed twice more",
        || async {
            let hits = witness.hits();
            let mut n: HashMap<&str, usize> = HashMap::new();
            for h in hits.iter().filter(|h| h.start >= since) {
                *n.entry(h.checker.as_str()).or_default() += 1;
            }
            names
                .iter()
                .all(|c| n.get(c.as_str()).copied().unwrap_or(0) >= 2)
                .then_some(())
        },
    )
    .await;
    let owners_after = eventually(Duration::from_secs(30), "owners", || owners(ids.clone())).await;
    assert_eq!(owners_now, owners_after, "checkers moved in a steady state");
    for h in witness.hits().iter().filter(|h| h.start >= since) {
        assert_eq!(
            h.replica, owners_now[&h.checker],
            "{} probed by a replica that does not own it",
            h.checker
        );
    }
    assert_eq!(exclusivity_violation(&witness.hits()), None);
    let mut owned = 0.0;
    for o in &ops {
        let m = o.metrics().await.expect("metrics");
        owned += metric(&m, "webchecker_owned_checkers", &[]).unwrap_or(0.0);
    }
    assert_eq!(
        owned, 60.0,
        "webchecker_owned_checkers summed over the replicas"
    );
    let mut shards: BTreeMap<&str, usize> = BTreeMap::new();
    for o in owners_now.values() {
        *shards.entry(o.as_str()).or_default() += 1;
    }
    println!("shards: {shards:?} (first assignment {:?})", assigned.len());

    // SIGKILL a replica that is not the leader.
    let leader = eventually(Duration::from_secs(10), "a leader", || async {
        for o in &ops {
            if let Some(m) = o.metrics().await
                && metric(&m, "webchecker_leader", &[]) == Some(1.0)
            {
                return Some(o.identity.clone());
            }
        }
        None
    })
    .await;
    let victim = ops.iter().position(|o| o.identity != leader).unwrap();
    let victim_id = ops[victim].identity.clone();
    let orphans: Vec<String> = owners_now
        .iter()
        .filter(|(_, o)| **o == victim_id)
        .map(|(c, _)| c.clone())
        .collect();
    assert!(!orphans.is_empty(), "the victim owns nothing: {shards:?}");
    let at = Instant::now();
    ops[victim].kill();
    let bound = LEASE + Duration::from_secs(2) + Duration::from_secs(INTERVAL as u64);
    eventually(
        bound + Duration::from_secs(10),
        "the killed replica's checkers probed again by the others",
        || async {
            (failover_gap(&witness.hits(), &orphans, at, &victim_id).0 != Duration::MAX)
                .then_some(())
        },
    )
    .await;
    let (gap, who) = failover_gap(&witness.hits(), &orphans, at, &victim_id);
    println!(
        "SIGKILL {victim_id}: {} checkers moved, largest gap {gap:?} ({who}), bound {bound:?}",
        orphans.len()
    );
    assert!(gap <= bound, "{who}: gap {gap:?} over {bound:?}");
    let survivors: Vec<String> = ops
        .iter()
        .filter(|o| o.alive())
        .map(|o| o.identity.clone())
        .collect();
    eventually(
        Duration::from_secs(20),
        "every checker owned by a survivor",
        || owners(survivors.clone()),
    )
    .await;
    assert_eq!(exclusivity_violation(&witness.hits()), None);
    for o in &ops {
        o.kill();
    }
    ops.clear();

    // Take `patch webcheckers/status` away: a new replica refuses to start.
    edit_clusterrole(cluster, |rules| {
        for r in rules.iter_mut() {
            if r["resources"]
                .as_array()
                .is_some_and(|x| x.iter().any(|v| v == "webcheckers/status"))
            {
                r["verbs"].as_array_mut().unwrap().retain(|v| v != "patch");
            }
        }
        rules.retain(|r| r["verbs"].as_array().is_some_and(|v| !v.is_empty()));
    })
    .await;
    let status_patch = [
        "patch",
        "webcheckers.test.network.io",
        "--subresource=status",
        "-A",
    ];
    eventually(
        Duration::from_secs(10),
        "the authorizer sees the edited ClusterRole",
        || async { (!can_i(cluster, &sa_kc, &status_patch).await).then_some(()) },
    )
    .await;
    let fresh = format!("{FULLNAME}-5c9f7d8b6-z3n5w");
    let started = Instant::now();
    let op = Replica::spawn(cluster, &sa_kc, &env, &fresh, FAST_LEASES);
    let (st, took) = op.wait_exit(Duration::from_secs(30), started).await;
    let log = op.log_text();
    println!("without patch on webcheckers/status: exit {st} after {took:?}");
    assert!(!st.success(), "the operator must fail:\n{log}");
    assert!(took < Duration::from_secs(15), "exit after {took:?}");
    assert!(
        log.contains(
            "missing permission: patch test.network.io webcheckers/status in all namespaces"
        ),
        "the output must name the missing permission:\n{log}"
    );
    drop(op);

    // Remove the events rule as well: both are named.
    edit_clusterrole(cluster, |rules| {
        rules.retain(|r| {
            !r["apiGroups"]
                .as_array()
                .is_some_and(|g| g.iter().any(|v| v == "events.k8s.io"))
        })
    })
    .await;
    let event_create = ["create", "events.events.k8s.io", "-A"];
    eventually(
        Duration::from_secs(10),
        "the authorizer sees the edited ClusterRole",
        || async { (!can_i(cluster, &sa_kc, &event_create).await).then_some(()) },
    )
    .await;
    let fresh = format!("{FULLNAME}-5c9f7d8b6-k7r2d");
    let started = Instant::now();
    let op = Replica::spawn(cluster, &sa_kc, &env, &fresh, FAST_LEASES);
    let (st, took) = op.wait_exit(Duration::from_secs(30), started).await;
    let log = op.log_text();
    println!("without events too: exit {st} after {took:?}");
    assert!(!st.success(), "the operator must fail:\n{log}");
    assert!(took < Duration::from_secs(15), "exit after {took:?}");
    for want in [
        "patch test.network.io webcheckers/status in all namespaces",
        "create events.k8s.io events in all namespaces",
    ] {
        assert!(log.contains(want), "the output must name {want:?}:\n{log}");
    }
    drop(op);

    // Uninstall: the release goes, the CRD helm installed and the checkers stay.
    ok(
        cluster_helm(cluster, &["uninstall", RELEASE, "-n", RELEASE_NS]).await,
        "helm uninstall",
    );
    assert!(helm_release(cluster).await.is_empty());
    assert_eq!(
        api.list(&ListParams::default()).await.unwrap().items.len(),
        60
    );
    println!("whole test: {:?}", t0.elapsed());
}
