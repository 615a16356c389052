//! The committed CRD manifests are generated from `src/api.rs` (src/bin/crdgen.rs).
//! This fails when the types changed and the manifests were not regenerated.

use kube::CustomResourceExt;

fn generated() -> String {
    // Exactly what src/bin/crdgen.rs prints.
    serde_yaml::to_string(&webchecker::api::WebChecker::crd()).expect("the CRD serialises")
}

fn check(rel: &str) {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(rel);
    let committed =
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    let want = generated();
    if committed != want {
        let first = committed
            .lines()
            .zip(want.lines())
            .position(|(a, b)| a != b)
            .unwrap_or_else(|| committed.lines().count().min(want.lines().count()));
        panic!(
            "{rel} is out of date with src/api.rs (first difference at line {}: committed {:?}, generated {:?}); run `make crds` (that is `cargo run --bin crdgen` into crds/webcheckers.test.network.io.yaml and deploy/helm/webchecker-operator/crds/) and commit the result",
            first + 1,
            committed.lines().nth(first),
            want.lines().nth(first),
        );
    }
}

#[test]
fn crd_manifest_is_generated() {
    check("crds/webcheckers.test.network.io.yaml");
}

#[test]
fn helm_chart_crd_is_generated() {
    check("deploy/helm/webchecker-operator/crds/webcheckers.test.network.io.yaml");
}
