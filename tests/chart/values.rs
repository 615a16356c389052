//! `helm template` with the default values and with every option on
//! (deploy/helm/ci/all-on-values.yaml): the Deployment as the operator reads
//! it, the ServiceAccount and bindings, and the monitoring objects.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

use super::rbac::{
    grant_set, grants, operator_cluster_grants, operator_lease_grants, references_role,
};
use super::rendered::*;
use super::*;
use clap::Parser;
use support::repo;
use webchecker::config::Config;

/// Documented variables the chart never sets: the advertised address comes
/// from POD_IP and the listen port; the chart's pods always ask with tokens
/// bound to themselves, so it never accepts unbound ones.
const NOT_FROM_THE_CHART: [&str; 2] = [
    "WEBCHECKER_ADVERTISE_ADDRESS",
    "WEBCHECKER_CONFIRM_ALLOW_UNBOUND_TOKENS",
];

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

    every_documented_variable_unless_empty(dep);
    assert_eq!(cfg.identity(), identity);
    assert_eq!(cfg.namespace, RELEASE_NS);
    assert_eq!(cfg.watch_namespace, None, "all namespaces by default");
    assert_eq!(cfg.listen.port(), 8080);
    assert_eq!(cfg.confirm_listen.port(), 8081);
    assert!(!cfg.confirm_allow_unbound_tokens);
    assert!(
        cfg.deny_cidrs.0.is_empty(),
        "link-local, loopback... are denied without a flag"
    );
    assert!(cfg.allow_cidrs.0.is_empty());
    assert_eq!(
        cfg.resolv_conf,
        Path::new("/etc/resolv.conf"),
        "the pod's own"
    );
    // Confirmation on, the zone from the Node's label, asks authenticated
    // with the chart's ServiceAccount.
    assert!(cfg.confirm_failures);
    assert_eq!(cfg.zone, None, "the Node's label");
    assert_eq!(cfg.service_account, FULLNAME);
    assert_eq!(
        container(dep)["image"].as_str(),
        Some(format!("webchecker-operator:{}", env!("CARGO_PKG_VERSION")).as_str()),
        "the image tag defaults to appVersion, the crate's version (tests/generated/main.rs)"
    );
    assert_eq!(
        dep["spec"]["template"]["spec"]["terminationGracePeriodSeconds"].as_u64(),
        Some(30)
    );

    the_service_account_runs_the_pods(&docs, dep);
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
    for off in [
        "ServiceMonitor",
        "PodMonitor",
        "PrometheusRule",
        "ConfigMap",
    ] {
        assert!(!k.contains(off), "{off} rendered by default: {k:?}");
    }
    // On by default: the confirm port is the release's own.
    assert!(k.contains("NetworkPolicy"), "{k:?}");
}

/// Every documented WEBCHECKER_* variable, except those that are only set
/// when their value is not empty.
fn every_documented_variable_unless_empty(dep: &Value) {
    let names: BTreeSet<String> = env_names(container(dep)).into_iter().collect();
    let optional = [
        "WEBCHECKER_WATCH_NAMESPACE",
        "WEBCHECKER_LEASE_PREFIX",
        "WEBCHECKER_ALLOW_CIDRS",
        "WEBCHECKER_CA_BUNDLE",
        "WEBCHECKER_ZONE",
    ];
    for var in documented_env().keys() {
        if NOT_FROM_THE_CHART.contains(&var.as_str()) {
            assert!(!names.contains(var), "{var} set by the chart");
        } else if optional.contains(&var.as_str()) {
            assert!(!names.contains(var), "{var} set although empty");
        } else {
            assert!(names.contains(var), "{var} not set: {names:?}");
        }
    }
}

