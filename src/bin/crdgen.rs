//! Prints a CRD as YAML (the source of `crds/`): the WebChecker's, or with
//! the argument `maintenance` the WebCheckerMaintenance's.
use kube::CustomResourceExt;

fn main() {
    let crd = match std::env::args().nth(1).as_deref() {
        Some("maintenance") => webchecker::api::WebCheckerMaintenance::crd(),
        _ => webchecker::api::WebChecker::crd(),
    };
    print!(
        "{}",
        serde_yaml::to_string(&crd).expect("the CRD serialises")
    );
}
