//! The chart's `helm test` hook (templates/tests/chart-test.yaml) as `helm
//! template` renders it: test hooks only, cleaned up after a pass, the test
//! image following the operator's tag, RBAC in the watched namespace only,
//! the pod as hardened as the operator's and pointed at the release's own
//! Service. tests/node/main.rs runs it for real.

use serde_yaml::Value;
use webchecker_kit::platform::{of_kind, render_sets};

fn is_test_hook(d: &Value) -> bool {
    d["metadata"]["annotations"]["helm.sh/hook"].as_str() == Some("test")
}

fn args(pod: &Value) -> Vec<String> {
    pod["spec"]["containers"][0]["args"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_string())
        .collect()
}

#[test]
fn test_hook_checks_its_own_release() {
    let docs = render_sets(&[]);
    let hooks: Vec<&Value> = docs.iter().filter(|d| is_test_hook(d)).collect();
    let kinds: Vec<&str> = hooks.iter().map(|d| d["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["ServiceAccount", "Role", "RoleBinding", "Pod"]);
    for h in &hooks {
        let policy = h["metadata"]["annotations"]["helm.sh/hook-delete-policy"]
            .as_str()
            .unwrap();
        assert!(
            policy.contains("hook-succeeded") && policy.contains("before-hook-creation"),
            "{policy}"
        );
    }
    // Only test hooks: nothing else of the release is a hook.
    assert!(
        docs.iter()
            .filter(|d| !is_test_hook(d))
            .all(|d| d["metadata"]["annotations"]["helm.sh/hook"].is_null())
    );

    let pod = of_kind(&docs, "Pod")[0];
    let c = &pod["spec"]["containers"][0];
    assert_eq!(
        c["image"].as_str(),
        Some(
            format!(
                "webchecker-operator-chart-test:{}",
                env!("CARGO_PKG_VERSION")
            )
            .as_str()
        ),
        "the chart's appVersion, the crate's version"
    );
    let dep = docs
        .iter()
        .find(|d| d["kind"].as_str() == Some("Deployment"))
        .unwrap();
    let op = &dep["spec"]["template"]["spec"];
    assert_eq!(
        c["securityContext"], op["containers"][0]["securityContext"],
        "as hardened as the operator"
    );
    assert_eq!(pod["spec"]["securityContext"], op["securityContext"]);
    assert_eq!(pod["spec"]["restartPolicy"].as_str(), Some("Never"));
    // The Service's address from the kubelet's variables of the rendered Service.
    let svc = of_kind(&docs, "Service")[0];
    let name = svc["metadata"]["name"].as_str().unwrap();
    let port = svc["spec"]["ports"][0]["port"].as_u64().unwrap();
    let var = format!("{}_SERVICE_HOST", name.to_uppercase().replace('-', "_"));
    let a = args(pod);
    assert!(
        a.contains(&format!("--operator-url=http://$({var}):{port}")),
        "{a:?}"
    );
    assert!(a.contains(&"--namespace=webchecker".to_string()), "{a:?}");

    let role = of_kind(&docs, "Role")
        .into_iter()
        .find(|r| is_test_hook(r))
        .unwrap();
    assert_eq!(role["metadata"]["namespace"].as_str(), Some("webchecker"));
    let rules = &role["rules"][0];
    assert_eq!(rules["resources"][0].as_str(), Some("webcheckers"));
    let verbs: Vec<&str> = rules["verbs"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(verbs, ["get", "create", "delete"]);
}

#[test]
fn test_hook_follows_the_values() {
    let docs = render_sets(&[
        "image.tag=2.0.0",
        "operator.watchNamespace=tenant",
        "tests.image.pullPolicy=Never",
    ]);
    let pod = of_kind(&docs, "Pod")[0];
    assert_eq!(
        pod["spec"]["containers"][0]["image"].as_str(),
        Some("webchecker-operator-chart-test:2.0.0")
    );
    assert_eq!(
        pod["spec"]["containers"][0]["imagePullPolicy"].as_str(),
        Some("Never")
    );
    assert!(args(pod).contains(&"--namespace=tenant".to_string()));
    for kind in ["Role", "RoleBinding"] {
        let hook = of_kind(&docs, kind)
            .into_iter()
            .find(|r| is_test_hook(r))
            .unwrap();
        assert_eq!(
            hook["metadata"]["namespace"].as_str(),
            Some("tenant"),
            "{kind}"
        );
    }
    // Pushed beside the operator's image (make push): its repository follows.
    let docs = render_sets(&["image.repository=reg.example/team/webchecker-operator"]);
    assert_eq!(
        of_kind(&docs, "Pod")[0]["spec"]["containers"][0]["image"].as_str(),
        Some(
            format!(
                "reg.example/team/webchecker-operator-chart-test:{}",
                env!("CARGO_PKG_VERSION")
            )
            .as_str()
        )
    );
    let docs = render_sets(&["tests.image.tag=x1", "tests.image.repository=reg.example/t"]);
    assert_eq!(
        of_kind(&docs, "Pod")[0]["spec"]["containers"][0]["image"].as_str(),
        Some("reg.example/t:x1")
    );
    let docs = render_sets(&["tests.enabled=false"]);
    assert!(
        !docs.iter().any(is_test_hook),
        "tests.enabled=false renders no test hook"
    );
}
