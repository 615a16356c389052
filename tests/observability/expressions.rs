//! (a) Every PromQL expression of the dashboards and rules
//! (hack/extract-promql.py) evaluates through Prometheus' HTTP API and returns
//! data, unless it is known to need a condition the scenario does not create;
//! the uptime stat counts a moved checker once.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::platform::{run_ok, tool};
use crate::prom::{Prometheus, labels, num, samples, single};
use crate::scenario::{Run, now_unix};
use crate::support::{TOOL_LIMIT, bounded};

/// Expressions allowed to return nothing (no sample, or only NaN) at the end of
/// the end-to-end scenario, and why: each needs a condition the healthy
/// scenario does not create. Matched as substrings of the `source` printed by
/// hack/extract-promql.py. Every other expression must return at least one
/// sample that is not NaN: a new expression has to be classified here.
const MAY_BE_EMPTY: &[(&str, &str)] = &[
    (
        ":Certificates expiring within 30 days/",
        "certificate expiry exists for https checkers only; the witness targets are plain http \
         (and a real certificate would rarely expire within 30 days)",
    ),
    (
        ":Certificate expires in/",
        "certificate expiry exists for https checkers only; the witness targets are plain http",
    ),
    (
        ":Certificate days left/",
        "certificate expiry exists for https checkers only; the witness targets are plain http",
    ),
    (
        ":Certificate chain/",
        "webchecker_certificate_info exists for https checkers only; the witness targets are plain http",
    ),
    (
        ":Watch restarts/",
        "webchecker_watch_restarts_total gets a series on the first watch error or relist; \
         a healthy run has none",
    ),
    (
        ":Unconfirmed failures by replica and zone/",
        "webchecker_unconfirmed_failures_total gets a series with the first failure another \
         replica refutes; every replica of the scenario reaches the witness",
    ),
    (
        ":Zone results/",
        "webchecker_zone_probe_success exists for checkers with spec.locations only; the \
         scenario has none (tests/confirmation/zones.rs covers the zone series)",
    ),
    (
        ":Zone probe duration/",
        "webchecker_zone_probe_duration_seconds exists for checkers with spec.locations only; \
         the scenario has none",
    ),
    (
        ":Zone failures per second/",
        "webchecker_zone_probes_total exists for checkers with spec.locations only; the \
         scenario has none",
    ),
    (
        "alert=WebCheckerCertificateExpiring",
        "no https checker (and it needs a certificate expiring within 14 days)",
    ),
    (
        "record=probe_ssl_earliest_cert_expiry",
        "blackbox name of the certificate expiry: https checkers only, the witness targets are \
         plain http",
    ),
    (
        "record=probe_tls_version_info",
        "blackbox name of webchecker_tls_info: https checkers only",
    ),
    (
        "record=probe_grpc_",
        "blackbox names of the gRPC health series: grpc:// checkers only, the witness targets \
         are http (tests/probe/e2e_kinds.rs reads the series, a promtool test the rules)",
    ),
    (
        "alert=WebCheckerNoLeader",
        "needs a fault: no replica holding the leader Lease, or no replica scraped",
    ),
    (
        "alert=WebCheckerOrphaned",
        "needs a fault: checkers nobody serves for longer than a lease (a sharder that cannot assign or prove)",
    ),
    (
        "alert=WebCheckerReplicaMissing",
        "needs a fault: a scrape target down, or a Lease holder that is not scraped",
    ),
    (
        "alert=WebCheckerShardImbalance",
        "needs at least 100 checkers and a shard above 1.2x the average; the test runs 44 \
         checkers, balanced by the sharder",
    ),
    (
        "alert=WebCheckerScheduleLagHigh",
        "needs an overloaded replica (p99 schedule lag above 500ms)",
    ),
    (
        "alert=WebCheckerReplicaMemoryHigh",
        "needs a replica above 85% of its memory limit; the scenario's limit is 1 GiB",
    ),
    (
        "alert=WebCheckerStatusWritesFailing",
        "needs more than 10% of a replica's status writes to fail (error or conflict)",
    ),
    (
        "alert=WebCheckerSelfFencing",
        "needs a fault: a replica that lost its Lease or was paused",
    ),
    (
        "alert=WebCheckerLeaseRenewFailing",
        "needs a fault: Lease renewals failing (API server unreachable or Lease lost)",
    ),
    (
        "alert=WebCheckerZonesShort",
        "webchecker_zones_asked exists for checkers with spec.locations only; the scenario has \
         none (tests/alerts_fire/confirm.rs makes it fire)",
    ),
    (
        "alert=WebCheckerProberImpaired",
        "needs a replica whose probes fail where another replica's succeed (a network fault \
         of one replica's path to the targets)",
    ),
    (
        "alert=WebCheckerConfirmCredentialsMissing",
        "needs a replica that may not request tokens for its ServiceAccount; \
         tests/alerts_fire/replica.rs makes it fire",
    ),
    (
        "alert=WebCheckerAddressDiscoveryFailing",
        "needs a replica that cannot list a source of the forgery guard (tests/egress/main.rs \
         shows the metric at 0 without permission on Nodes)",
    ),
];

