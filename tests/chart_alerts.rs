//! Alerts a platform team can adapt and the blackbox
//! recording rules (item 6), with the real helm and promtool:
//!
//! - every runbook_url is absolute, in alerts/ and in what the chart renders;
//! - the chart's default PrometheusRule is alerts/webchecker.rules.yaml as it is;
//! - overrides (enabled, severity, for, thresholds, additionalRuleLabels,
//!   runbookBaseUrl, extraRules, blackboxRecordingRules) render the expected
//!   rules, `promtool check rules` accepts them, and `promtool test rules`
//!   shows the changed rules behave as configured (a later `for`, another
//!   severity, a higher threshold), with Debian's promtool 2.42 and that of
//!   Prometheus 3 alike;
//! - `for` of an alert that measures its wait in its expression
//!   (WebCheckerDown, `# threshold: forSeconds`) becomes that threshold, in
//!   seconds; a `for` that is no Prometheus duration fails the rendering;
//! - unknown alert or threshold names fail the rendering, naming what exists.

use webchecker_kit as support;
use webchecker_kit::platform;

use std::collections::BTreeMap;

use platform::*;
use serde_yaml::Value;
use support::repo;

const SOURCE: &str = "alerts/webchecker.rules.yaml";
const DEFAULT_BASE: &str = "https://webchecker-operator.example/docs/runbooks.md";

fn source() -> Value {
    serde_yaml::from_str(&std::fs::read_to_string(repo().join(SOURCE)).unwrap()).unwrap()
}

/// The PrometheusRule's groups rendered with these values (prometheusRule on).
fn rendered_groups(values: &str) -> Value {
    let docs = render_values(&format!("prometheusRule:\n  enabled: true\n{values}"));
    let rules = of_kind(&docs, "PrometheusRule");
    assert_eq!(rules.len(), 1, "one PrometheusRule");
    rules[0]["spec"]["groups"].clone()
}

/// alert (or record) name -> rule.
fn rules_by_name(groups: &Value) -> BTreeMap<String, Value> {
    groups
        .as_sequence()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_sequence().unwrap().iter())
        .map(|r| {
            let name = r["alert"].as_str().or(r["record"].as_str()).unwrap();
            (name.to_string(), r.clone())
        })
        .collect()
}

fn str_of<'a>(v: &'a Value, what: &str) -> &'a str {
    v.as_str()
        .unwrap_or_else(|| panic!("{what} is not a string: {v:?}"))
}

