//! Part 1 (no cluster): promtool checks and unit-tests the rules (Debian's
//! promtool 2.42 and that of Prometheus 3), the
//! dashboard linter and generator agree with the committed JSON.

use crate::platform::{PromVersion, run_ok, tool};
use crate::support::{TOOL_LIMIT, bounded, repo};

fn check_rules(v: PromVersion) {
    let out = run_ok(
        bounded(v.program("promtool"), TOOL_LIMIT).args([
            "check",
            "rules",
            "alerts/webchecker.rules.yaml",
        ]),
        &format!(
            "promtool check rules alerts/webchecker.rules.yaml ({})",
            v.name()
        ),
    );
    assert!(out.contains("SUCCESS"), "{out}");
}

/// Both test files: the 1m evaluation interval, and 30 s for what needs a
/// finer one (WebCheckerProberImpaired within a 60-second network cut).
fn unit_tests(v: PromVersion) {
    let out = run_ok(
        bounded(v.program("promtool"), TOOL_LIMIT).args([
            "test",
            "rules",
            "alerts/webchecker.rules.test.yaml",
            "alerts/webchecker.rules.fast.test.yaml",
        ]),
        &format!(
            "promtool test rules alerts/webchecker.rules.test.yaml \
             alerts/webchecker.rules.fast.test.yaml ({})",
            v.name()
        ),
    );
    assert_eq!(out.matches("SUCCESS").count(), 2, "{out}");
}

#[test]
fn promtool_checks_the_alert_rules() {
    check_rules(PromVersion::Debian);
}

#[test]
fn promtool_unit_tests_of_the_alert_rules_pass() {
    unit_tests(PromVersion::Debian);
}

/// The same with the promtool of Prometheus 3 (hack/build-prometheus.sh).
#[test]
fn prometheus_3_promtool_checks_the_alert_rules() {
    check_rules(PromVersion::V3);
}

/// Prometheus 3's range selectors leave out a sample at the very start of
/// the range (Prometheus 2 includes it): the unit tests' samples are 30 s or
/// 15 s apart, so that a 1m window holds the same samples for both where it
/// matters.
#[test]
fn prometheus_3_promtool_unit_tests_of_the_alert_rules_pass() {
    unit_tests(PromVersion::V3);
}

#[test]
fn dashboards_pass_the_linter() {
    run_ok(
        bounded(tool("python3"), TOOL_LIMIT).arg("hack/lint-dashboards.py"),
        "python3 hack/lint-dashboards.py",
    );
}

#[test]
fn dashboards_match_their_generator() {
    let script = repo().join("dashboards/generate.py");
    if !script.exists() {
        // The dashboards are then hand-written JSON: nothing to compare with.
        eprintln!("dashboards/generate.py does not exist: no generator to compare with");
        return;
    }
    run_ok(
        bounded(tool("python3"), TOOL_LIMIT).args(["dashboards/generate.py", "--check"]),
        "python3 dashboards/generate.py --check",
    );
}
