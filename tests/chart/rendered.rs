//! Reading a render of the chart: `helm template` of the README's release,
//! its objects, the operator container and its environment, and the
//! operator's configuration as a replica of the rendered Deployment gets it.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::time::Duration;

use clap::Parser;
use serde::Deserialize;
use webchecker::config::Config;

use super::platform::helm;
pub use super::platform::of_kind;
use super::*;
use support::repo;

/// `helm template` of the README's release, parsed into its YAML documents.
/// The `helm test` hook (templates/tests/) is left out: it is not part of
/// the release's objects (tests/chart_test_hook.rs has it).
pub fn render(extra: &[&str]) -> Vec<Value> {
    let mut args = vec!["--skip-tests"];
    args.extend_from_slice(extra);
    render_with_tests(&args)
}

/// [`render`] with the `helm test` hook.
pub fn render_with_tests(extra: &[&str]) -> Vec<Value> {
    let base = support::release::base_values().to_str().unwrap();
    let mut args = vec!["template", RELEASE, CHART, "-n", RELEASE_NS, "-f", base];
    args.extend_from_slice(extra);
    let (ok, out) = helm(&args);
    assert!(ok, "helm template {extra:?} failed:\n{out}");
    serde_yaml::Deserializer::from_str(&out)
        .map(|d| Value::deserialize(d).expect("helm template prints YAML"))
        .filter(|v| !v.is_null())
        .collect()
}

pub fn one<'a>(docs: &'a [Value], kind: &str) -> &'a Value {
    let v = of_kind(docs, kind);
    assert_eq!(v.len(), 1, "exactly one {kind} rendered");
    v[0]
}

/// The one object of `kind` in `namespace`.
pub fn one_in<'a>(docs: &'a [Value], kind: &str, namespace: &str) -> &'a Value {
    let v: Vec<&Value> = of_kind(docs, kind)
        .into_iter()
        .filter(|d| d["metadata"]["namespace"].as_str() == Some(namespace))
        .collect();
    assert_eq!(v.len(), 1, "exactly one {kind} rendered in {namespace}");
    v[0]
}

/// The operator's own ClusterRole (the chart also renders the aggregated
/// view/edit ClusterRoles for users, tests/self_service_rbac.rs).
pub fn operator_clusterrole(docs: &[Value]) -> &Value {
    let v: Vec<&Value> = of_kind(docs, "ClusterRole")
        .into_iter()
        .filter(|d| d["metadata"]["name"].as_str() == Some(FULLNAME))
        .collect();
    assert_eq!(v.len(), 1, "exactly one ClusterRole {FULLNAME}");
    v[0]
}

pub fn kinds(docs: &[Value]) -> BTreeSet<String> {
    docs.iter()
        .filter_map(|d| d["kind"].as_str().map(str::to_string))
        .collect()
}

/// The pod spec of a Deployment.
pub fn pod_spec(dep: &Value) -> &Value {
    &dep["spec"]["template"]["spec"]
}

pub fn container(dep: &Value) -> &Value {
    let cs = dep["spec"]["template"]["spec"]["containers"]
        .as_sequence()
        .expect("containers");
    assert_eq!(cs.len(), 1, "one container");
    &cs[0]
}

pub fn env_entries(container: &Value) -> Vec<&Value> {
    container["env"]
        .as_sequence()
        .map(|s| s.iter().collect())
        .unwrap_or_default()
}

pub fn env_names(container: &Value) -> Vec<String> {
    env_entries(container)
        .iter()
        .map(|e| e["name"].as_str().unwrap().to_string())
        .collect()
}

/// (env, flag) of the flags table of docs/operator-interface.md, the contract
/// between the binary and the chart.
pub fn documented_env() -> BTreeMap<String, String> {
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

/// Stands in for the downward API's pod UID.
pub const POD_UID: &str = "00000000-0000-4000-8000-000000000001";

/// Stands in for the downward API's node name.
pub const NODE: &str = "node-a";

/// Stands in for the node's allocatable memory, what the downward API gives
/// for limits.memory without a limit.
pub const NODE_MEMORY: u64 = 8 << 30;

/// What the downward API gives for the container's limits.memory: bytes
/// (divisor 1), the node's allocatable memory without a limit.
pub fn memory_limit(c: &Value) -> u64 {
    c["resources"]["limits"]["memory"]
        .as_str()
        .map_or(NODE_MEMORY, quantity_bytes)
}

/// A memory quantity (`256Mi`, `1G`, `1048576`) in bytes.
pub fn quantity_bytes(q: &str) -> u64 {
    let (digits, unit) = q.split_at(q.find(|ch: char| !ch.is_ascii_digit()).unwrap_or(q.len()));
    let n: u64 = digits
        .parse()
        .unwrap_or_else(|_| panic!("memory limit {q:?}"));
    let scale: u64 = match unit {
        "" => 1,
        "Ki" => 1 << 10,
        "Mi" => 1 << 20,
        "Gi" => 1 << 30,
        "k" => 1_000,
        "M" => 1_000_000,
        "G" => 1_000_000_000,
        _ => panic!("memory limit {q:?}: a unit this test does not know"),
    };
    n * scale
}

/// The operator's configuration as a replica of the rendered Deployment gets
/// it: every documented variable of the container becomes its flag, parsed and
/// validated by the operator's own code.
pub fn rendered_config(dep: &Value, identity: &str) -> Config {
    let flags = documented_env();
    let service_account = pod_spec(dep)["serviceAccountName"]
        .as_str()
        .expect("serviceAccountName")
        .to_string();
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
            (None, Some("spec.nodeName")) => NODE.to_string(),
            (None, Some("spec.serviceAccountName")) => service_account.clone(),
            (None, None) if e["valueFrom"]["resourceFieldRef"]["resource"] == "limits.memory" => {
                memory_limit(container(dep)).to_string()
            }
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
pub fn check_pod(dep: &Value, cfg: &Config) {
    let pod = &dep["spec"]["template"]["spec"];
    let c = container(dep);
    let names = env_names(c);
    let unique: HashSet<&String> = names.iter().collect();
    assert_eq!(unique.len(), names.len(), "an env var set twice: {names:?}");
    for (var, path) in [
        ("POD_NAME", "metadata.name"),
        ("POD_NAMESPACE", "metadata.namespace"),
        ("POD_IP", "status.podIP"),
        ("POD_UID", "metadata.uid"),
        // The zone of the replica's Node, and the ServiceAccount whose tokens
        // authenticate asks for a confirmation: the pod's own, whatever the values.
        ("NODE_NAME", "spec.nodeName"),
        ("WEBCHECKER_SERVICE_ACCOUNT", "spec.serviceAccountName"),
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
    assert_eq!(cfg.node_name.as_deref(), Some(NODE));
    // The memory limit the alert compares with: this container's.
    let limit = env_entries(c)
        .into_iter()
        .find(|e| e["name"].as_str() == Some("WEBCHECKER_MEMORY_LIMIT"))
        .expect("WEBCHECKER_MEMORY_LIMIT set");
    let field = &limit["valueFrom"]["resourceFieldRef"];
    assert_eq!(field["resource"].as_str(), Some("limits.memory"));
    assert_eq!(field["containerName"], c["name"]);
    assert_eq!(cfg.memory_limit, Some(memory_limit(c)));
    assert_eq!(
        Some(cfg.service_account.as_str()),
        pod["serviceAccountName"].as_str(),
        "asks are authenticated with the pods' own ServiceAccount"
    );
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
