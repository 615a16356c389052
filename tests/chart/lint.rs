//! The chart as files: its copies of the CRD, the alert rules and the
//! dashboards match their sources (the recording rules' copy:
//! tests/chart_alerts.rs), `helm lint --strict` is clean, the
//! archive `make package` writes lints too, and every values file of
//! deploy/helm/ci/invalid/ fails with its documented message.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use super::platform::{helm, scratch};
use super::*;
use support::repo;

#[test]
fn chart_copies_are_identical_to_their_sources() {
    let chart = repo().join(CHART);
    let mut pairs = vec![
        (
            repo().join("crds/webcheckers.test.network.io.yaml"),
            chart.join("crds/webcheckers.test.network.io.yaml"),
        ),
        (
            repo().join("crds/webcheckermaintenances.test.network.io.yaml"),
            chart.join("crds/webcheckermaintenances.test.network.io.yaml"),
        ),
        (
            repo().join("alerts/webchecker.rules.yaml"),
            chart.join("files/alerts.yaml"),
        ),
    ];
    let json_files = |dir: &Path| -> BTreeSet<String> {
        std::fs::read_dir(dir)
            .map(|rd| {
                rd.map(|e| e.unwrap().file_name().to_string_lossy().to_string())
                    .filter(|n| n.ends_with(".json"))
                    .collect()
            })
            .unwrap_or_default()
    };
    let sources = json_files(&repo().join("dashboards"));
    assert!(!sources.is_empty(), "no dashboards/*.json");
    let copies = json_files(&chart.join("files/dashboards"));
    let mut problems = Vec::new();
    for extra in copies.difference(&sources) {
        problems.push(format!(
            "{CHART}/files/dashboards/{extra} has no source in dashboards/"
        ));
    }
    for n in &sources {
        pairs.push((
            repo().join("dashboards").join(n),
            chart.join("files/dashboards").join(n),
        ));
    }
    for (src, copy) in &pairs {
        let a = std::fs::read(src).unwrap_or_else(|e| panic!("read {}: {e}", src.display()));
        match std::fs::read(copy) {
            Ok(b) if a == b => {}
            Ok(_) => problems.push(format!(
                "{} differs from {}",
                copy.strip_prefix(repo()).unwrap().display(),
                src.strip_prefix(repo()).unwrap().display()
            )),
            Err(e) => problems.push(format!(
                "{} is missing ({e})",
                copy.strip_prefix(repo()).unwrap().display()
            )),
        }
    }
    assert!(
        problems.is_empty(),
        "the Helm chart's copies are out of date; run `make chart-sync` and commit the result:\n  {}",
        problems.join("\n  ")
    );
}

#[test]
fn helm_lint_strict_is_clean() {
    // image.repository has no default: the defaults with the tests' one,
    // and the all-on values, which set their own.
    let base = support::release::base_values().to_str().unwrap();
    for values in [base, ALL_ON] {
        let args = vec!["lint", "--strict", CHART, "-f", values];
        let (ok, out) = helm(&args);
        assert!(ok, "helm lint --strict {values:?} failed:\n{out}");
        assert!(
            !out.contains("[WARNING]") && !out.contains("[ERROR]"),
            "helm lint --strict {values:?}:\n{out}"
        );
        assert!(out.contains("0 chart(s) failed"), "{out}");
    }
}

/// What `make package` does after chart-sync: the archive is named and
/// versioned after the crate, and lints as the directory does.
#[test]
fn packaged_chart_lints_and_carries_the_crate_version() {
    let dir = scratch("package-");
    let dest = dir.path().to_str().unwrap();
    let (ok, out) = helm(&["package", CHART, "--destination", dest]);
    assert!(ok, "helm package failed:\n{out}");
    let version = env!("CARGO_PKG_VERSION");
    let tgz = dir
        .path()
        .join(format!("webchecker-operator-{version}.tgz"));
    assert!(tgz.is_file(), "{} missing:\n{out}", tgz.display());
    let tgz = tgz.to_str().unwrap();
    let base = support::release::base_values().to_str().unwrap();
    let (ok, out) = helm(&["lint", "--strict", tgz, "-f", base]);
    assert!(
        ok && !out.contains("[WARNING]") && !out.contains("[ERROR]"),
        "helm lint --strict {tgz}:\n{out}"
    );
    let (ok, out) = helm(&["show", "chart", tgz]);
    assert!(ok, "helm show chart:\n{out}");
    let chart: Value = serde_yaml::from_str(&out).unwrap();
    assert_eq!(chart["version"].as_str(), Some(version), "{out}");
    assert_eq!(chart["appVersion"].as_str(), Some(version), "{out}");
}

#[test]
fn invalid_values_fail_with_their_documented_message() {
    let mut files: Vec<PathBuf> = std::fs::read_dir(repo().join(INVALID_DIR))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    assert!(files.len() >= 10, "too few files in {INVALID_DIR}");
    let mut problems = Vec::new();
    for f in &files {
        let rel = f
            .strip_prefix(repo())
            .unwrap()
            .to_str()
            .unwrap()
            .to_string();
        let first = std::fs::read_to_string(f)
            .unwrap()
            .lines()
            .next()
            .unwrap_or_default()
            .to_string();
        let want = first
            .split_once("helm prints: ")
            .map(|(_, m)| m.trim().to_string())
            .unwrap_or_else(|| panic!("{rel}: first line must be `# ... helm prints: <message>`"));
        // After the tests' image repository, which a file may take away.
        let base = support::release::base_values().to_str().unwrap();
        let (ok, out) = helm(&[
            "template", RELEASE, CHART, "-n", RELEASE_NS, "-f", base, "-f", &rel,
        ]);
        if ok {
            problems.push(format!("{rel}: helm template succeeded"));
        } else if !out.contains(&want) {
            problems.push(format!("{rel}: expected {want:?}, helm printed:\n{out}"));
        }
    }
    println!("{} invalid values files checked", files.len());
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
