//! Prints the WebChecker CRD as YAML (the source of `crds/`).
use kube::CustomResourceExt;

fn main() {
    let crd = webchecker::api::WebChecker::crd();
    print!(
        "{}",
        serde_yaml::to_string(&crd).expect("the CRD serialises")
    );
}
