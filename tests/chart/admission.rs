//! The ValidatingAdmissionPolicy on the Secrets and ConfigMaps a WebChecker
//! names: on by default, one check per object the CRD allows.

use super::rendered::*;
use super::*;
use support::repo;

/// The most distinct Secrets and ConfigMaps a WebChecker can name, from the
/// CRD: every header, and the other reference fields.
fn most_references_of_the_crd() -> usize {
    let crd: Value = serde_yaml::from_str(
        &std::fs::read_to_string(repo().join("crds/webcheckers.test.network.io.yaml")).unwrap(),
    )
    .unwrap();
    let spec = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"];
    let headers = spec["headers"]["maxItems"]
        .as_u64()
        .expect("headers maxItems") as usize;
    // auth (basic or bearer), tls.caBundle (Secret or ConfigMap),
    // tls.clientCertificate: one object each at most.
    for (path, field) in [
        ("auth", "basic"),
        ("auth", "bearer"),
        ("tls", "caBundle"),
        ("tls", "clientCertificate"),
    ] {
        assert!(
            spec[path]["properties"][field].is_mapping(),
            "spec.{path}.{field} in the CRD"
        );
    }
    headers + 3
}

#[test]
fn admission_policy_is_on_by_default_and_checks_every_reference() {
    let docs = render(&[]);
    let name = format!("{FULLNAME}-references");
    let policy = named(&docs, "ValidatingAdmissionPolicy", &name);
    let binding = named(&docs, "ValidatingAdmissionPolicyBinding", &name);
    assert_eq!(
        policy["apiVersion"].as_str(),
        Some("admissionregistration.k8s.io/v1")
    );
    assert_eq!(policy["metadata"]["name"].as_str(), Some(name.as_str()));
    assert_eq!(binding["spec"]["policyName"].as_str(), Some(name.as_str()));
    assert_eq!(
        binding["spec"]["validationActions"],
        serde_yaml::from_str::<Value>("[Deny]").unwrap()
    );
    let spec = &policy["spec"];
    assert_eq!(spec["failurePolicy"].as_str(), Some("Fail"));
    let rules = spec["matchConstraints"]["resourceRules"]
        .as_sequence()
        .unwrap();
    assert_eq!(rules.len(), 1);
    // Not the status subresource: the operator's status writes pass untouched.
    assert_eq!(
        rules[0]["resources"],
        serde_yaml::from_str::<Value>("[webcheckers]").unwrap()
    );
    assert_eq!(
        rules[0]["operations"],
        serde_yaml::from_str::<Value>("[CREATE, UPDATE]").unwrap()
    );
    assert_eq!(rules[0]["apiGroups"][0].as_str(), Some("test.network.io"));
    // Every field of crates/plan/src/plan/values.rs references() is read.
    let text = serde_yaml::to_string(spec).unwrap();
    for field in [
        "object.spec.auth.basic.secretName",
        "object.spec.auth.bearer.secretKeyRef.name",
        "object.spec.tls.caBundle.secretKeyRef.name",
        "object.spec.tls.caBundle.configMapKeyRef.name",
        "object.spec.tls.clientCertificate.secretName",
        "h.valueFrom.secretKeyRef.name",
    ] {
        assert!(text.contains(field), "{field} not read by the policy");
    }
    // One validation per distinct object the CRD allows, each calling the
    // authorizer, and the guard before them.
    let checks = spec["validations"]
        .as_sequence()
        .unwrap()
        .iter()
        .filter(|v| {
            v["expression"]
                .as_str()
                .is_some_and(|e| e.contains("authorizer"))
        })
        .count();
    let most = most_references_of_the_crd();
    assert_eq!(checks, most, "validations with an authorizer check");
    assert!(
        text.contains(&format!("size(variables.targets) <= {most}")),
        "the guard refuses more than {most} objects"
    );
    // Off on request, with nothing else changed.
    let off = render(&["--set", "admissionPolicy.enabled=false"]);
    let k = kinds(&off);
    for kind in [
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    ] {
        assert!(
            !k.contains(kind),
            "{kind} rendered with admissionPolicy.enabled=false"
        );
    }
    assert_eq!(off.len() + 4, docs.len());
}

/// The object of `kind` named `name`.
fn named<'a>(docs: &'a [Value], kind: &str, name: &str) -> &'a Value {
    let v: Vec<&Value> = of_kind(docs, kind)
        .into_iter()
        .filter(|d| d["metadata"]["name"].as_str() == Some(name))
        .collect();
    assert_eq!(v.len(), 1, "exactly one {kind} {name} rendered");
    v[0]
}

/// The coordination keys' policy (tests/tenancy/coordination.rs proves it
/// on a real API server): every key of the operator's protocol, everyone
/// but the release's ServiceAccount and the cluster's admins, the watched
/// namespace alone when there is one.
#[test]
fn coordination_keys_are_the_operators_alone() {
    let docs = render(&[]);
    let name = format!("{FULLNAME}-coordination");
    let policy = named(&docs, "ValidatingAdmissionPolicy", &name);
    let binding = named(&docs, "ValidatingAdmissionPolicyBinding", &name);
    assert_eq!(binding["spec"]["policyName"].as_str(), Some(name.as_str()));
    let spec = &policy["spec"];
    assert_eq!(spec["failurePolicy"].as_str(), Some("Fail"));
    let text = serde_yaml::to_string(spec).unwrap();
    for key in webchecker::assignment::KEYS {
        assert!(text.contains(&format!("'{key}'")), "{key} not guarded");
    }
    let sa = format!("system:serviceaccount:{RELEASE_NS}:{FULLNAME}");
    assert!(text.contains(&sa), "{sa} not exempt");
    assert!(spec["matchConstraints"]["namespaceSelector"].is_null());
    let scoped = render(&["--set", "operator.watchNamespace=team-a"]);
    let policy = named(&scoped, "ValidatingAdmissionPolicy", &name);
    assert_eq!(
        policy["spec"]["matchConstraints"]["namespaceSelector"]["matchLabels"]
            ["kubernetes.io/metadata.name"]
            .as_str(),
        Some("team-a")
    );
}
