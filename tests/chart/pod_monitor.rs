//! `podMonitor`, the alternative to the ServiceMonitor: off by default, the
//! same knobs, scrapes every replica's metrics port, and never together with
//! the ServiceMonitor; `nativeHistograms` of both monitors; and the monitoring
//! objects checked against the Prometheus Operator's own CRDs on the API
//! server (hack/fetch-prometheus-operator-crds.sh).

use super::platform::render_fails;
use super::rendered::*;
use super::*;

#[test]
fn pod_monitor_is_off_by_default_and_excludes_the_service_monitor() {
    let k = kinds(&render(&[]));
    assert!(!k.contains("PodMonitor"), "{k:?}");
    let out = render_fails("serviceMonitor: {enabled: true}\npodMonitor: {enabled: true}\n");
    assert!(
        out.contains("serviceMonitor.enabled and podMonitor.enabled: enable one of them"),
        "{out}"
    );
}

#[test]
fn pod_monitor_scrapes_every_replica_with_the_knobs_given() {
    let docs = render(&[
        "-f",
        ALL_ON,
        "--set",
        "serviceMonitor.enabled=false",
        "--set",
        "podMonitor.enabled=true",
    ]);
    let all_on: Value =
        serde_yaml::from_str(&std::fs::read_to_string(support::repo().join(ALL_ON)).unwrap())
            .unwrap();
    let given = &all_on["podMonitor"];
    assert!(!kinds(&docs).contains("ServiceMonitor"));
    let pm = one(&docs, "PodMonitor");
    assert_eq!(pm["apiVersion"].as_str(), Some("monitoring.coreos.com/v1"));
    assert_eq!(pm["metadata"]["name"].as_str(), Some(FULLNAME));
    assert_eq!(pm["metadata"]["namespace"], given["namespace"]);
    assert_eq!(
        pm["metadata"]["labels"]["release"],
        given["labels"]["release"]
    );
    let dep = one(&docs, "Deployment");
    assert_eq!(
        pm["spec"]["selector"]["matchLabels"],
        dep["spec"]["selector"]["matchLabels"]
    );
    assert_eq!(
        pm["spec"]["namespaceSelector"]["matchNames"][0].as_str(),
        Some(RELEASE_NS)
    );
    let eps = pm["spec"]["podMetricsEndpoints"].as_sequence().unwrap();
    assert_eq!(eps.len(), 1);
    let ep = &eps[0];
    // The container port of that name serves /metrics.
    assert_eq!(ep["port"].as_str(), Some("metrics"));
    let port = &container(dep)["ports"][0];
    assert_eq!(port["name"].as_str(), Some("metrics"));
    assert_eq!(ep["path"].as_str(), Some("/metrics"));
    for knob in [
        "interval",
        "scrapeTimeout",
        "honorLabels",
        "relabelings",
        "metricRelabelings",
    ] {
        assert!(!given[knob].is_null(), "{ALL_ON} sets podMonitor.{knob}");
        assert_eq!(ep[knob], given[knob], "podMonitor.{knob}");
    }
}

