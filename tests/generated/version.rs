//! One version: Cargo.toml's is the chart's `version` and `appVersion`, the
//! Dockerfile's version labels and the chart version of the README's Install
//! commands (hack/sync-version.py writes them, `make chart-sync`). The chart's image.tag defaults to appVersion and
//! hack/image.sh tags and labels with the crate version, so the images follow.

use super::repo_file;

const CRATE_VERSION: &str = env!("CARGO_PKG_VERSION");
const FIX: &str = "run `make chart-sync` (hack/sync-version.py) and commit the result";

#[test]
fn chart_version_and_app_version_are_the_crates() {
    let rel = "deploy/helm/webchecker-operator/Chart.yaml";
    let chart: serde_yaml::Value =
        serde_yaml::from_str(&repo_file(rel)).expect("Chart.yaml parses");
    let mut problems = Vec::new();
    for key in ["version", "appVersion"] {
        // appVersion is quoted in Chart.yaml; a bare 1.0 would read as a number.
        match chart[key].as_str() {
            Some(v) if v == CRATE_VERSION => {}
            other => problems.push(format!("{key} is {other:?}")),
        }
    }
    assert!(
        problems.is_empty(),
        "{rel}: {} where Cargo.toml's version is {CRATE_VERSION:?}; {FIX}",
        problems.join(", ")
    );
}

#[test]
fn dockerfile_version_labels_are_the_crates() {
    let key = "org.opencontainers.image.version=";
    let text = repo_file("Dockerfile");
    let values: Vec<&str> = text
        .match_indices(key)
        .map(|(at, _)| {
            let rest = &text[at + key.len()..];
            rest.trim_start_matches('"')
                .split(['"', ' ', '\n'])
                .next()
                .unwrap_or_default()
        })
        .collect();
    // One per image: the operator and the chart test pod.
    assert_eq!(values.len(), 2, "the Dockerfile's {key} labels: {values:?}");
    assert!(
        values.iter().all(|v| *v == CRATE_VERSION),
        "the Dockerfile's {key} labels are {values:?}, Cargo.toml's version is {CRATE_VERSION:?}; {FIX}"
    );
}

/// The README's Install commands name the chart `make push` pushes: every
/// `--version` of that section is the crate's (tests/node/main.rs runs them).
#[test]
fn readme_install_commands_name_the_crates_version() {
    let text = repo_file("README.md");
    let section: String = text
        .lines()
        .skip_while(|l| *l != "## Install")
        .skip(1)
        .take_while(|l| !l.starts_with("## "))
        .collect::<Vec<_>>()
        .join("\n");
    let versions: Vec<&str> = section
        .split("--version ")
        .skip(1)
        .map(|rest| rest.split_whitespace().next().unwrap_or_default())
        .collect();
    assert!(
        !versions.is_empty(),
        "README.md's Install section names no --version"
    );
    assert!(
        versions.iter().all(|v| *v == CRATE_VERSION),
        "README.md's Install section names chart versions {versions:?}, Cargo.toml's is {CRATE_VERSION:?}; {FIX}"
    );
}

/// The examples' install commands and the README's others (Monitoring)
/// name the same chart version as its Install section (hack/sync-version.py
/// writes them too).
#[test]
fn other_install_commands_name_the_crates_version() {
    let dir = super::repo().join("examples");
    let mut files = vec!["README.md".to_string()];
    for entry in std::fs::read_dir(&dir).expect("examples/") {
        let name = entry.unwrap().file_name().to_string_lossy().to_string();
        let listed =
            name == "README.md" || (name.starts_with("values-") && name.ends_with(".yaml"));
        if listed {
            files.push(format!("examples/{name}"));
        }
    }
    let mut stale = Vec::new();
    let mut seen = 0;
    for name in files {
        let text = repo_file(&name);
        for rest in text.split("--version ").skip(1) {
            seen += 1;
            let v = rest.split_whitespace().next().unwrap_or_default();
            if v != CRATE_VERSION {
                stale.push(format!("{name}: --version {v}"));
            }
        }
    }
    assert!(seen > 0, "no example names a chart --version");
    assert!(
        stale.is_empty(),
        "{stale:?} where Cargo.toml's version is {CRATE_VERSION:?}; {FIX}"
    );
}