/// The pods run as the chart's ServiceAccount; the bindings name it.
fn the_service_account_runs_the_pods(docs: &[Value], dep: &Value) {
    let sa = one(docs, "ServiceAccount");
    assert_eq!(sa["metadata"]["name"].as_str(), Some(FULLNAME));
    assert_eq!(
        dep["spec"]["template"]["spec"]["serviceAccountName"].as_str(),
        Some(FULLNAME)
    );
    for b in [
        one(docs, "ClusterRoleBinding"),
        one_in(docs, "RoleBinding", RELEASE_NS),
        one_in(docs, "RoleBinding", "default"),
    ] {
        let kind = b["kind"].as_str().unwrap();
        let s = &b["subjects"][0];
        assert_eq!(s["kind"].as_str(), Some("ServiceAccount"), "{kind}");
        assert_eq!(s["name"].as_str(), Some(FULLNAME), "{kind}");
        assert_eq!(s["namespace"].as_str(), Some(RELEASE_NS), "{kind}");
    }
}

/// Settings whose chart default is not the operator's, on purpose:
/// (flag, the chart's value). JSON logs suit a cluster's log collector; a
/// terminal reads plain ones.
const CHART_OWN_DEFAULTS: [(&str, &str); 1] = [("log-format", "json")];

/// The chart's operator settings default to the operator's own defaults
/// (src/config.rs, documented in docs/operator-interface.md): one value each,
/// whether the operator runs from the chart or not, except
/// [`CHART_OWN_DEFAULTS`].
#[test]
fn chart_defaults_are_the_operators_defaults() {
    let docs = render(&[]);
    let chart = rendered_config(one(&docs, "Deployment"), "wc-webchecker-operator-0");
    let own = Config::try_parse_from(["webchecker-operator"]).expect("the built-in defaults parse");
    assert_eq!(chart.log_format, "json");
    assert_eq!(own.log_format, "plain");
    let pairs = |c: &Config| {
        [
            ("listen", c.listen.to_string()),
            ("fast-failover", c.fast_failover.to_string()),
            ("confirm-failures", c.confirm_failures.to_string()),
            ("discover-routes", c.discover_routes.to_string()),
            ("zone", format!("{:?}", c.zone)),
            ("workers", c.workers.to_string()),
            ("match-threads", c.match_threads.to_string()),
            (
                "namespace-pattern-budget-mib",
                c.namespace_pattern_budget_mib.to_string(),
            ),
            (
                "namespace-value-budget-mib",
                c.namespace_value_budget_mib.to_string(),
            ),
            ("heartbeat", format!("{:?}", c.heartbeat)),
            ("lease-duration", format!("{:?}", c.lease_duration)),
            ("renew-deadline", format!("{:?}", c.renew_deadline)),
            ("retry-period", format!("{:?}", c.retry_period)),
            ("shutdown-timeout", format!("{:?}", c.shutdown_timeout)),
            ("replica-header", c.replica_header.to_string()),
            ("per-checker-histogram", c.per_checker_histogram.to_string()),
            ("native-histograms", c.native_histograms.to_string()),
            ("classic-histograms", c.classic_histograms.to_string()),
            ("deny-cidrs", format!("{:?}", c.deny_cidrs.0)),
            ("allow-cidrs", format!("{:?}", c.allow_cidrs.0)),
            ("allow-loopback", c.allow_loopback.to_string()),
            ("restricted-namespaces", c.restricted_namespaces.clone()),
            ("private-cidrs", format!("{:?}", c.private_cidrs.0)),
            ("check-proxied-targets", c.check_proxied_targets.to_string()),
            ("resolv-conf", c.resolv_conf.display().to_string()),
            ("hosts-file", c.hosts_file.display().to_string()),
            (
                "metric-labels-allowlist",
                format!("{:?}", c.metric_labels_allowlist.0),
            ),
            ("max-body-bytes", c.max_body_bytes.to_string()),
            ("log-format", c.log_format.clone()),
            ("log-level", c.log_level.clone()),
        ]
    };
    let differ: Vec<String> = pairs(&chart)
        .into_iter()
        .zip(pairs(&own))
        .filter(|(a, b)| a.1 != b.1 && !CHART_OWN_DEFAULTS.contains(&(a.0, a.1.as_str())))
        .map(|((flag, a), (_, b))| format!("--{flag}: chart {a}, operator {b}"))
        .collect();
    assert!(
        differ.is_empty(),
        "values.yaml's operator.* defaults differ from the operator's flag defaults:\n  {}",
        differ.join("\n  ")
    );
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
        if !NOT_FROM_THE_CHART.contains(&var.as_str()) {
            assert!(names.contains(var), "{var} not set: {names:?}");
        }
    }
    assert!(names.contains("RUST_BACKTRACE"), "extraEnv");
    every_option_set(&cfg);
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

    the_service_monitor(&docs, dep);
    the_prometheus_rule(&docs);
    the_dashboards_config_map(&docs);

    // readSecrets/readConfigMaps add exactly their one permission each, in
    // the watched namespace only: not in the ClusterRole.
    assert_eq!(
        grants(operator_clusterrole(&docs)),
        operator_cluster_grants()
    );
    // operator.confirmFailures=false: no token of the ServiceAccount is made.
    assert_eq!(
        grants(one_in(&docs, "Role", RELEASE_NS)),
        operator_lease_grants()
    );
    let (role, binding) = references_role(&docs, "probes");
    let mut expected = grant_set(&[("", "secrets", &["get"]), ("", "configmaps", &["get"])]);
    expected.extend(super::rbac::diagnosis_grants());
    assert_eq!(grants(role), expected);
    let s = &binding["subjects"][0];
    assert_eq!(s["name"].as_str(), Some("webchecker"));
    assert_eq!(s["namespace"].as_str(), Some(RELEASE_NS));
    assert!(of_kind(&docs, "PodDisruptionBudget").len() == 1);
}

