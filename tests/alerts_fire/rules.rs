//! The shipped rules with shorter waits: only the `for:` lines of
//! alerts/webchecker.rules.yaml are rewritten, and the number of the lines
//! marked `# threshold: forSeconds` (an alert that measures its wait in its
//! expression and has no `for:`); a wait of minutes would make the test last
//! as long. Every other byte is the shipped file's, and this module asserts
//! it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_yaml::Value;

use crate::support::repo;

pub const SHIPPED: &str = "alerts/webchecker.rules.yaml";

/// The marker of the line that holds the wait, in seconds, of an alert
/// without `for:`.
const WAIT_MARKER: &str = "# threshold: forSeconds";

/// Every alert of the shipped file and its wait in the test, its `for:` or
/// the number of its [`WAIT_MARKER`] line (None: the shipped rule has
/// neither, it fires at its first evaluation). An alert added to the file
/// fails the test until it is made to fire here.
pub const FOR: &[(&str, Option<u64>)] = &[
    // Its wait is in its expression, from the time Ready turned False.
    ("WebCheckerDown", Some(15)),
    ("WebCheckerSlow", Some(10)),
    ("WebCheckerCertificateExpiring", Some(5)),
    ("WebCheckerNoLeader", Some(5)),
    ("WebCheckerOrphaned", Some(5)),
    ("WebCheckerReplicaMissing", Some(5)),
    ("WebCheckerShardImbalance", Some(5)),
    ("WebCheckerScheduleLagHigh", Some(5)),
    ("WebCheckerReplicaMemoryHigh", Some(5)),
    ("WebCheckerStatusWritesFailing", Some(5)),
    ("WebCheckerSelfFencing", None),
    ("WebCheckerLeaseRenewFailing", Some(5)),
    ("WebCheckerAddressDiscoveryFailing", Some(5)),
    ("WebCheckerProberImpaired", Some(5)),
    ("WebCheckerConfirmCredentialsMissing", Some(5)),
    ("WebCheckerZonesShort", Some(5)),
    ("WebCheckerErrorBudgetBurn", Some(5)),
    ("WebCheckerErrorBudgetBurnSlow", Some(5)),
];

/// The alerts whose wait is in their expression ([`WAIT_MARKER`]): they
/// have no `for:`, so no pending state.
pub const WAIT_IN_EXPRESSION: &[&str] = &["WebCheckerDown"];

/// Whether the alert's wait is in its expression (it fires without going
/// pending first).
pub fn waits_in_expression(alert: &str) -> bool {
    WAIT_IN_EXPRESSION.contains(&alert)
}

/// The test's wait of an alert (zero when it has none).
pub fn for_of(alert: &str) -> Duration {
    let (_, s) = FOR
        .iter()
        .find(|(a, _)| *a == alert)
        .unwrap_or_else(|| panic!("{alert} is not an alert of {SHIPPED}"));
    Duration::from_secs(s.unwrap_or(0))
}

/// Writes the shipped rules with the waits of [`FOR`] into `dir` and
/// returns the file. Panics unless the two files differ in `for:` and
/// [`WAIT_MARKER`] lines only, and every rule's expression (but for that
/// line's number), labels and annotations are the same.
pub fn shortened(dir: &Path) -> PathBuf {
    let shipped = std::fs::read_to_string(repo().join(SHIPPED)).unwrap();
    let text = rewrite(&shipped);
    check(&shipped, &text);
    let file = dir.join("webchecker.rules.yaml");
    std::fs::write(&file, &text).unwrap();
    file
}

/// The `for:` line of each rule (two spaces deeper than its `- alert:`)
/// gets the test's duration, and the [`WAIT_MARKER`] line its seconds;
/// nothing else changes.
fn rewrite(shipped: &str) -> String {
    let mut alert: Option<(String, usize)> = None;
    let mut out = String::new();
    for line in shipped.split_inclusive('\n') {
        let indent = line.len() - line.trim_start().len();
        let body = line.trim();
        if let Some(name) = body.strip_prefix("- alert: ") {
            alert = Some((name.trim().to_string(), indent));
        } else if let Some((name, _)) = &alert
            && body.ends_with(WAIT_MARKER)
        {
            let secs = for_of(name).as_secs();
            assert!(
                secs > 0,
                "{name} has a wait in its expression in {SHIPPED}; give it one in FOR"
            );
            out.push_str(&with_wait(line, secs));
            continue;
        } else if let Some((name, at)) = &alert
            && indent == at + 2
            && body.starts_with("for: ")
        {
            let secs = for_of(name).as_secs();
            assert!(
                secs > 0,
                "{name} has a `for:` in {SHIPPED}; give it one in FOR"
            );
            let end = if line.ends_with('\n') { "\n" } else { "" };
            out.push_str(&format!("{}for: {secs}s{end}", " ".repeat(indent)));
            continue;
        }
        out.push_str(line);
    }
    out
}