/// `nativeHistograms` of either monitor: the prometheus-operator fields (of
/// ServiceMonitorSpec and PodMonitorSpec) that make Prometheus scrape what
/// `operator.nativeHistograms` serves: the protobuf format first (native
/// buckets travel only in it), `scrapeNativeHistograms` (Prometheus >= 3.8),
/// and the classic buckets kept as the operator keeps them. Off by default;
/// asked for without the operator's native histograms, the chart fails.
#[test]
fn monitors_scrape_native_histograms_when_asked() {
    let protocols = [
        "PrometheusProto",
        "OpenMetricsText1.0.0",
        "OpenMetricsText0.0.1",
        "PrometheusText0.0.4",
    ];
    let fields = [
        "scrapeProtocols",
        "scrapeNativeHistograms",
        "scrapeClassicHistograms",
    ];
    for (monitor, kind) in [
        ("serviceMonitor", "ServiceMonitor"),
        ("podMonitor", "PodMonitor"),
    ] {
        let on = format!("{monitor}.enabled=true");
        let docs = render(&["--set", &on, "--set", "operator.nativeHistograms=true"]);
        let spec = &one(&docs, kind)["spec"];
        for f in fields {
            assert!(spec[f].is_null(), "{kind} has {f} by default");
        }
        let native = format!("{monitor}.nativeHistograms=true");
        for classic in [true, false] {
            let keep = format!("operator.classicHistograms={classic}");
            let docs = render(&[
                "--set",
                &on,
                "--set",
                &native,
                "--set",
                "operator.nativeHistograms=true",
                "--set",
                &keep,
            ]);
            let spec = &one(&docs, kind)["spec"];
            let asked: Vec<&str> = spec["scrapeProtocols"]
                .as_sequence()
                .unwrap_or_else(|| panic!("{kind} has no scrapeProtocols"))
                .iter()
                .map(|p| p.as_str().unwrap())
                .collect();
            assert_eq!(asked, protocols, "{kind}");
            assert_eq!(
                spec["scrapeNativeHistograms"].as_bool(),
                Some(true),
                "{kind}"
            );
            assert_eq!(
                spec["scrapeClassicHistograms"].as_bool(),
                Some(classic),
                "{kind} with {keep}"
            );
            // What the replicas serve, read by the operator's own parser.
            let cfg = rendered_config(one(&docs, "Deployment"), "wc-webchecker-operator-0");
            assert!(cfg.native_histograms);
            assert_eq!(cfg.classic_histograms, classic);
        }
        let out = render_fails(&format!(
            "{monitor}: {{enabled: true, nativeHistograms: true}}\n"
        ));
        assert!(
            out.contains(&format!(
                "{monitor}.nativeHistograms needs operator.nativeHistograms: true"
            )),
            "{out}"
        );
    }
}

/// The monitoring objects the chart renders with every option on (native
/// histograms included), as the ServiceMonitor and as the PodMonitor, are
/// valid objects of the Prometheus Operator's own CRDs (the release of
/// `PROMETHEUS_OPERATOR_VERSION`, the first with `scrapeNativeHistograms`):
/// the API server's dry run with strict field validation refuses an unknown
/// or misplaced field.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn monitoring_objects_are_valid_for_the_prometheus_operator_crds() {
    let cluster = Cluster::shared("chart");
    cluster.install_prometheus_operator_crds();
    let ns = "apiVersion: v1\nkind: Namespace\nmetadata: {name: monitoring}\n";
    ok(
        cluster.kubectl_stdin_async(&["apply", "-f", "-"], ns).await,
        "the all-on values' monitoring namespace",
    );
    let pod = [
        "--set",
        "serviceMonitor.enabled=false",
        "--set",
        "podMonitor.enabled=true",
    ];
    for (monitor, extra) in [("ServiceMonitor", &[][..]), ("PodMonitor", &pod[..])] {
        let mut args = vec!["-f", ALL_ON];
        args.extend_from_slice(extra);
        let docs = render(&args);
        let objects: Vec<&Value> = docs
            .iter()
            .filter(|d| d["apiVersion"].as_str() == Some("monitoring.coreos.com/v1"))
            .collect();
        let mut kinds: Vec<&str> = objects
            .iter()
            .map(|d| d["kind"].as_str().unwrap())
            .collect();
        kinds.sort_unstable();
        let mut want = [monitor, "PrometheusRule"];
        want.sort_unstable();
        assert_eq!(kinds, want, "{ALL_ON}");
        let yaml: Vec<String> = objects
            .iter()
            .map(|d| serde_yaml::to_string(d).unwrap())
            .collect();
        let out = cluster
            .kubectl_stdin_async(
                &["create", "--dry-run=server", "--validate=strict", "-f", "-"],
                &yaml.join("---\n"),
            )
            .await;
        ok(
            out,
            &format!("a server-side dry run of the {monitor} and the PrometheusRule"),
        );
    }
}