/// The operator settings of the all-on values, as the operator reads them.
fn every_option_set(cfg: &Config) {
    assert_eq!(cfg.watch_namespace.as_deref(), Some("probes"));
    assert_eq!(cfg.lease_prefix, "probes-wc");
    assert_eq!(cfg.listen.port(), 9090);
    assert_eq!(cfg.confirm_listen.port(), 9091);
    assert_eq!(cfg.workers, 512);
    assert_eq!(cfg.heartbeat, Duration::from_secs(120));
    assert_eq!(cfg.lease_duration, Duration::from_secs(15));
    assert_eq!(cfg.renew_deadline, Duration::from_secs(10));
    assert_eq!(cfg.retry_period, Duration::from_millis(2500));
    assert_eq!(cfg.shutdown_timeout, Duration::from_secs(25));
    assert!(!cfg.replica_header && !cfg.per_checker_histogram);
    assert!(cfg.native_histograms && !cfg.classic_histograms);
    assert!(!cfg.confirm_failures);
    assert!(cfg.discover_routes, "discovery.enabled");
    assert_eq!(cfg.zone.as_deref(), Some("eu-west-1a"));
    assert_eq!(cfg.service_account, "webchecker", "serviceAccount.name");
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
    assert_eq!(cfg.log_format, "plain", "not the chart's default");
    assert_eq!(
        cfg.ca_bundle.as_deref(),
        Some(Path::new("/etc/webchecker-ca/ca.crt"))
    );
}

/// The ServiceMonitor, in the monitoring namespace, scrapes the operator's
/// pods in the release's namespace.
fn the_service_monitor(docs: &[Value], dep: &Value) {
    let selector = &dep["spec"]["selector"]["matchLabels"];
    let sm = one(docs, "ServiceMonitor");
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
}

/// The PrometheusRule carries the real alert groups.
fn the_prometheus_rule(docs: &[Value]) {
    let rule = one(docs, "PrometheusRule");
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
}

/// The dashboards ConfigMap: one key per dashboards/*.json, same content.
fn the_dashboards_config_map(docs: &[Value]) {
    let cms = of_kind(docs, "ConfigMap");
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
}

/// The topology keys and the `whenUnsatisfiable` values of spread constraints.
const NODE: &str = "kubernetes.io/hostname";
const ZONE: &str = "topology.kubernetes.io/zone";
const SOFT: &str = "ScheduleAnyway";
const HARD: &str = "DoNotSchedule";