/// `line` (a [`WAIT_MARKER`] line: `... >= 120 # threshold: forSeconds`)
/// with `secs` for the number after its comparison.
fn with_wait(line: &str, secs: u64) -> String {
    let (head, tail) = line
        .split_once(WAIT_MARKER)
        .expect("a line with the wait marker");
    let number = head.trim_end();
    let digits = number.len()
        - number
            .chars()
            .rev()
            .take_while(|c| c.is_ascii_digit() || *c == '.')
            .count();
    assert!(
        digits < number.len() && number[..digits].trim_end().ends_with(['=', '<', '>']),
        "no comparison with a number before {WAIT_MARKER}: {line:?}"
    );
    format!(
        "{}{secs}{}{WAIT_MARKER}{tail}",
        &number[..digits],
        &head[number.len()..]
    )
}

/// An expression without its [`WAIT_MARKER`] line.
fn without_wait(expr: &str) -> String {
    expr.lines()
        .filter(|l| !l.trim_end().ends_with(WAIT_MARKER))
        .collect::<Vec<_>>()
        .join("\n")
}

fn rules(text: &str) -> BTreeMap<String, serde_yaml::Mapping> {
    let doc: Value = serde_yaml::from_str(text).expect("the rules file is YAML");
    doc["groups"]
        .as_sequence()
        .expect("groups")
        .iter()
        .flat_map(|g| g["rules"].as_sequence().expect("rules").iter())
        // The recording rules have no `for:` to shorten.
        .filter_map(|r| {
            let name = r["alert"].as_str()?.to_string();
            Some((name, r.as_mapping().unwrap().clone()))
        })
        .collect()
}

fn check(shipped: &str, test: &str) {
    // Line by line: only `for:` and wait lines differ, one per rule that has one.
    let (a, b): (Vec<&str>, Vec<&str>) = (shipped.lines().collect(), test.lines().collect());
    assert_eq!(a.len(), b.len(), "the test's rules file has other lines");
    let changed: Vec<(&str, &str)> = a
        .iter()
        .zip(&b)
        .filter(|(x, y)| x != y)
        .map(|(x, y)| (*x, *y))
        .collect();
    for (x, y) in &changed {
        let for_line = x.trim().starts_with("for: ") && y.trim().starts_with("for: ");
        let wait_line = x.trim_end().ends_with(WAIT_MARKER) && y.trim_end().ends_with(WAIT_MARKER);
        assert!(
            for_line || wait_line,
            "a line other than `for:` or the wait changed: {x:?} -> {y:?}"
        );
    }
    // Rule by rule: the same alerts, expressions, labels and annotations.
    let (orig, new) = (rules(shipped), rules(test));
    let listed: Vec<&str> = FOR.iter().map(|(a, _)| *a).collect();
    let mut names: Vec<&str> = orig.keys().map(String::as_str).collect();
    names.sort();
    let mut want = listed.clone();
    want.sort();
    assert_eq!(
        names, want,
        "the alerts of {SHIPPED} and those this test drives"
    );
    let expr_of = |r: &serde_yaml::Mapping| r["expr"].as_str().unwrap_or_default().to_string();
    let mut waiting: Vec<&str> = orig
        .iter()
        .filter(|(_, r)| {
            expr_of(r)
                .lines()
                .any(|l| l.trim_end().ends_with(WAIT_MARKER))
        })
        .map(|(n, _)| n.as_str())
        .collect();
    waiting.sort();
    let mut want_waiting = WAIT_IN_EXPRESSION.to_vec();
    want_waiting.sort();
    assert_eq!(
        waiting, want_waiting,
        "the alerts of {SHIPPED} with a {WAIT_MARKER:?} line, and WAIT_IN_EXPRESSION"
    );
    let with_for = orig.values().filter(|r| r.contains_key("for")).count();
    assert_eq!(
        changed.len(),
        with_for + waiting.len(),
        "one `for:` line per rule that has one, one wait line per rule that has one"
    );
    for (name, r) in &orig {
        let t = &new[name];
        let (a, b) = (expr_of(r), expr_of(t));
        if waits_in_expression(name) {
            assert!(
                !r.contains_key("for"),
                "{name}: a wait in its expression and a `for:`"
            );
            assert_eq!(
                without_wait(&a).as_bytes(),
                without_wait(&b).as_bytes(),
                "{name}: the expression must be byte-identical to the shipped one but for its wait"
            );
        } else {
            assert_eq!(
                a.as_bytes(),
                b.as_bytes(),
                "{name}: the expression must be byte-identical to the shipped one"
            );
        }
        let strip = |m: &serde_yaml::Mapping| {
            let mut m = m.clone();
            m.remove("for");
            m.remove("expr");
            m
        };
        assert_eq!(
            strip(r),
            strip(t),
            "{name}: only `for` and the wait may differ"
        );
        match FOR.iter().find(|(a, _)| a == name).unwrap().1 {
            Some(s) if waits_in_expression(name) => assert!(
                b.lines()
                    .any(|l| l.trim_end().ends_with(&format!(" {s} {WAIT_MARKER}"))),
                "{name}: its wait is not {s}: {b}"
            ),
            Some(s) => assert_eq!(t["for"].as_str(), Some(format!("{s}s").as_str()), "{name}"),
            None => assert!(
                !r.contains_key("for") && !waits_in_expression(name),
                "{name} has a `for:` or a wait: give it one in FOR"
            ),
        }
    }
}
