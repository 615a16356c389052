//! Helpers of the platform-team, chart and observability tests (tests/chart/main.rs,
//! tests/chart_alerts.rs, tests/chart_test_hook.rs, tests/self_service_rbac.rs,
//! tests/metric_labels/main.rs, tests/observability/main.rs): the real helm of
//! hack/build-tools.sh, programs on PATH (promtool, prometheus, python3), the
//! Prometheus 3 of hack/build-prometheus.sh ([`PromVersion`]), and the chart
//! rendered into YAML documents.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;

use serde::Deserialize;
use serde_yaml::Value;

use crate::release::{base_values, helm_command};
use crate::{SETUP_LIMIT, bounded, repo};

pub const CHART: &str = "deploy/helm/webchecker-operator";
pub const RELEASE: &str = "wc";
pub const RELEASE_NS: &str = "webchecker";

/// The directory of helm, kubectl, kube-apiserver, ... (hack/build-tools.sh,
/// or WEBCHECKER_TOOLS_BIN).
pub fn tools_bin() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        if let Some(b) = std::env::var_os("WEBCHECKER_TOOLS_BIN") {
            return PathBuf::from(b);
        }
        let out = bounded("bash", SETUP_LIMIT)
            .arg(repo().join("hack/build-tools.sh"))
            .stderr(Stdio::inherit())
            .output()
            .expect("run hack/build-tools.sh");
        assert!(out.status.success(), "hack/build-tools.sh failed");
        PathBuf::from(
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .last()
                .expect("hack/build-tools.sh prints the bin directory")
                .trim(),
        )
    })
}

/// A program on PATH; fails (never skips) when it is missing.
pub fn tool(name: &str) -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!(
                "`{name}` not found on PATH: run hack/install-deps.sh (it installs python3 \
                 and Debian's `prometheus` package, which provides `prometheus` and `promtool`)"
            )
        })
}

/// Which Prometheus (server and promtool) a test runs: the 3.x that
/// hack/build-prometheus.sh builds (PROMETHEUS3_VERSION of hack/versions.env),
/// what the tests run by default (what teams run today), or Debian's 2.42 on
/// PATH (hack/install-deps.sh), the second target for older installations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PromVersion {
    Debian,
    V3,
}

impl PromVersion {
    /// Both, Debian's first.
    pub const ALL: [PromVersion; 2] = [PromVersion::Debian, PromVersion::V3];

    /// From WEBCHECKER_PROMETHEUS: unset, empty or `3`: the 3.x of
    /// hack/build-prometheus.sh; `2` or `debian`: Debian's. Anything else
    /// panics.
    pub fn from_env() -> PromVersion {
        match std::env::var("WEBCHECKER_PROMETHEUS").as_deref() {
            Err(_) | Ok("") | Ok("3") => PromVersion::V3,
            Ok("2") | Ok("debian") => PromVersion::Debian,
            Ok(other) => panic!("WEBCHECKER_PROMETHEUS={other}: `3`, or `2`/`debian`"),
        }
    }

    /// The other one.
    pub fn other(self) -> PromVersion {
        match self {
            PromVersion::Debian => PromVersion::V3,
            PromVersion::V3 => PromVersion::Debian,
        }
    }

    /// For messages: "Prometheus 2 (Debian)" or "Prometheus 3".
    pub fn name(self) -> &'static str {
        match self {
            PromVersion::Debian => "Prometheus 2 (Debian)",
            PromVersion::V3 => "Prometheus 3",
        }
    }

    /// `prometheus` or `promtool` of this version.
    pub fn program(self, name: &str) -> PathBuf {
        match self {
            PromVersion::Debian => tool(name),
            PromVersion::V3 => prometheus3_bin().join(name),
        }
    }
}

/// The bin directory of hack/build-prometheus.sh (prometheus and promtool
/// 3.x). The script runs once per process: the first run builds (several
/// minutes on a fresh machine), later ones reuse its cache; its progress goes
/// to stderr. Panics, naming the script, when it fails.
pub fn prometheus3_bin() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let bin = crate::script_dir(
            "build-prometheus.sh",
            "Go >= the GO_MIN_VERSION of hack/versions.env and the Go module proxy",
        );
        for t in ["prometheus", "promtool"] {
            assert!(
                bin.join(t).is_file(),
                "{t} missing in {} after hack/build-prometheus.sh",
                bin.display()
            );
        }
        bin
    })
}

pub use crate::release::text;

/// Runs a command in the repository; its stdout and stderr, and whether it
/// succeeded.
pub fn run(cmd: &mut Command) -> (bool, String) {
    let out: Output = cmd
        .current_dir(repo())
        .stdin(Stdio::null())
        .output()
        .expect("run command");
    (
        out.status.success(),
        format!("{}{}", text(&out.stdout), text(&out.stderr)),
    )
}

/// `run` that must succeed: its stdout and stderr; `what` names the command
/// in the failure.
pub fn run_ok(cmd: &mut Command, what: &str) -> String {
    let (ok, out) = run(cmd);
    assert!(ok, "{what} failed:\n{out}");
    out
}

/// helm from the repository root, with its own config/cache/data directories.
pub fn helm(args: &[&str]) -> (bool, String) {
    run(helm_command(tools_bin(), None).args(args))
}

/// A scratch directory under target/ (removed when dropped).
pub fn scratch(prefix: &str) -> tempfile::TempDir {
    std::fs::create_dir_all(repo().join("target")).unwrap();
    tempfile::Builder::new()
        .prefix(prefix)
        .tempdir_in(repo().join("target"))
        .unwrap()
}

/// `helm template` of the README's release with these further arguments:
/// whether it succeeded, and its output.
pub fn template(extra: &[&str]) -> (bool, String) {
    let base = base_values().to_str().unwrap();
    let mut args = vec!["template", RELEASE, CHART, "-n", RELEASE_NS, "-f", base];
    args.extend_from_slice(extra);
    helm(&args)
}

/// `helm template` of the README's release with `--set` of each of `sets`
/// (the test hooks included), parsed into its YAML documents.
pub fn render_sets(sets: &[&str]) -> Vec<Value> {
    let extra: Vec<&str> = sets.iter().flat_map(|s| ["--set", s]).collect();
    let (ok, out) = template(&extra);
    assert!(ok, "helm template {sets:?} failed:\n{out}");
    documents(&out)
}

/// `helm template` of the README's release with this values file content
/// (no test hooks), parsed into its YAML documents.
pub fn render_values(values: &str) -> Vec<Value> {
    let (ok, out) = template_values(values);
    assert!(ok, "helm template with\n{values}\nfailed:\n{out}");
    documents(&out)
}

/// `helm template` that must fail; its output.
pub fn render_fails(values: &str) -> String {
    let (ok, out) = template_values(values);
    assert!(!ok, "helm template with\n{values}\nsucceeded");
    out
}

fn template_values(values: &str) -> (bool, String) {
    let dir = scratch("render-");
    let file = dir.path().join("values.yaml");
    std::fs::write(&file, values).unwrap();
    template(&["--skip-tests", "-f", file.to_str().unwrap()])
}

fn documents(yaml: &str) -> Vec<Value> {
    serde_yaml::Deserializer::from_str(yaml)
        .map(|d| Value::deserialize(d).expect("helm template prints YAML"))
        .filter(|v| !v.is_null())
        .collect()
}

pub fn of_kind<'a>(docs: &'a [Value], kind: &str) -> Vec<&'a Value> {
    docs.iter()
        .filter(|d| d["kind"].as_str() == Some(kind))
        .collect()
}
