//! Generated files are up to date with their sources:
//!
//! - the CRD manifests, from `crates/api/src/lib.rs` (src/bin/crdgen.rs, `make crds`);
//! - `version`: Cargo.toml's version in Chart.yaml and the Dockerfile;
//! - `values_doc`: the values table of the chart's README, from values.yaml,
//!   and its sizing table, from docs/benchmarks.md (both `make chart-sync`);
//! - `figures`: figures quoted from docs/benchmarks.md's summary (`make bench`);
//! - `interface`: docs/operator-interface.md's tables, from the code;
//! - `links`: the documents' links within the repository lead somewhere.
//!
//! The chart's copies of the CRD, rules and dashboards are checked by
//! tests/chart/main.rs (lint).

mod figures;
mod interface;
mod links;
mod values_doc;
mod version;

use std::path::{Path, PathBuf};

use kube::CustomResourceExt;

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// A file of the repository, by its path relative to the root.
fn repo_file(rel: &str) -> String {
    let path: PathBuf = repo().join(rel);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

/// Exactly what src/bin/crdgen.rs prints for the CRD of `rel`.
fn generated(rel: &str) -> String {
    let crd = if rel.contains("webcheckermaintenances") {
        webchecker::api::WebCheckerMaintenance::crd()
    } else {
        webchecker::api::WebChecker::crd()
    };
    serde_yaml::to_string(&crd).expect("the CRD serialises")
}

fn check(rel: &str) {
    let committed = repo_file(rel);
    let want = generated(rel);
    if committed != want {
        let first = committed
            .lines()
            .zip(want.lines())
            .position(|(a, b)| a != b)
            .unwrap_or_else(|| committed.lines().count().min(want.lines().count()));
        panic!(
            "{rel} is out of date with the types of crates/api (first difference at line {}: committed {:?}, generated {:?}); run `make crds` (crdgen into crds/ and deploy/helm/webchecker-operator/crds/) and commit the result",
            first + 1,
            committed.lines().nth(first),
            want.lines().nth(first),
        );
    }
}

/// rust-toolchain.toml (read by rustup and editors) names the release that
/// hack/versions.env pins for builds and lints.
#[test]
fn the_toolchain_file_names_the_pinned_rust_release() {
    let versions = repo_file("hack/versions.env");
    let pinned = versions
        .lines()
        .find_map(|l| l.strip_prefix("RUST_VERSION="))
        .expect("RUST_VERSION in hack/versions.env");
    let toolchain = repo_file("rust-toolchain.toml");
    assert!(
        toolchain.contains(&format!("channel = \"{pinned}\"")),
        "rust-toolchain.toml does not name Rust {pinned} (hack/versions.env)"
    );
}

#[test]
fn crd_manifest_is_generated() {
    check("crds/webcheckers.test.network.io.yaml");
}

#[test]
fn helm_chart_crd_is_generated() {
    check("deploy/helm/webchecker-operator/crds/webcheckers.test.network.io.yaml");
}

#[test]
fn maintenance_crds_are_generated() {
    check("crds/webcheckermaintenances.test.network.io.yaml");
    check("deploy/helm/webchecker-operator/crds/webcheckermaintenances.test.network.io.yaml");
}

/// Status conditions look like metav1.Condition lists to every client: a
/// list-type map keyed by type, each item with the same required fields and
/// validation; the CRD names a category.
#[test]
fn conditions_are_shaped_like_metav1_conditions() {
    let crd = serde_json::to_value(webchecker::api::WebChecker::crd()).unwrap();
    assert_eq!(
        crd["spec"]["names"]["categories"],
        serde_json::json!(["webchecker-operator"])
    );
    let conditions = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]
        ["properties"]["conditions"];
    assert_eq!(conditions["x-kubernetes-list-type"], "map", "{conditions}");
    assert_eq!(
        conditions["x-kubernetes-list-map-keys"],
        serde_json::json!(["type"])
    );
    let item = &conditions["items"];
    let mut required: Vec<&str> = item["required"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    required.sort();
    assert_eq!(
        required,
        ["lastTransitionTime", "message", "reason", "status", "type"],
        "{item}"
    );
    let p = &item["properties"];
    assert_eq!(
        p["status"]["enum"],
        serde_json::json!(["True", "False", "Unknown"])
    );
    assert_eq!(p["type"]["maxLength"], 316);
    assert_eq!(p["reason"]["maxLength"], 1024);
    assert_eq!(p["reason"]["minLength"], 1);
    assert_eq!(p["message"]["maxLength"], 32768);
    assert_eq!(p["lastTransitionTime"]["format"], "date-time");
    assert!(p["lastTransitionTime"].get("nullable").is_none(), "{item}");
    assert_eq!(p["observedGeneration"]["minimum"].as_f64(), Some(0.0));
}
