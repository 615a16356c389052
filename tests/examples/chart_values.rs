//! The values files, rendered by the real helm with `-f examples/<file>`:
//! the objects each promises, and the API server's verdict on them
//! (`kubectl apply --dry-run=server`) where it serves their kinds.

use serde::Deserialize;
use support::release::{CHART, base_values, helm_command, ok, run};

use super::*;

/// `helm template` of the chart with `-f examples/<file>` into namespace
/// `ns`: its documents.
async fn render(file: &str, ns: &str) -> Vec<Value> {
    let values = example(file);
    let mut c = helm_command(&cluster().bin, None);
    c.args([
        "template",
        "webchecker",
        CHART,
        "-n",
        ns,
        "--skip-tests",
        "-f",
    ])
    // The image a user names (it has no default), then the example's values.
    .arg(base_values())
    .arg("-f")
    .arg(&values);
    let rendered = ok(run(c).await, &format!("helm template -f examples/{file}"));
    serde_yaml::Deserializer::from_str(&rendered)
        .map(|d| Value::deserialize(d).expect("helm template prints YAML"))
        .filter(|v| !v.is_null())
        .collect()
}

fn one<'a>(docs: &'a [Value], kind: &str) -> &'a Value {
    let all: Vec<&Value> = docs.iter().filter(|d| d["kind"] == kind).collect();
    assert_eq!(all.len(), 1, "one {kind}");
    all[0]
}

/// The rendered objects but those of `skip` (API groups this API server
/// does not serve), to the API server as a dry run: it validates them
/// against its schemas and admission (the namespace must exist).
async fn dry_run(ns: &str, docs: &[Value], skip: &str) {
    kubectl(&["create", "namespace", ns]).await;
    let kept: Vec<String> = docs
        .iter()
        .filter(|d| !d["apiVersion"].as_str().unwrap_or("").starts_with(skip))
        .map(|d| serde_yaml::to_string(d).unwrap())
        .collect();
    let out = cluster()
        .kubectl_stdin_async(
            &["apply", "--dry-run=server", "-f", "-"],
            &kept.join("---\n"),
        )
        .await;
    assert!(
        out.status.success(),
        "kubectl apply --dry-run=server: {}",
        text(&out.stderr)
    );
    println!(
        "kubectl apply --dry-run=server: {} objects accepted",
        text(&out.stdout).lines().count()
    );
}

/// values-kube-prometheus-stack.yaml: a ServiceMonitor (no PodMonitor) and
/// a PrometheusRule carrying the chart's alerts, both labelled for
/// kube-prometheus-stack's selectors, and the dashboards' ConfigMap with the
/// Grafana sidecar's label; the rest accepted by the API server (the
/// Prometheus Operator's CRDs are not installed here).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn values_for_kube_prometheus_stack() {
    let ns = format!("ex-kps-{}", rand_suffix());
    let docs = render("values-kube-prometheus-stack.yaml", &ns).await;
    let release = Value::from("kube-prometheus-stack");
    assert!(docs.iter().all(|d| d["kind"] != "PodMonitor"));
    let sm = one(&docs, "ServiceMonitor");
    assert_eq!(sm["metadata"]["labels"]["release"], release);
    assert_eq!(sm["spec"]["endpoints"][0]["port"].as_str(), Some("metrics"));
    assert_eq!(
        sm["spec"]["endpoints"][0]["honorLabels"].as_bool(),
        Some(true)
    );
    let dep = one(&docs, "Deployment");
    assert_eq!(
        sm["spec"]["selector"]["matchLabels"],
        dep["spec"]["selector"]["matchLabels"]
    );
    let rule = one(&docs, "PrometheusRule");
    assert_eq!(rule["metadata"]["labels"]["release"], release);
    let alerts: Vec<&str> = rule["spec"]["groups"]
        .as_sequence()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_sequence().unwrap())
        .filter_map(|r| r["alert"].as_str())
        .collect();
    assert!(alerts.contains(&"WebCheckerDown"), "{alerts:?}");
    let dashboards: Vec<&Value> = docs
        .iter()
        .filter(|d| d["kind"] == "ConfigMap" && d["metadata"]["labels"]["grafana_dashboard"] == "1")
        .collect();
    assert_eq!(
        dashboards.len(),
        1,
        "one ConfigMap with grafana_dashboard: \"1\""
    );
    let data = dashboards[0]["data"].as_mapping().unwrap();
    assert!(!data.is_empty());
    for (key, json) in data {
        let d: serde_json::Value = serde_json::from_str(json.as_str().unwrap())
            .unwrap_or_else(|e| panic!("{key:?} is not JSON: {e}"));
        assert!(
            d["panels"].as_array().is_some_and(|p| !p.is_empty()),
            "{key:?}"
        );
    }
    println!(
        "ServiceMonitor, PrometheusRule ({} alerts), dashboards {:?}",
        alerts.len(),
        data.keys().collect::<Vec<_>>()
    );
    dry_run(&ns, &docs, "monitoring.coreos.com/").await;
}

/// values-multi-zone.yaml: three replicas spread over zones by a hard
/// constraint (DoNotSchedule, minDomains 3), confirmation on, a
/// PodDisruptionBudget; all of it accepted by the API server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn values_for_three_zones() {
    let ns = format!("ex-zones-{}", rand_suffix());
    let docs = render("values-multi-zone.yaml", &ns).await;
    let dep = one(&docs, "Deployment");
    assert_eq!(dep["spec"]["replicas"].as_u64(), Some(3));
    let pod = &dep["spec"]["template"]["spec"];
    let spread = pod["topologySpreadConstraints"].as_sequence().unwrap();
    let zone = spread
        .iter()
        .find(|c| c["topologyKey"] == "topology.kubernetes.io/zone")
        .expect("a constraint over zones");
    assert_eq!(zone["whenUnsatisfiable"].as_str(), Some("DoNotSchedule"));
    assert_eq!(zone["minDomains"].as_u64(), Some(3));
    assert_eq!(zone["maxSkew"].as_u64(), Some(1));
    let env = pod["containers"][0]["env"].as_sequence().unwrap();
    let confirm = env
        .iter()
        .find(|e| e["name"] == "WEBCHECKER_CONFIRM_FAILURES")
        .expect("WEBCHECKER_CONFIRM_FAILURES");
    assert_eq!(confirm["value"].as_str(), Some("true"));
    let pdb = one(&docs, "PodDisruptionBudget");
    assert_eq!(pdb["spec"]["maxUnavailable"].as_u64(), Some(1));
    println!("zone constraint: {}", serde_json::to_string(zone).unwrap());
    dry_run(&ns, &docs, "none/").await;
}
