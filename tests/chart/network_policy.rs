//! `networkPolicy`: off by default; on, it selects the operator pods (not
//! the `helm test` pod), lets the release's own pods reach the metrics port
//! (fast failover looks at the peers' /healthz there, confirmations are
//! asked on /confirm) and the peers of `from`, adds `extraIngress`, and
//! restricts egress only with `egress`, then keeps the replicas' way to
//! each other's metrics port open before those rules.

use std::collections::BTreeMap;

use super::rendered::*;
use super::*;

/// Whether a LabelSelector (matchLabels, matchExpressions) selects `labels`.
fn selects(selector: &Value, labels: &Value) -> bool {
    let labels: BTreeMap<String, String> = serde_yaml::from_value(labels.clone()).unwrap();
    let required: BTreeMap<String, String> = match &selector["matchLabels"] {
        Value::Null => BTreeMap::new(),
        m => serde_yaml::from_value(m.clone()).unwrap(),
    };
    let by_labels = required.iter().all(|(k, v)| labels.get(k) == Some(v));
    let exprs = selector["matchExpressions"].as_sequence().cloned();
    let by_exprs = exprs.unwrap_or_default().iter().all(|e| {
        let value = labels.get(e["key"].as_str().unwrap());
        let values: Vec<&str> = e["values"]
            .as_sequence()
            .map(|v| v.iter().map(|x| x.as_str().unwrap()).collect())
            .unwrap_or_default();
        match e["operator"].as_str().unwrap() {
            "In" => value.is_some_and(|v| values.contains(&v.as_str())),
            "NotIn" => !value.is_some_and(|v| values.contains(&v.as_str())),
            "Exists" => value.is_some(),
            "DoesNotExist" => value.is_none(),
            op => panic!("unknown operator {op}"),
        }
    });
    by_labels && by_exprs
}

/// The port and protocol of each entry of an ingress rule's `ports`.
fn ports(rule: &Value) -> Vec<(u64, &str)> {
    rule["ports"]
        .as_sequence()
        .expect("ports")
        .iter()
        .map(|p| (p["port"].as_u64().unwrap(), p["protocol"].as_str().unwrap()))
        .collect()
}

#[test]
fn network_policy_is_off_by_default() {
    let docs = render(&[]);
    assert!(of_kind(&docs, "NetworkPolicy").is_empty());
}

#[test]
fn network_policy_lets_the_replicas_reach_each_other_and_leaves_egress_open() {
    let docs = render_with_tests(&["--set", "networkPolicy.enabled=true"]);
    let np = one(&docs, "NetworkPolicy");
    assert_eq!(np["apiVersion"].as_str(), Some("networking.k8s.io/v1"));
    assert_eq!(np["metadata"]["name"].as_str(), Some(FULLNAME));
    assert_eq!(np["metadata"]["namespace"].as_str(), Some(RELEASE_NS));
    let spec = &np["spec"];
    let dep = one(&docs, "Deployment");
    let pod_labels = &dep["spec"]["template"]["metadata"]["labels"];
    assert!(
        selects(&spec["podSelector"], pod_labels),
        "the operator pods are selected: {pod_labels:?}"
    );
    let test_pod = of_kind(&docs, "Pod");
    assert_eq!(test_pod.len(), 1, "the helm test pod");
    let test_labels = &test_pod[0]["metadata"]["labels"];
    assert!(
        !selects(&spec["podSelector"], test_labels),
        "the helm test pod serves a port of its own: not selected"
    );
    // Without egress rules egress is not restricted: probes go anywhere.
    assert_eq!(
        spec["policyTypes"],
        serde_yaml::from_str::<Value>("[Ingress]").unwrap()
    );
    assert!(spec["egress"].is_null());
    let ingress = spec["ingress"].as_sequence().expect("ingress");
    assert_eq!(ingress.len(), 1, "the release's own pods only: {ingress:?}");
    let peers = ingress[0]["from"].as_sequence().unwrap();
    assert_eq!(peers.len(), 1);
    assert!(peers[0]["namespaceSelector"].is_null(), "this namespace");
    assert!(
        selects(&peers[0]["podSelector"], pod_labels),
        "a replica may reach its peers"
    );
    assert!(
        selects(&peers[0]["podSelector"], test_labels),
        "the helm test pod may ask for /readyz"
    );
    assert_eq!(ports(&ingress[0]), [(8080, "TCP")]);

    // The rule follows the metrics port.
    let docs = render(&[
        "--set",
        "networkPolicy.enabled=true",
        "--set",
        "operator.metricsPort=9443",
    ]);
    let np = one(&docs, "NetworkPolicy");
    assert_eq!(ports(&np["spec"]["ingress"][0]), [(9443, "TCP")]);
}