/// An expression without its lines marked `# threshold:`.
fn unmark(expr: &str) -> String {
    expr.lines()
        .filter(|l| !l.contains("# threshold:"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Runs `promtool ARGS` of Debian's Prometheus 2.42 and of Prometheus 3
/// (hack/build-prometheus.sh); each must succeed and print SUCCESS.
fn promtool_passes(args: &[&str]) {
    for v in PromVersion::ALL {
        let (ok, out) = run(std::process::Command::new(v.program("promtool")).args(args));
        assert!(
            ok && out.contains("SUCCESS"),
            "promtool {args:?} ({}):\n{out}",
            v.name()
        );
    }
}

/// Writes `{groups: ...}` as a rules file; `promtool check rules` must pass.
fn promtool_check(dir: &std::path::Path, groups: &Value) -> std::path::PathBuf {
    let file = dir.join("rendered.rules.yaml");
    let mut doc = serde_yaml::Mapping::new();
    doc.insert("groups".into(), groups.clone());
    std::fs::write(&file, serde_yaml::to_string(&doc).unwrap()).unwrap();
    promtool_passes(&["check", "rules", file.to_str().unwrap()]);
    file
}

#[test]
fn every_runbook_url_is_absolute_and_names_its_alert() {
    let check = |groups: &Value, base: &str, what: &str| {
        let rules = rules_by_name(groups);
        let alerts: Vec<_> = rules
            .iter()
            .filter(|(_, r)| r["alert"].is_string())
            .collect();
        assert!(alerts.len() >= 12, "{what}: {} alerts", alerts.len());
        for (name, r) in alerts {
            let url = str_of(&r["annotations"]["runbook_url"], name);
            assert_eq!(
                url,
                format!("{base}#{}", name.to_lowercase()),
                "{what}: runbook_url of {name}"
            );
        }
    };
    check(&source()["groups"], DEFAULT_BASE, SOURCE);
    check(&rendered_groups(""), DEFAULT_BASE, "chart defaults");
    let base = "https://git.example.org/platform/webchecker/-/blob/v0.1.0/docs/runbooks.md";
    check(
        &rendered_groups(&format!("  runbookBaseUrl: {base}\n")),
        base,
        "chart with runbookBaseUrl",
    );
    // Every anchor exists in docs/runbooks.md (a heading per alert; the
    // recording rules have none).
    let runbooks = std::fs::read_to_string(repo().join("docs/runbooks.md")).unwrap();
    let rules = rules_by_name(&source()["groups"]);
    for name in rules
        .iter()
        .filter(|(_, r)| !r["alert"].is_null())
        .map(|(n, _)| n)
    {
        assert!(
            runbooks
                .lines()
                .any(|l| l.starts_with('#') && l.trim_start_matches('#').trim() == name.as_str()),
            "docs/runbooks.md has no heading {name}"
        );
    }
}

#[test]
fn default_values_render_the_source_rules_unchanged() {
    assert_eq!(rendered_groups(""), source()["groups"]);
}

const OVERRIDES: &str = r#"
  runbookBaseUrl: https://wiki.example.org/webchecker/runbooks
  additionalRuleLabels:
    team: platform
    severity: ignored
  alerts:
    WebCheckerDown:
      severity: critical
      for: 5m
      additionalRuleLabels:
        team: web
        pager: "true"
    WebCheckerSlow:
      thresholds:
        p90LatencySeconds: 1.5
        slowResponseRatio: 0.5
    WebCheckerCertificateExpiring:
      severity: info
      thresholds:
        days: 30
    WebCheckerShardImbalance:
      enabled: false
    WebCheckerLeaseRenewFailing:
      for: 0s
      thresholds:
        failures: 20
  blackboxRecordingRules: true
  extraRules:
    - alert: ShopCheckersDown
      expr: sum(max by (namespace, name) (webchecker_up{namespace="shop"}) == 0) > 3
      for: 1m
      labels:
        severity: critical
      annotations:
        summary: More than 3 shop checkers are down
    - record: namespace:webchecker_up:sum
      expr: sum by (namespace) (max by (namespace, name) (webchecker_up))
"#;

#[test]
fn overrides_render_the_expected_rules_and_promtool_accepts_them() {
    let groups = rendered_groups(OVERRIDES);
    let rules = rules_by_name(&groups);
    let src = rules_by_name(&source()["groups"]);
    the_rules_and_groups_as_configured(&groups, &rules, &src);
    labels_and_runbook_urls_as_configured(&rules, &src);
    thresholds_change_their_lines_only(&rules, &src);

    let dir = scratch("chart-alerts-");
    promtool_check(dir.path(), &groups);
}

fn the_rules_and_groups_as_configured(
    groups: &Value,
    rules: &BTreeMap<String, Value>,
    src: &BTreeMap<String, Value>,
) {
    // Disabled alerts are gone; the others are all there, plus the extras and
    // the blackbox recording rules.
    assert!(!rules.contains_key("WebCheckerShardImbalance"));
    for name in src.keys().filter(|n| *n != "WebCheckerShardImbalance") {
        assert!(rules.contains_key(name), "{name} missing");
    }
    for name in [
        "ShopCheckersDown",
        "namespace:webchecker_up:sum",
        "probe_success",
        "probe_http_status_code",
        "probe_duration_seconds",
        "probe_ssl_earliest_cert_expiry",
    ] {
        assert!(rules.contains_key(name), "{name} missing");
    }
    let group_names: Vec<&str> = groups
        .as_sequence()
        .unwrap()
        .iter()
        .map(|g| str_of(&g["name"], "group name"))
        .collect();
    assert_eq!(
        group_names,
        [
            "webchecker.checkers",
            "webchecker.operator",
            "webchecker.slo",
            "webchecker.blackbox",
            "webchecker.extra"
        ]
    );
}

fn labels_and_runbook_urls_as_configured(
    rules: &BTreeMap<String, Value>,
    src: &BTreeMap<String, Value>,
) {
    // WebCheckerDown: its `for` is the wait in its expression, in seconds;
    // the checker's label still chooses; the default is critical.
    let down = &rules["WebCheckerDown"];
    assert!(down["for"].is_null(), "{down:?}");
    let expr = str_of(&down["expr"], "expr");
    assert!(expr.contains(">= 300 # threshold: forSeconds"), "{expr}");
    assert_eq!(
        unmark(expr),
        unmark(str_of(&src["WebCheckerDown"]["expr"], "expr"))
    );
    assert_eq!(
        down["labels"]["severity"].as_str(),
        Some(r#"{{ or $labels.label_severity "critical" }}"#)
    );
    assert_eq!(
        down["labels"]["team"].as_str(),
        Some("web"),
        "per-alert wins"
    );
    assert_eq!(down["labels"]["pager"].as_str(), Some("true"));
    // Chart-wide labels reach every alert, but never replace its own.
    for (name, r) in rules.iter().filter(|(_, r)| r["alert"].is_string()) {
        if src.contains_key(name) {
            assert_ne!(r["labels"]["severity"].as_str(), Some("ignored"), "{name}");
            assert!(r["labels"]["team"].is_string(), "{name}: no team label");
            assert_eq!(
                str_of(&r["annotations"]["runbook_url"], name),
                format!(
                    "https://wiki.example.org/webchecker/runbooks#{}",
                    name.to_lowercase()
                )
            );
        }
    }
    assert_eq!(
        rules["WebCheckerSlow"]["labels"]["team"].as_str(),
        Some("platform")
    );
}

fn thresholds_change_their_lines_only(
    rules: &BTreeMap<String, Value>,
    src: &BTreeMap<String, Value>,
) {
    // Thresholds: the marked line's number, and the annotation's mention of it.
    let slow = &rules["WebCheckerSlow"];
    let expr = str_of(&slow["expr"], "expr");
    assert!(
        expr.contains("> 1.5, # threshold: p90LatencySeconds"),
        "{expr}"
    );
    assert!(
        expr.contains("> 0.5, # threshold: slowResponseRatio"),
        "{expr}"
    );
    let description = str_of(&slow["annotations"]["description"], "description");
    assert!(description.contains("(threshold 1.5s)"), "{description}");
    assert!(!description.contains("threshold 0.5"), "{description}");
    // Nothing else of the expression changed.
    assert_eq!(
        unmark(expr),
        unmark(str_of(&src["WebCheckerSlow"]["expr"], "expr"))
    );
    let cert = &rules["WebCheckerCertificateExpiring"];
    assert!(str_of(&cert["expr"], "expr").contains("< 30 * 86400 # threshold: days"));
    assert_eq!(cert["labels"]["severity"].as_str(), Some("info"));
    let lease = &rules["WebCheckerLeaseRenewFailing"];
    assert!(str_of(&lease["expr"], "expr").contains("> 20 # threshold: failures"));
    assert_eq!(lease["for"].as_str(), Some("0s"));
    // Untouched alerts are exactly the source's, but for the added label and URL.
    let mut orphaned = rules["WebCheckerOrphaned"].clone();
    orphaned["labels"].as_mapping_mut().unwrap().remove("team");
    orphaned["annotations"]["runbook_url"] =
        src["WebCheckerOrphaned"]["annotations"]["runbook_url"].clone();
    assert_eq!(orphaned, src["WebCheckerOrphaned"]);
}

/// The rendered rules behave as configured: promtool's unit tests on them.
#[test]
fn overridden_rules_fire_as_configured() {
    let dir = scratch("chart-alerts-");
    let rules_file = promtool_check(dir.path(), &rendered_groups(OVERRIDES));
    let base = "https://wiki.example.org/webchecker/runbooks";
    let down_annotations = |n: &str| {
        format!(
            r#"            exp_annotations:
              summary: WebChecker shop/{n} is down
              description: 'The endpoint probed by WebChecker shop/{n} is not Ready. Most frequent failure reason over the last 10 minutes: none recorded. See `kubectl -n shop describe wc {n}`.'
              runbook_url: {base}#webcheckerdown
"#
        )
    };
    let test = format!(
        r#"rule_files:
  - {rules}
evaluation_interval: 1m
tests:
  - name: WebCheckerDown waits 5m from Ready turning False, is critical by default, the checker's label still chooses
    interval: 1m
    input_series:
      - series: 'webchecker_up{{job="wc", instance="a:8080", namespace="shop", name="api"}}'
        values: '0x10'
      - series: 'webchecker_down_since_timestamp_seconds{{job="wc", instance="a:8080", namespace="shop", name="api"}}'
        values: '0x10'
      - series: 'webchecker_up{{job="wc", instance="a:8080", namespace="shop", name="blog"}}'
        values: '0x10'
      - series: 'webchecker_down_since_timestamp_seconds{{job="wc", instance="a:8080", namespace="shop", name="blog"}}'
        values: '0x10'
      - series: 'webchecker_checker_info{{job="wc", instance="a:8080", namespace="shop", name="blog", url="https://blog.example.com/", host="blog.example.com", label_severity="info"}}'
        values: '1x10'
    alert_rule_test:
      - eval_time: 4m
        alertname: WebCheckerDown
        exp_alerts: []
      - eval_time: 5m
        alertname: WebCheckerDown
        exp_alerts:
          - exp_labels: {{severity: critical, namespace: shop, name: api, team: web, pager: "true"}}
{api}          - exp_labels: {{severity: info, label_severity: info, namespace: shop, name: blog, team: web, pager: "true"}}
{blog}
  - name: WebCheckerSlow keeps quiet under its raised thresholds
    interval: 1m
    input_series:
      # p90 0.95s and 30% SlowResponse: both fire with the defaults (0.5s, 10%).
      - series: 'webchecker_probe_duration_seconds_bucket{{job="wc", instance="a:8080", namespace="shop", name="slow", le="0.5"}}'
        values: '0x20'
      - series: 'webchecker_probe_duration_seconds_bucket{{job="wc", instance="a:8080", namespace="shop", name="slow", le="1"}}'
        values: '0+10x20'
      - series: 'webchecker_probe_duration_seconds_bucket{{job="wc", instance="a:8080", namespace="shop", name="slow", le="+Inf"}}'
        values: '0+10x20'
      - series: 'webchecker_probes_total{{job="wc", instance="a:8080", namespace="shop", name="slow", result="failure", reason="SlowResponse"}}'
        values: '0+3x20'
      - series: 'webchecker_probes_total{{job="wc", instance="a:8080", namespace="shop", name="slow", result="success", reason="ProbeSucceeded"}}'
        values: '0+7x20'
    alert_rule_test:
      - eval_time: 20m
        alertname: WebCheckerSlow
        exp_alerts: []
"#,
        rules = rules_file.display(),
        api = down_annotations("api"),
        blog = down_annotations("blog"),
    );
    let test_file = dir.path().join("rendered.rules.test.yaml");
    std::fs::write(&test_file, test).unwrap();
    promtool_passes(&["test", "rules", test_file.to_str().unwrap()]);
}

#[test]
fn unknown_alerts_and_thresholds_fail_naming_what_exists() {
    let out = render_fails(
        "prometheusRule:\n  enabled: true\n  alerts:\n    WebCheckerDwn: {enabled: false}\n",
    );
    assert!(
        out.contains("prometheusRule.alerts.WebCheckerDwn: files/alerts.yaml has no such alert")
            && out.contains("WebCheckerDown"),
        "{out}"
    );
    let out = render_fails(
        "prometheusRule:\n  enabled: true\n  alerts:\n    WebCheckerSlow: {thresholds: {p99: 1}}\n",
    );
    assert!(
        out.contains("prometheusRule.alerts.WebCheckerSlow.thresholds.p99: WebCheckerSlow has no such threshold (it has: p90LatencySeconds, slowResponseRatio)"),
        "{out}"
    );
    let out = render_fails(
        "prometheusRule:\n  enabled: true\n  alerts:\n    WebCheckerDown: {thresholds: {x: 1}}\n",
    );
    assert!(out.contains("(it has: forSeconds)"), "{out}");
    let out = render_fails(
        "prometheusRule:\n  enabled: true\n  alerts:\n    WebCheckerOrphaned: {thresholds: {x: 1}}\n",
    );
    assert!(out.contains("(it has: none)"), "{out}");
    let out = render_fails(
        "prometheusRule:\n  enabled: true\n  alerts:\n    WebCheckerDown: {for: 5 minutes}\n",
    );
    assert!(
        out.contains("/prometheusRule/alerts/WebCheckerDown/for"),
        "{out}"
    );
    let out =
        render_fails("prometheusRule:\n  enabled: true\n  runbookBaseUrl: docs/runbooks.md\n");
    assert!(out.contains("/prometheusRule/runbookBaseUrl"), "{out}");
}

/// `for` of WebCheckerDown (`# threshold: forSeconds`) is written into that
/// threshold in seconds, and the rule gets no `for`; other alerts keep
/// theirs as a rule `for`.
#[test]
fn for_of_an_alert_waiting_in_its_expression_becomes_its_threshold() {
    let dir = scratch("chart-alerts-");
    for (dur, secs) in [
        ("90s", "90"),
        ("5m", "300"),
        ("1h30m", "5400"),
        ("1500ms", "1.5"),
    ] {
        let groups = rendered_groups(&format!(
            "  alerts:\n    WebCheckerDown: {{for: {dur}}}\n    WebCheckerSlow: {{for: {dur}}}\n"
        ));
        let rules = rules_by_name(&groups);
        let down = &rules["WebCheckerDown"];
        assert!(down["for"].is_null(), "{dur}: {down:?}");
        let expr = str_of(&down["expr"], "expr");
        assert!(
            expr.contains(&format!(">= {secs} # threshold: forSeconds")),
            "{dur}: {expr}"
        );
        assert_eq!(rules["WebCheckerSlow"]["for"].as_str(), Some(dur));
        if dur == "90s" {
            promtool_check(dir.path(), &groups);
        }
    }
}

/// `helm template` (schema validation off: the template's own check) with
/// these prometheusRule values, which must fail; its output.
fn template_fails_without_schema(dir: &std::path::Path, values: &str) -> String {
    let file = dir.join("values.yaml");
    std::fs::write(&file, format!("prometheusRule:\n  enabled: true\n{values}")).unwrap();
    let (ok, out) = template(&[
        "--skip-tests",
        "--skip-schema-validation",
        "-f",
        file.to_str().unwrap(),
    ]);
    assert!(!ok, "helm template with\n{values}\nsucceeded");
    out
}

#[test]
fn a_for_that_is_no_prometheus_duration_fails_with_its_name() {
    // Units out of order pass the schema's pattern; the template refuses them.
    let out = render_fails(
        "prometheusRule:\n  enabled: true\n  alerts:\n    WebCheckerDown: {for: 30s1m}\n",
    );
    assert!(
        out.contains(
            r#"prometheusRule.alerts.WebCheckerDown.for: "30s1m" is not a Prometheus duration (such as 30s, 5m, 1h30m)"#
        ),
        "{out}"
    );
    let dir = scratch("chart-alerts-");
    for bad in ["5 minutes", "90", "1.5m"] {
        let out = template_fails_without_schema(
            dir.path(),
            &format!("  alerts:\n    WebCheckerDown: {{for: \"{bad}\"}}\n"),
        );
        assert!(
            out.contains(&format!(
                "prometheusRule.alerts.WebCheckerDown.for: {bad:?} is not a Prometheus duration"
            )),
            "{bad}: {out}"
        );
    }
    let out = render_fails(
        "prometheusRule:\n  enabled: true\n  alerts:\n    WebCheckerDown: {for: 1m, thresholds: {forSeconds: 60}}\n",
    );
    assert!(
        out.contains(
            "prometheusRule.alerts.WebCheckerDown: set for or thresholds.forSeconds, not both"
        ),
        "{out}"
    );
}

#[test]
fn blackbox_rules_pass_promtool_and_the_chart_ships_them_unchanged() {
    for args in [
        ["check", "rules", "alerts/blackbox.rules.yaml"],
        ["test", "rules", "alerts/blackbox.rules.test.yaml"],
    ] {
        promtool_passes(&args);
    }
    let source = std::fs::read(repo().join("alerts/blackbox.rules.yaml")).unwrap();
    let copy = std::fs::read(repo().join(CHART).join("files/blackbox.rules.yaml"))
        .expect("the chart's files/blackbox.rules.yaml (make chart-sync)");
    assert!(
        source == copy,
        "run `make chart-sync`: files/blackbox.rules.yaml differs"
    );
    let bb: Value = serde_yaml::from_slice(&source).unwrap();
    let groups = rendered_groups("  blackboxRecordingRules: true\n");
    let seq = groups.as_sequence().unwrap();
    assert_eq!(seq.last(), bb["groups"].as_sequence().unwrap().last());
    assert!(
        !rules_by_name(&rendered_groups("")).contains_key("probe_success"),
        "off by default"
    );
}
