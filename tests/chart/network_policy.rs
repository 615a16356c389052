//! `networkPolicy`: on by default; it selects the operator pods (not the
//! `helm test` pod), admits the release's own pods alone to the confirm port
//! (asks to confirm a failure or probe from a zone), the release's own pods
//! (fast failover looks at the peers' /healthz) and the peers of `from`, or
//! anyone while `from` is empty (scrapers and the kubelet's probes wherever
//! they run), to the metrics port; adds `extraIngress`, and restricts
//! egress only with `egress`, then keeps the replicas' way to each other's
//! ports open before those rules.

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
fn network_policy_is_on_by_default_and_off_on_request() {
    assert_eq!(of_kind(&render(&[]), "NetworkPolicy").len(), 1);
    let off = render(&["--set", "networkPolicy.enabled=false"]);
    assert!(of_kind(&off, "NetworkPolicy").is_empty());
}

#[test]
fn only_the_replicas_reach_the_confirm_port_and_anyone_the_metrics_port() {
    let docs = render_with_tests(&[]);
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
    assert_eq!(ingress.len(), 3, "{ingress:?}");
    // The confirm port: the replicas of this release, nobody else.
    assert_eq!(ports(&ingress[0]), [(8081, "TCP")]);
    let peers = ingress[0]["from"].as_sequence().unwrap();
    assert_eq!(peers.len(), 1);
    assert!(peers[0]["namespaceSelector"].is_null(), "this namespace");
    assert!(selects(&peers[0]["podSelector"], pod_labels));
    assert!(
        !selects(&peers[0]["podSelector"], test_labels),
        "not even the helm test pod"
    );
    // The metrics port: the replicas and the helm test pod...
    assert_eq!(ports(&ingress[1]), [(8080, "TCP")]);
    let peers = ingress[1]["from"].as_sequence().unwrap();
    assert!(selects(&peers[0]["podSelector"], pod_labels));
    assert!(
        selects(&peers[0]["podSelector"], test_labels),
        "the helm test pod may ask for /readyz"
    );
    // ...and anyone (no `from`): a plain install is scraped and probed.
    assert_eq!(ports(&ingress[2]), [(8080, "TCP")]);
    assert!(ingress[2]["from"].is_null(), "{:?}", ingress[2]);
    // The container ports and the operator's listeners follow the values.
    let env = |name: &str| {
        env_entries(container(dep))
            .into_iter()
            .find(|e| e["name"].as_str() == Some(name))
            .and_then(|e| e["value"].as_str().map(str::to_string))
    };
    assert_eq!(env("WEBCHECKER_LISTEN").as_deref(), Some("0.0.0.0:8080"));
    assert_eq!(
        env("WEBCHECKER_CONFIRM_LISTEN").as_deref(),
        Some("0.0.0.0:8081")
    );

    let docs = render(&[
        "--set",
        "operator.metricsPort=9443",
        "--set",
        "operator.confirmPort=9444",
    ]);
    let np = one(&docs, "NetworkPolicy");
    assert_eq!(ports(&np["spec"]["ingress"][0]), [(9444, "TCP")]);
    assert_eq!(ports(&np["spec"]["ingress"][1]), [(9443, "TCP")]);
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
    assert_eq!(ingress.len(), 3 + extra.len(), "{ingress:?}");
    assert_eq!(ports(&ingress[0]), [(9091, "TCP")], "operator.confirmPort");
    assert_eq!(ingress[2]["from"], given["from"]);
    assert_eq!(ports(&ingress[2]), [(9090, "TCP")], "operator.metricsPort");
    assert_eq!(&ingress[3..], extra.as_slice());
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
    assert_eq!(
        ports(&egress[0]),
        [(9090, "TCP"), (9091, "TCP")],
        "operator.metricsPort and operator.confirmPort"
    );
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
    assert_eq!(ports(&egress[0]), [(8080, "TCP"), (8081, "TCP")]);
    assert_eq!(
        egress[1]["to"][0]["ipBlock"]["cidr"].as_str(),
        Some("203.0.113.0/24")
    );
    // Both ends of an ask and of a look at /healthz: ingress from the
    // peers on the same ports.
    for rule in &spec["ingress"].as_sequence().unwrap()[..2] {
        assert!(selects(&rule["from"][0]["podSelector"], pod_labels));
    }
    assert_eq!(
        [ports(&spec["ingress"][0]), ports(&spec["ingress"][1])].concat(),
        [(8081, "TCP"), (8080, "TCP")]
    );
}
