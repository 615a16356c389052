//! Acceptance of the observability issue: the dashboards and alert rules are
//! valid, and they work against the metrics a real fleet exports.
//!
//! Part 1 (no cluster, rules.rs): promtool checks and unit-tests the rules,
//! the dashboard linter and generator agree with the committed JSON.
//!
//! Part 2 (end to end, scenario.rs): three operator replicas, then a fourth
//! (scale-out: checkers move through drains), witness targets, and a real
//! Prometheus (the `prometheus` binary) scraping every replica each second
//! with the alert rules loaded. Then every PromQL expression of the
//! dashboards and rules (hack/extract-promql.py) is evaluated through
//! Prometheus' HTTP API (with Grafana's "All" for every variable; this
//! Prometheus has no cluster label), the checker dashboard for one failing
//! and one moved checker, the panels and the alerts of the failing checkers
//! are checked, the probe counters are compared with what the witness saw,
//! and the catalogue of metrics with what the fleet exports.

mod alerts;
mod catalogue;
mod checker_dashboard;
mod counts;
mod expressions;
mod panels;
use webchecker_kit::platform;
use webchecker_kit::prom;
mod rules;
mod scenario;
use webchecker_kit as support;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_sees_a_scaled_out_fleet_through_the_dashboards_and_alerts() {
    let run = scenario::Run::start().await;
    // (a) every expression, and the panels.
    let exprs = expressions::every_expression_has_data(&run).await;
    expressions::uptime_counts_a_moved_checker_once(&run, &exprs).await;
    panels::rules_evaluate_without_error(&run).await;
    panels::panels_match_the_scenario(&run).await;
    checker_dashboard::checker_dashboard_follows_one_checker(&run).await;
    // (c) the alerts.
    alerts::failing_checkers_alert_and_healthy_ones_do_not(&run).await;
    // (b) the probe counters, and the catalogue of what the fleet exports.
    let texts = counts::probe_counts_match_the_witness(&run).await;
    catalogue::every_contract_metric_is_exported(&texts);
    println!("end-to-end test took {:?}", run.started.elapsed());
}