#[test]
fn network_policy_adds_peers_extra_ingress_and_egress_rules_as_given() {
    let docs = render(&["-f", ALL_ON]);
    let np = one(&docs, "NetworkPolicy");
    let spec = &np["spec"];
    let all_on: Value =
        serde_yaml::from_str(&std::fs::read_to_string(support::repo().join(ALL_ON)).unwrap())
            .unwrap();
    let given = &all_on["networkPolicy"];
    let ingress = spec["ingress"].as_sequence().expect("ingress");
    // Own pods, `from`, then every extra rule.
    let extra = given["extraIngress"].as_sequence().unwrap();
    assert_eq!(ingress.len(), 2 + extra.len(), "{ingress:?}");
    assert_eq!(ingress[1]["from"], given["from"]);
    assert_eq!(ports(&ingress[1]), [(9090, "TCP")], "operator.metricsPort");
    assert_eq!(&ingress[2..], extra.as_slice());
    assert_eq!(
        spec["policyTypes"],
        serde_yaml::from_str::<Value>("[Ingress, Egress]").unwrap()
    );
    // Restricted egress: first the replicas' way to each other, then the
    // rules given.
    let egress = spec["egress"].as_sequence().expect("egress");
    let given_egress = given["egress"].as_sequence().unwrap();
    assert_eq!(egress.len(), 1 + given_egress.len(), "{egress:?}");
    assert_eq!(&egress[1..], given_egress.as_slice());
    let dep = one(&docs, "Deployment");
    let pod_labels = &dep["spec"]["template"]["metadata"]["labels"];
    let peers = egress[0]["to"].as_sequence().expect("to");
    assert_eq!(peers.len(), 1);
    assert!(peers[0]["namespaceSelector"].is_null(), "this namespace");
    assert!(
        selects(&peers[0]["podSelector"], pod_labels),
        "a replica may reach its peers (fast failover, confirmations)"
    );
    assert_eq!(ports(&egress[0]), [(9090, "TCP")], "operator.metricsPort");
}

#[test]
fn restricted_egress_still_lets_the_replicas_reach_each_other() {
    let docs = render_with_tests(&[
        "--set",
        "networkPolicy.enabled=true",
        "--set-json",
        r#"networkPolicy.egress=[{"to":[{"ipBlock":{"cidr":"203.0.113.0/24"}}]}]"#,
    ]);
    let np = one(&docs, "NetworkPolicy");
    let spec = &np["spec"];
    assert_eq!(
        spec["policyTypes"],
        serde_yaml::from_str::<Value>("[Ingress, Egress]").unwrap()
    );
    let egress = spec["egress"].as_sequence().expect("egress");
    assert_eq!(egress.len(), 2, "{egress:?}");
    let dep = one(&docs, "Deployment");
    let pod_labels = &dep["spec"]["template"]["metadata"]["labels"];
    let test_labels = &of_kind(&docs, "Pod")[0]["metadata"]["labels"];
    let peers = egress[0]["to"].as_sequence().expect("to");
    assert_eq!(peers.len(), 1);
    assert!(
        selects(&peers[0]["podSelector"], pod_labels),
        "a replica may reach its peers"
    );
    assert!(
        !selects(&peers[0]["podSelector"], test_labels),
        "not the helm test pod"
    );
    assert_eq!(ports(&egress[0]), [(8080, "TCP")]);
    assert_eq!(
        egress[1]["to"][0]["ipBlock"]["cidr"].as_str(),
        Some("203.0.113.0/24")
    );
    // Both ends of an ask: ingress from the peers on the same port.
    assert!(selects(
        &spec["ingress"][0]["from"][0]["podSelector"],
        pod_labels
    ));
    assert_eq!(ports(&spec["ingress"][0]), ports(&egress[0]));
}
