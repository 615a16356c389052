//! Unit tests of the per-checker families (src/observe/metrics.rs).

use super::family::reg;
use super::*;
use crate::probe::Phases;
use prometheus::{HistogramOpts, IntCounterVec, IntGaugeVec, Opts};
use std::collections::BTreeMap;
use std::time::Duration;

pub(super) fn outcome(reason: Reason) -> Outcome {
    Outcome {
        reason,
        message: String::new(),
        status_code: Some(200),
        duration: Duration::from_millis(12),
        phases: Phases::default(),
        cert_not_after: Some(1_900_000_000),
        tls: None,
        http_version: Some(http::Version::HTTP_2),
        redirects: 0,
        grpc: None,
    }
}

#[test]
fn forgetting_a_checker_removes_every_series() {
    let m = Metrics::new("r1", true);
    m.record_probe(
        "ns",
        "a",
        &Arc::default(),
        &outcome(Reason::ProbeSucceeded),
        true,
    );
    m.record_probe("ns", "a", &Arc::default(), &outcome(Reason::Timeout), false);
    m.record_probe(
        "ns",
        "b",
        &Arc::default(),
        &outcome(Reason::ProbeSucceeded),
        true,
    );
    assert!(m.render().contains("name=\"a\""));
    m.forget_checker("ns", "a");
    let text = m.render();
    assert!(!text.contains("name=\"a\""), "{text}");
    assert!(text.contains("name=\"b\""));
}

#[test]
fn last_success_timestamp_is_zero_until_a_success() {
    let m = Metrics::new("r1", true);
    m.record_probe("ns", "a", &Arc::default(), &outcome(Reason::Timeout), false);
    let text = m.render();
    assert!(
        text.contains("webchecker_last_success_timestamp_seconds{name=\"a\",namespace=\"ns\"} 0\n"),
        "{text}"
    );
}

/// The hand-written families must read exactly like the prometheus crate's
/// encoder would write them (dashboards, alerts and tests depend on it).
#[test]
fn checker_families_match_the_prometheus_encoder() {
    use prometheus::{GaugeVec, HistogramVec};
    let ours = Metrics::new("r1", true);
    let mut o = outcome(Reason::ProbeSucceeded);
    o.phases.connect = Duration::from_micros(250);
    ours.record_probe("ns", "a\"b", &Arc::default(), &o, true);
    ours.record_probe(
        "ns",
        "a\"b",
        &Arc::default(),
        &outcome(Reason::Timeout),
        false,
    );

    let r = Registry::new();
    let ck = &["namespace", "name"];
    let h = reg(
        &r,
        HistogramVec::new(
            HistogramOpts::new("webchecker_probe_duration_seconds", "Whole probe duration")
                .buckets(PROBE_BUCKETS.to_vec()),
            ck,
        )
        .unwrap(),
    );
    let p = reg(
        &r,
        IntCounterVec::new(
            Opts::new(
                "webchecker_probes_total",
                "Probes done, by result and reason",
            ),
            &["namespace", "name", "result", "reason"],
        )
        .unwrap(),
    );
    let ph = reg(
        &r,
        GaugeVec::new(
            Opts::new(
                "webchecker_probe_phase_duration_seconds",
                "Phase durations of the last probe",
            ),
            &["namespace", "name", "phase"],
        )
        .unwrap(),
    );
    let up = reg(
        &r,
        IntGaugeVec::new(
            Opts::new("webchecker_up", "1 when the Ready condition is True"),
            ck,
        )
        .unwrap(),
    );
    let l = &["ns", "a\"b"];
    h.with_label_values(l).observe(0.012);
    h.with_label_values(l).observe(0.012);
    p.with_label_values(&["ns", "a\"b", "success", "ProbeSucceeded"])
        .inc();
    p.with_label_values(&["ns", "a\"b", "failure", "Timeout"])
        .inc();
    for phase in PHASES {
        ph.with_label_values(&["ns", "a\"b", phase]).set(0.0);
    }
    up.with_label_values(l).set(0);
    let reference = TextEncoder::new().encode_to_string(&r.gather()).unwrap();

    let text = ours.render();
    for line in reference
        .lines()
        .filter(|l| !l.contains("phase=\"connect\""))
    {
        assert!(
            text.lines().any(|t| t == line),
            "missing {line:?} in\n{text}"
        );
    }
    assert!(text.contains(
        "webchecker_probe_phase_duration_seconds{name=\"a\\\"b\",namespace=\"ns\",phase=\"connect\"} 0\n"
    ), "{text}");
}

#[test]
fn tls_series_are_replaced_not_added() {
    use crate::probe::{CertFacts, Chain};
    let cert = |n: &str| CertFacts {
        subject: format!("CN={n}"),
        issuer: "CN=\"ca\"".into(),
        serial: "01".into(),
        fingerprint_sha256: n.repeat(4),
        not_after: 1_900_000_000,
    };
    let m = Metrics::new("r1", true);
    for round in ["a", "b", "c"] {
        let mut o = outcome(Reason::ProbeSucceeded);
        o.tls = Some(TlsFacts {
            version: "TLS 1.3",
            cipher: "TLS13_AES_128_GCM_SHA256",
            chain: Some(Arc::new(Chain {
                earliest_not_after: 1_900_000_000,
                earliest: 0,
                certificates: vec![cert(round), cert("int")],
            })),
        });
        m.record_probe("ns", "a", &Arc::default(), &o, true);
    }
    let text = m.render();
    let lines = |f: &str| text.lines().filter(|l| l.starts_with(f)).count();
    assert_eq!(lines("webchecker_tls_info{"), 1, "{text}");
    assert_eq!(lines("webchecker_certificate_info{"), 2, "{text}");
    assert!(text.contains(
        "webchecker_certificate_info{name=\"a\",namespace=\"ns\",position=\"0\",subject=\"CN=c\",issuer=\"CN=\\\"ca\\\"\",serial=\"01\",fingerprint_sha256=\"cccc\",not_after=\"2030-03-17T17:46:40Z\"} 1\n"
    ), "{text}");
}

