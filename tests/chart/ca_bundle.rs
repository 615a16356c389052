//! `caBundle`: a ConfigMap or Secret of certificate authorities mounted
//! read-only and passed to the operator as `--ca-bundle`
//! (WEBCHECKER_CA_BUNDLE); nothing of it by default; one source at most.

use std::path::Path;

use super::platform::{render_fails, render_values};
use super::rendered::*;
use super::*;

const FILE: &str = "/etc/webchecker-ca/ca.crt";

fn ca_volume(dep: &Value) -> Option<&Value> {
    pod_spec(dep)["volumes"]
        .as_sequence()?
        .iter()
        .find(|v| v["name"].as_str() == Some("ca-bundle"))
}

fn ca_mount(dep: &Value) -> Option<&Value> {
    container(dep)["volumeMounts"]
        .as_sequence()?
        .iter()
        .find(|v| v["name"].as_str() == Some("ca-bundle"))
}

#[test]
fn no_ca_bundle_by_default() {
    let docs = render(&[]);
    let dep = one(&docs, "Deployment");
    assert!(ca_volume(dep).is_none() && ca_mount(dep).is_none());
    assert!(!env_names(container(dep)).contains(&"WEBCHECKER_CA_BUNDLE".to_string()));
    let cfg = rendered_config(dep, &format!("{FULLNAME}-5c9f7d8b6-x2b7k"));
    assert_eq!(cfg.ca_bundle, None);
}

#[test]
fn a_ca_bundle_is_mounted_read_only_and_given_to_the_operator() {
    for (values, source, name) in [
        (
            "caBundle: {configMap: cluster-ca, key: ca.pem}\n",
            "configMap",
            "name",
        ),
        (
            "caBundle: {secret: cluster-ca, key: ca.pem}\n",
            "secret",
            "secretName",
        ),
    ] {
        let docs = render_values(values);
        let dep = one(&docs, "Deployment");
        let volume = ca_volume(dep).unwrap_or_else(|| panic!("{values}: no volume"));
        let src = &volume[source];
        assert_eq!(src[name].as_str(), Some("cluster-ca"), "{values}");
        // The key, whatever its name, is the file the flag names.
        assert_eq!(
            src["items"],
            serde_yaml::from_str::<Value>("[{key: ca.pem, path: ca.crt}]").unwrap(),
            "{values}"
        );
        let mount = ca_mount(dep).expect("a mount");
        assert_eq!(mount["readOnly"].as_bool(), Some(true));
        let dir = mount["mountPath"].as_str().unwrap();
        assert_eq!(Path::new(FILE).parent(), Some(Path::new(dir)));
        let cfg = rendered_config(dep, &format!("{FULLNAME}-5c9f7d8b6-x2b7k"));
        assert_eq!(cfg.ca_bundle.as_deref(), Some(Path::new(FILE)), "{values}");
    }
    // The all-on values use a ConfigMap.
    let docs = render(&["-f", ALL_ON]);
    let dep = one(&docs, "Deployment");
    assert_eq!(
        ca_volume(dep).unwrap()["configMap"]["name"].as_str(),
        Some("cluster-ca")
    );
}

#[test]
fn a_ca_bundle_has_one_source() {
    let out = render_fails("caBundle: {configMap: a, secret: b}\n");
    assert!(
        out.contains("caBundle: set configMap (\"a\") or secret (\"b\"), not both"),
        "{out}"
    );
    let out = render_fails("caBundle: {configMap: a, key: \"\"}\n");
    assert!(out.contains("/caBundle/key"), "{out}");
}