/// The replicas are spread over nodes and, softly, over zones: a failure is
/// confirmed from another zone where there is one (operator.confirmFailures).
#[test]
fn replicas_spread_over_nodes_and_zones() {
    let (node, zone, soft, hard) = (NODE, ZONE, SOFT, HARD);
    assert_eq!(
        spread(&render(&[])),
        pairs(&[(node, soft), (zone, soft)]),
        "default"
    );
    // Hard over nodes; over zones it stays soft (a zone may be missing).
    assert_eq!(
        spread(&render(&[
            "--set",
            "topologySpread.whenUnsatisfiable=DoNotSchedule"
        ])),
        pairs(&[(node, hard), (zone, soft)])
    );
    assert_eq!(
        spread(&render(&["--set", "topologySpread.zoneTopologyKey="])),
        pairs(&[(node, soft)])
    );
    assert!(spread(&render(&["--set", "topologySpread.enabled=false"])).is_empty());
    assert_eq!(
        spread(&render(&["-f", ALL_ON])),
        pairs(&[
            (node, soft),
            (zone, soft),
            ("topology.kubernetes.io/region", soft)
        ])
    );
    // The same key twice would be refused by the API server: the chart fails first.
    let (ok, out) = super::platform::template(&[
        "--skip-tests",
        "--set",
        "topologySpread.topologyKey=topology.kubernetes.io/zone",
    ]);
    assert!(!ok, "two constraints over zones rendered:\n{out}");
    assert!(
        out.contains("topologySpread.zoneTopologyKey \"topology.kubernetes.io/zone\" repeats topologySpread.topologyKey"),
        "{out}"
    );
    // ... unless one of them is hard.
    assert_eq!(
        spread(&render(&[
            "--set",
            "topologySpread.topologyKey=topology.kubernetes.io/zone",
            "--set",
            "topologySpread.whenUnsatisfiable=DoNotSchedule"
        ])),
        pairs(&[(zone, hard), (zone, soft)])
    );
    zone_quorum_spread();
    // minDomains is ignored by Kubernetes with ScheduleAnyway: the chart says so.
    let (ok, out) =
        super::platform::template(&["--skip-tests", "--set", "topologySpread.zoneMinDomains=3"]);
    assert!(!ok, "minDomains with a soft constraint rendered:\n{out}");
    assert!(
        out.contains("zoneMinDomains needs topologySpread.zoneWhenUnsatisfiable: DoNotSchedule"),
        "{out}"
    );
}

/// `(topologyKey, whenUnsatisfiable)` of each spread constraint of the
/// Deployment; those over nodes and zones select the operator's pods, with a
/// skew of 1.
fn spread(docs: &[Value]) -> Vec<(String, String)> {
    let dep = one(docs, "Deployment");
    let constraints = pod_spec(dep)["topologySpreadConstraints"]
        .as_sequence()
        .cloned()
        .unwrap_or_default();
    constraints
        .iter()
        .map(|c| {
            if c["topologyKey"].as_str() != Some("topology.kubernetes.io/region") {
                assert_eq!(
                    c["labelSelector"]["matchLabels"], dep["spec"]["selector"]["matchLabels"],
                    "the operator pods: {c:?}"
                );
                assert_eq!(c["maxSkew"].as_u64(), Some(1), "{c:?}");
            }
            (
                c["topologyKey"].as_str().unwrap().to_string(),
                c["whenUnsatisfiable"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn pairs(v: &[(&str, &str)]) -> Vec<(String, String)> {
    v.iter()
        .map(|(k, w)| (k.to_string(), w.to_string()))
        .collect()
}

/// Zone quorum's spread: hard over zones, at least three of them.
fn zone_quorum_spread() {
    let (node, zone, soft, hard) = (NODE, ZONE, SOFT, HARD);
    let quorum = render(&[
        "--set",
        "topologySpread.zoneWhenUnsatisfiable=DoNotSchedule",
        "--set",
        "topologySpread.zoneMinDomains=3",
    ]);
    assert_eq!(spread(&quorum), pairs(&[(node, soft), (zone, hard)]));
    let zone_constraint = &pod_spec(one(&quorum, "Deployment"))["topologySpreadConstraints"][1];
    assert_eq!(zone_constraint["minDomains"].as_u64(), Some(3));
    assert!(
        pod_spec(one(&render(&[]), "Deployment"))["topologySpreadConstraints"][1]["minDomains"]
            .is_null()
    );
}
