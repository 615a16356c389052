//! The catalogue: every metric of the contract (docs/operator-interface.md,
//! section Metrics) is exported by the fleet, but for those that need a
//! condition the scenario does not create.

use crate::support::repo;

/// Metrics of the catalogue that may be absent, and why.
const ABSENT_OK: &[(&str, &str)] = &[
    (
        "webchecker_certificate_expiry_timestamp_seconds",
        "https checkers only",
    ),
    ("webchecker_tls_info", "https checkers only"),
    ("webchecker_certificate_info", "https checkers only"),
    (
        "webchecker_watch_restarts_total",
        "appears with the first watch error",
    ),
    (
        "webchecker_unconfirmed_failures_total",
        "appears with the first failure another replica refutes; every replica reaches \
         the witness",
    ),
    (
        "webchecker_zone_probe_success",
        "checkers with spec.locations only; the scenario has none",
    ),
    (
        "webchecker_zone_probe_duration_seconds",
        "checkers with spec.locations only; the scenario has none",
    ),
    (
        "webchecker_zone_probes_total",
        "checkers with spec.locations only; the scenario has none",
    ),
    (
        "webchecker_zones_asked",
        "checkers with spec.locations only; the scenario has none",
    ),
    (
        "webchecker_maintenance",
        "checkers in a maintenance window only; the scenario has none",
    ),
    (
        "webchecker_grpc_status_code",
        "grpc:// checkers only (tests/probe/e2e_kinds.rs reads it)",
    ),
    (
        "webchecker_grpc_healthcheck_response",
        "grpc:// checkers only (tests/probe/e2e_kinds.rs reads it)",
    ),
    (
        "webchecker_discovery_active",
        "replicas with --discover-routes only (tests/probe/discovery*.rs read it)",
    ),
    (
        "webchecker_discovery_source_watched",
        "replicas with --discover-routes only (tests/probe/discovery*.rs read it)",
    ),
    (
        "webchecker_discovery_generated_checkers",
        "replicas with --discover-routes only (tests/probe/discovery*.rs read it)",
    ),
    (
        "webchecker_discovery_applies_total",
        "replicas with --discover-routes only (tests/probe/discovery*.rs read it)",
    ),
    (
        "webchecker_discovery_deletes_total",
        "replicas with --discover-routes only (tests/probe/discovery*.rs read it)",
    ),
];

/// `texts`: every replica's /metrics as (identity, text).
pub fn every_contract_metric_is_exported(texts: &[(String, String)]) {
    let all: String = texts
        .iter()
        .map(|(_, t)| t.as_str())
        .collect::<Vec<_>>()
        .join("\n");
    let mut missing = Vec::new();
    for (name, kind) in contract_metrics() {
        let sample = if kind == "histogram" {
            format!("{name}_bucket{{")
        } else {
            name.clone()
        };
        let present = all.lines().any(|l| l.starts_with(&sample));
        if !present && !ABSENT_OK.iter().any(|(n, _)| *n == name) {
            missing.push(format!("{name} ({kind})"));
        }
    }
    assert!(
        missing.is_empty(),
        "metrics of the catalogue not exported: {missing:?}"
    );
    for p in ["process_cpu_seconds_total", "process_resident_memory_bytes"] {
        assert!(all.lines().any(|l| l.starts_with(p)), "{p} not exported");
    }
}

/// Metric names and kinds of the contract (docs/operator-interface.md,
/// section Metrics).
fn contract_metrics() -> Vec<(String, String)> {
    let text = std::fs::read_to_string(repo().join("docs/operator-interface.md")).unwrap();
    let section = text.split("## Metrics").nth(1).expect("a Metrics section");
    let section = section.split("\n## ").next().unwrap();
    let mut out = Vec::new();
    for line in section.lines() {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        if cells.len() < 3 || !cells[1].starts_with("`webchecker_") {
            continue;
        }
        let name = cells[1].trim_matches('`').to_string();
        out.push((name, cells[2].to_string()));
    }
    assert!(
        out.len() >= 20,
        "metrics table of operator-interface.md: {out:?}"
    );
    out
}
