//! Part 1 (no cluster): promtool checks and unit-tests the rules, the
//! dashboard linter and generator agree with the committed JSON.

use crate::platform::{run_ok, tool};
use crate::support::{TOOL_LIMIT, bounded, repo};

#[test]
fn promtool_checks_the_alert_rules() {
    let out = run_ok(
        bounded(tool("promtool"), TOOL_LIMIT).args([
            "check",
            "rules",
            "alerts/webchecker.rules.yaml",
        ]),
        "promtool check rules alerts/webchecker.rules.yaml",
    );
    assert!(out.contains("SUCCESS"), "{out}");
}

/// Both test files: the 1m evaluation interval, and 30 s for what needs a
/// finer one (WebCheckerProberImpaired within a 60-second network cut).
#[test]
fn promtool_unit_tests_of_the_alert_rules_pass() {
    let out = run_ok(
        bounded(tool("promtool"), TOOL_LIMIT).args([
            "test",
            "rules",
            "alerts/webchecker.rules.test.yaml",
            "alerts/webchecker.rules.fast.test.yaml",
        ]),
        "promtool test rules alerts/webchecker.rules.test.yaml alerts/webchecker.rules.fast.test.yaml",
    );
    assert_eq!(out.matches("SUCCESS").count(), 2, "{out}");
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
