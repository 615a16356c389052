//! `podMonitor`, the alternative to the ServiceMonitor: off by default, the
//! same knobs, scrapes every replica's metrics port, and never together with
//! the ServiceMonitor.

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