fn may_be_empty(source: &str) -> Option<&'static str> {
    MAY_BE_EMPTY
        .iter()
        .find(|(pat, _)| source.contains(pat))
        .map(|(_, why)| *why)
}

/// The expressions hack/extract-promql.py prints for `args`, as (source,
/// expression).
pub fn extract(args: &[&str]) -> Vec<(String, String)> {
    let out = run_ok(
        bounded(tool("python3"), TOOL_LIMIT)
            .arg("hack/extract-promql.py")
            .args(args),
        &format!("python3 hack/extract-promql.py {}", args.join(" ")),
    );
    out.lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            (
                v["source"].as_str().unwrap().to_string(),
                v["expr"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// Evaluates every expression on both Prometheus versions of the run (the
/// scenario's and the other one: Debian's 2.42 and 3.x); returns them as
/// (source, expression). The dashboard variables are what Grafana sends for
/// "All" (their allValue): `$cluster` is `.*`, and these Prometheus have no
/// cluster label at all (checked), so the expressions that have data here
/// prove that the cluster variable does not hide series without the label.
pub async fn every_expression_has_data(run: &Run) -> Vec<(String, String)> {
    // As loaded (scenario.rs): WebCheckerDown without its two minutes.
    let exprs: Vec<(String, String)> = extract(&[])
        .into_iter()
        .map(|(source, e)| (source, crate::prom::with_down_wait(&e, 0)))
        .collect();
    assert!(
        exprs.len() > 50,
        "extract-promql printed {} expressions",
        exprs.len()
    );
    let mut failures = Vec::new();
    for prom in [&run.prom, &run.prom_other] {
        for f in evaluate_all(prom, &exprs).await {
            failures.push(format!("{}: {f}", prom.version.name()));
        }
    }
    assert!(
        failures.is_empty(),
        "{} expression(s) failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
    for prom in [&run.prom, &run.prom_other] {
        no_cluster_label(run, prom).await;
    }
    exprs
}

/// Evaluates every expression on `prom`: the failures (an error, or no data
/// where MAY_BE_EMPTY does not allow it).
async fn evaluate_all(prom: &Prometheus, exprs: &[(String, String)]) -> Vec<String> {
    let mut failures = Vec::new();
    let mut empty_allowed = Vec::new();
    let mut with_data = 0;
    for (source, expr) in exprs {
        let v = prom.query_at(expr, None).await;
        if v["status"] != "success" {
            failures.push(format!(
                "{source}: {} {}\n    {expr}",
                v["errorType"], v["error"]
            ));
            continue;
        }
        let data = &v["data"];
        let values: Vec<f64> = match data["resultType"].as_str() {
            Some("vector") | Some("scalar") => samples(data).into_iter().map(|(_, x)| x).collect(),
            Some("matrix") => vec![0.0; data["result"].as_array().unwrap().len()],
            _ => Vec::new(),
        };
        let has_data = values.iter().any(|x| !x.is_nan());
        match (has_data, may_be_empty(source)) {
            (true, _) => with_data += 1,
            (false, Some(why)) => empty_allowed.push(format!("{source}: {why}")),
            (false, None) => failures.push(format!(
                "{source}: no data ({} samples, all NaN or none)\n    {expr}",
                values.len()
            )),
        }
    }
    println!(
        "expressions on {}: {} evaluated, {with_data} with data, {} empty (allowed), {} failed:",
        prom.version.name(),
        exprs.len(),
        empty_allowed.len(),
        failures.len()
    );
    for e in &empty_allowed {
        println!("  empty: {e}");
    }
    failures
}

/// `prom` has no `cluster` label (no external labels, no relabelling), and a
/// selector `cluster=~".*"` matches its series while `cluster=~".+"` (a
/// cluster variable whose All would be .+) matches none.
async fn no_cluster_label(run: &Run, prom: &Prometheus) {
    let labelled = prom
        .samples("count({__name__=~\"webchecker_.+\", cluster!=\"\"})")
        .await;
    assert!(
        labelled.is_empty(),
        "{}: series with a cluster label: {labelled:?}",
        prom.version.name()
    );
    let count = |m: &'static str| {
        let sel = run.sel();
        async move {
            prom.samples(&format!(
                "count(max by (namespace, name) (webchecker_up{{{sel}, cluster=~\"{m}\"}}))"
            ))
            .await
            .first()
            .map(|(_, v)| *v)
            .unwrap_or(0.0)
        }
    };
    let name = prom.version.name();
    assert_eq!(
        count(".*").await,
        run.total() as f64,
        "{name}: cluster=~\".*\""
    );
    assert_eq!(count(".+").await, 0.0, "{name}: cluster=~\".+\"");
}

/// "Uptime over the range" is the mean over checkers of each checker's
/// fraction of Ready samples, the samples of all its owners together: a
/// moved checker counts once, not once per owner.
pub async fn uptime_counts_a_moved_checker_once(run: &Run, exprs: &[(String, String)]) {
    for prom in [&run.prom, &run.prom_other] {
        uptime_on(run, prom, exprs).await;
    }
}

async fn uptime_on(run: &Run, prom: &Prometheus, exprs: &[(String, String)]) {
    let uptime = &exprs
        .iter()
        .find(|(s, _)| {
            s.starts_with("dashboards/fleet-overview.json#")
                && s.contains(":Uptime over the range/")
        })
        .expect("the uptime stat")
        .1;
    let at = now_unix();
    let (panel, raw) = prom
        .query_pair_at(uptime, &format!("webchecker_up{{{}}}[1h]", run.sel()), at)
        .await;
    let panel = single(&samples(&panel["data"]), "uptime");
    let mut per_checker: BTreeMap<String, (f64, f64)> = BTreeMap::new();
    let mut per_series = Vec::new();
    for s in raw["data"]["result"].as_array().unwrap() {
        let vals: Vec<f64> = s["values"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| num(&v[1]))
            .collect();
        let e = per_checker
            .entry(labels(&s["metric"])["name"].clone())
            .or_default();
        e.0 += vals.iter().sum::<f64>();
        e.1 += vals.len() as f64;
        per_series.push(vals.iter().sum::<f64>() / vals.len() as f64);
    }
    let total = run.total();
    assert_eq!(per_checker.len(), total);
    let want = per_checker.values().map(|(s, c)| s / c).sum::<f64>() / total as f64;
    let by_series = per_series.iter().sum::<f64>() / per_series.len() as f64;
    println!(
        "{}: uptime stat {panel:.4}: per checker {want:.4} (an average per series would say {by_series:.4} over {} series)",
        prom.version.name(),
        per_series.len()
    );
    assert!(
        (panel - want).abs() < 1e-9,
        "{}: uptime stat {panel} vs per-checker uptime {want}",
        prom.version.name()
    );
}
