//! The shipped rules with shorter `for:` durations: only the `for:` lines of
//! alerts/webchecker.rules.yaml are rewritten (a `for` of minutes would make
//! the test last as long); every other byte, the expressions included, is the
//! shipped file's, and this module asserts it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_yaml::Value;

use crate::support::repo;

pub const SHIPPED: &str = "alerts/webchecker.rules.yaml";

/// Every alert of the shipped file and its `for:` in the test (None: the
/// shipped rule has no `for:`, it fires at its first evaluation). An alert
/// added to the file fails the test until it is made to fire here.
pub const FOR: &[(&str, Option<u64>)] = &[
    // Longer than a fresh checker's first probe takes to make it Ready.
    ("WebCheckerDown", Some(15)),
    ("WebCheckerSlow", Some(10)),
    ("WebCheckerCertificateExpiring", Some(5)),
    ("WebCheckerNoLeader", Some(5)),
    ("WebCheckerOrphaned", Some(5)),
    ("WebCheckerReplicaMissing", Some(5)),
    ("WebCheckerShardImbalance", Some(5)),
    ("WebCheckerScheduleLagHigh", Some(5)),
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

/// The test's `for:` of an alert (zero when it has none).
pub fn for_of(alert: &str) -> Duration {
    let (_, s) = FOR
        .iter()
        .find(|(a, _)| *a == alert)
        .unwrap_or_else(|| panic!("{alert} is not an alert of {SHIPPED}"));
    Duration::from_secs(s.unwrap_or(0))
}

/// Writes the shipped rules with the `for:` of [`FOR`] into `dir` and
/// returns the file. Panics unless the two files differ in `for:` lines
/// only, and every rule's expression, labels and annotations are the same.
pub fn shortened(dir: &Path) -> PathBuf {
    let shipped = std::fs::read_to_string(repo().join(SHIPPED)).unwrap();
    let text = rewrite(&shipped);
    check(&shipped, &text);
    let file = dir.join("webchecker.rules.yaml");
    std::fs::write(&file, &text).unwrap();
    file
}

/// The `for:` line of each rule (two spaces deeper than its `- alert:`)
/// gets the test's duration; nothing else changes.
fn rewrite(shipped: &str) -> String {
    let mut alert: Option<(String, usize)> = None;
    let mut out = String::new();
    for line in shipped.split_inclusive('\n') {
        let indent = line.len() - line.trim_start().len();
        let body = line.trim();
        if let Some(name) = body.strip_prefix("- alert: ") {
            alert = Some((name.trim().to_string(), indent));
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
    // Line by line: only `for:` lines differ, one per rule that has one.
    let (a, b): (Vec<&str>, Vec<&str>) = (shipped.lines().collect(), test.lines().collect());
    assert_eq!(a.len(), b.len(), "the test's rules file has other lines");
    let changed: Vec<(&str, &str)> = a
        .iter()
        .zip(&b)
        .filter(|(x, y)| x != y)
        .map(|(x, y)| (*x, *y))
        .collect();
    for (x, y) in &changed {
        assert!(
            x.trim().starts_with("for: ") && y.trim().starts_with("for: "),
            "a line other than `for:` changed: {x:?} -> {y:?}"
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
    let with_for = orig.values().filter(|r| r.contains_key("for")).count();
    assert_eq!(
        changed.len(),
        with_for,
        "one `for:` line per rule that has one"
    );
    for (name, r) in &orig {
        let t = &new[name];
        assert_eq!(
            r["expr"].as_str().map(str::as_bytes),
            t["expr"].as_str().map(str::as_bytes),
            "{name}: the expression must be byte-identical to the shipped one"
        );
        let strip = |m: &serde_yaml::Mapping| {
            let mut m = m.clone();
            m.remove("for");
            m
        };
        assert_eq!(strip(r), strip(t), "{name}: only `for` may differ");
        match FOR.iter().find(|(a, _)| a == name).unwrap().1 {
            Some(s) => assert_eq!(t["for"].as_str(), Some(format!("{s}s").as_str()), "{name}"),
            None => assert!(
                !r.contains_key("for"),
                "{name} has a `for:`: give it one in FOR"
            ),
        }
    }
}