#[test]
fn histogram_can_be_turned_off() {
    let m = Metrics::new("r1", false);
    m.record_probe(
        "ns",
        "a",
        &Arc::default(),
        &outcome(Reason::ProbeSucceeded),
        true,
    );
    let text = m.render();
    assert!(!text.contains("webchecker_probe_duration_seconds_bucket"));
    assert!(text.contains("webchecker_probes_total{"));
}

/// `webchecker_checker_info` reads like the prometheus crate's encoder would
/// write it, and follows the checker: replaced on a change, gone with it.
#[test]
fn checker_info_matches_the_prometheus_encoder() {
    let allow = parse_label_allowlist("team,app.kubernetes.io/part-of").unwrap();
    let labels: BTreeMap<String, String> = [
        ("team", "pay\"ments"),
        ("app.kubernetes.io/part-of", "shop"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let info = Arc::new(CheckerInfo::new(
        "https://shop.example.com:8443",
        "/health?token=x",
        Some(&labels),
        &allow,
    ));
    let ours = Metrics::new("r1", false);
    ours.record_probe("ns", "a", &info, &outcome(Reason::ProbeSucceeded), true);

    let r = Registry::new();
    let g = reg(
        &r,
        IntGaugeVec::new(
            Opts::new(
                "webchecker_checker_info",
                "The checker's URL, host, kind (http, grpc, tcp, tls) and allowlisted labels (--metric-labels-allowlist); always 1",
            ),
            &["namespace", "name", "url", "host", "kind", "label_team", "label_app_kubernetes_io_part_of"],
        )
        .unwrap(),
    );
    g.with_label_values(&[
        "ns",
        "a",
        "https://shop.example.com:8443/health",
        "shop.example.com",
        "http",
        "pay\"ments",
        "shop",
    ])
    .set(1);
    let reference = TextEncoder::new().encode_to_string(&r.gather()).unwrap();
    let text = ours.render();
    for line in reference.lines() {
        assert!(
            text.lines().any(|t| t == line),
            "missing {line:?} in\n{text}"
        );
    }
    assert!(!text.contains("token"), "{text}");

    // A label change replaces the series; forgetting the checker drops it.
    let mut labels = labels;
    labels.insert("team".into(), "web".into());
    let changed = Arc::new(CheckerInfo::new(
        "https://shop.example.com:8443",
        "/health",
        Some(&labels),
        &allow,
    ));
    ours.refresh_info("ns", "a", &changed);
    ours.refresh_info("ns", "unknown", &changed);
    let text = ours.render();
    let info_lines: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("webchecker_checker_info{"))
        .collect();
    assert_eq!(info_lines.len(), 1, "{text}");
    assert!(info_lines[0].contains("label_team=\"web\""), "{text}");
    ours.forget_checker("ns", "a");
    assert!(!ours.render().contains("webchecker_checker_info{"));
}

#[test]
fn grpc_answers_are_exported_as_blackbox_names_them() {
    use crate::probe::{GrpcFacts, Serving};
    let info = Arc::new(CheckerInfo::new(
        "grpc://api.example.com:50051",
        "/",
        None,
        &Default::default(),
    ));
    let ours = Metrics::new("r1", false);
    let mut o = outcome(Reason::NotServing);
    o.grpc = Some(GrpcFacts {
        status: 0,
        serving: Some(Serving::NotServing),
    });
    ours.record_probe("ns", "g", &info, &o, false);
    let text = ours.render();
    for line in [
        "webchecker_grpc_status_code{name=\"g\",namespace=\"ns\"} 0",
        "webchecker_grpc_healthcheck_response{name=\"g\",namespace=\"ns\",serving_status=\"NOT_SERVING\"} 1",
        "webchecker_grpc_healthcheck_response{name=\"g\",namespace=\"ns\",serving_status=\"SERVING\"} 0",
        "webchecker_grpc_healthcheck_response{name=\"g\",namespace=\"ns\",serving_status=\"UNKNOWN\"} 0",
        "webchecker_grpc_healthcheck_response{name=\"g\",namespace=\"ns\",serving_status=\"SERVICE_UNKNOWN\"} 0",
        "webchecker_probes_total{name=\"g\",namespace=\"ns\",reason=\"NotServing\",result=\"failure\"} 1",
    ] {
        assert!(
            text.lines().any(|t| t == line),
            "missing {line:?} in\n{text}"
        );
    }
    assert!(text.contains("kind=\"grpc\""), "{text}");
    // A failed call keeps its status code and no serving status.
    let mut o = outcome(Reason::UnexpectedGrpcStatus);
    o.grpc = Some(GrpcFacts {
        status: 12,
        serving: None,
    });
    ours.record_probe("ns", "g", &info, &o, false);
    let text = ours.render();
    assert!(
        text.contains("webchecker_grpc_status_code{name=\"g\",namespace=\"ns\"} 12"),
        "{text}"
    );
    assert!(
        !text.contains("webchecker_grpc_healthcheck_response{"),
        "{text}"
    );
    // Other checks have neither.
    let mut o = outcome(Reason::ConnectError);
    o.grpc = None;
    ours.record_probe("ns", "g", &info, &o, false);
    assert!(!ours.render().contains("webchecker_grpc_"));
}
