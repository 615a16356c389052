//! End to end: the denials of the default flags, per-namespace private
//! networks, missing permissions on nodes, and a proxied name of a denied
//! address, through operator processes.

use super::*;

/// With default flags: loopback, unspecified, link-local, metadata, NAT64,
/// the API server's ClusterIP and EndpointSlice address, and a Node's
/// kubelet ports all end Forbidden, and nothing reaches the listener.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn default_flags_deny_local_metadata_nat64_api_server_and_kubelets() {
    let c = cluster();
    let ns = c.namespace("egress-default");
    let (cluster_ip, endpoint) = published_api_server(c).await;
    // Known before the operator starts: start-up lists the Nodes before the
    // first probe (a Node created later is in the loopback test).
    let node = format!("node-{ns}");
    create_node(c, &node, &["192.0.2.77"], 31077);
    // [::]:port takes IPv4 too: 127.0.0.1, 0.0.0.0, ::1 and :: all land here.
    let rec = Recorder::bind("[::]:0").await;
    let p = rec.port();
    let op = spawn(c, &ns, &["--allow-loopback=false"]);
    op.wait_ready(Duration::from_secs(60)).await;
    let cases: Vec<(&str, String, &str)> = vec![
        ("loopback", format!("http://127.0.0.1:{p}"), "(loopback)"),
        ("loopback6", format!("http://[::1]:{p}"), "(loopback)"),
        (
            "unspecified",
            format!("http://0.0.0.0:{p}"),
            "(an unspecified address",
        ),
        (
            "unspecified6",
            format!("http://[::]:{p}"),
            "(an unspecified address",
        ),
        (
            "metadata",
            format!("http://169.254.169.254:{p}"),
            "(link-local",
        ),
        (
            "metadata6",
            format!("http://[fd00:ec2::254]:{p}"),
            "(cloud metadata: AWS instance metadata over IPv6)",
        ),
        (
            "nat64",
            format!("http://[64:ff9b::a9fe:a9fe]:{p}"),
            "(it carries 169.254.169.254: link-local",
        ),
        (
            "cluster-ip",
            format!("https://{cluster_ip}"),
            "(the Kubernetes API server)",
        ),
        (
            "endpoint",
            format!("https://{endpoint}"),
            "(the Kubernetes API server)",
        ),
        (
            "kubelet",
            "https://192.0.2.77:10250".to_string(),
            "192.0.2.77:10250 is an address the operator may not probe (a kubelet port)",
        ),
        (
            "kubelet-ro",
            "http://192.0.2.77:10255".to_string(),
            "(a kubelet port)",
        ),
        (
            "kubelet-own-port",
            "https://192.0.2.77:31077".to_string(),
            "(a kubelet port)",
        ),
    ];
    for (name, url, _) in &cases {
        apply(c, &ns, &checker(name, &format!("host: {url}")));
    }
    let api: Api<WebChecker> = Api::namespaced(c.client().await, &ns);
    let msgs = futures::future::join_all(
        cases
            .iter()
            .map(|(name, _, _)| settled(&op, &api, name, "Forbidden")),
    )
    .await;
    for ((name, url, why), msg) in cases.iter().zip(msgs) {
        println!("{name}: {msg}");
        assert!(msg.contains(why), "{name} ({url}): {msg}");
        assert!(msg.contains("may not probe"), "{name}: {msg}");
    }
    assert_eq!(rec.accepts(), 0, "a connection reached the listener");
    kubectl_ok(c, &["delete", "node", &node], None);
}

/// `--allow-loopback` (the demo's and the tests' flag) opens loopback and
/// nothing else: the API server as the operator reaches it, its ClusterIP,
/// the kubelet ports on an address no Node lists (a kubelet listens on every
/// interface of its host), and the kubelet ports of a Node that appears while
/// the operator runs, on its address and elsewhere, stay denied, and no
/// connection reaches those listeners.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_server_and_kubelets_stay_denied_with_loopback_allowed() {
    let c = cluster();
    let ns = c.namespace("egress-loopback");
    let (cluster_ip, _) = published_api_server(c).await;
    let k = own_loopback(11);
    let kubelet = Recorder::bind(&format!("{k}:10250")).await;
    let kubelet_ro = Recorder::bind(&format!("{k}:10255")).await;
    let other = Recorder::bind(&format!("{k}:0")).await;
    let sentinel_port = free_port_on(&k);
    let op = spawn(c, &ns, &[]); // the test support sets WEBCHECKER_ALLOW_LOOPBACK
    op.wait_ready(Duration::from_secs(60)).await;
    let api: Api<WebChecker> = Api::namespaced(c.client().await, &ns);

    // Loopback is open...
    apply(
        c,
        &ns,
        &checker("open", &format!("host: http://{}", other.addr)),
    );
    settled(&op, &api, "open", "ProbeSucceeded").await;
    // ...but not the API server the operator talks to, nor its ClusterIP.
    let own = format!("https://127.0.0.1:{}", api_port(c));
    apply(c, &ns, &checker("own-api", &format!("host: {own}")));
    apply(
        c,
        &ns,
        &checker("cluster-ip", &format!("host: https://{cluster_ip}")),
    );
    for name in ["own-api", "cluster-ip"] {
        let msg = settled(&op, &api, name, "Forbidden").await;
        assert!(msg.contains("(the Kubernetes API server)"), "{name}: {msg}");
    }

    // The default kubelet ports on an address no Node lists (standing for a
    // bridge such as cni0 or docker0, or a secondary address): denied before
    // any Node exists.
    let elsewhere = own_loopback(12);
    let stray = Recorder::bind(&format!("{elsewhere}:10250")).await;
    let stray_ro = Recorder::bind(&format!("{elsewhere}:10255")).await;
    for (name, r) in [("stray", &stray), ("stray-ro", &stray_ro)] {
        apply(c, &ns, &checker(name, &format!("host: http://{}", r.addr)));
        let msg = settled(&op, &api, name, "Forbidden").await;
        assert!(msg.contains("(a kubelet port)"), "{name}: {msg}");
    }

    // A Node appears: its own kubelet port closes as soon as the watch sees
    // it. The sentinel (that port, nothing listening) turns from
    // ConnectError to Forbidden when the operator knows the Node.
    create_node(c, &format!("node-{ns}"), &[&k], sentinel_port);
    apply(
        c,
        &ns,
        &checker("sentinel", &format!("host: http://{k}:{sentinel_port}")),
    );
    let msg = settled(&op, &api, "sentinel", "Forbidden").await;
    assert!(msg.contains("(a kubelet port)"), "{msg}");
    // That port is closed on the address the Node does not list too.
    let stray_own = Recorder::bind(&format!("{elsewhere}:{sentinel_port}")).await;
    apply(
        c,
        &ns,
        &checker("stray-own", &format!("host: http://{}", stray_own.addr)),
    );
    let msg = settled(&op, &api, "stray-own", "Forbidden").await;
    assert!(msg.contains("(a kubelet port)"), "{msg}");
    assert_eq!(
        stray.accepts() + stray_ro.accepts() + stray_own.accepts(),
        0,
        "a probe reached a kubelet port on an address no Node lists"
    );
    for (name, r) in [("kubelet", &kubelet), ("kubelet-ro", &kubelet_ro)] {
        apply(c, &ns, &checker(name, &format!("host: https://{}", r.addr)));
        let msg = settled(&op, &api, name, "Forbidden").await;
        assert!(msg.contains("(a kubelet port)"), "{name}: {msg}");
    }
    assert_eq!(kubelet.accepts() + kubelet_ro.accepts(), 0);
    // Other ports of the Node's address stay open.
    apply(
        c,
        &ns,
        &checker("node-other-port", &format!("host: http://{}", other.addr)),
    );
    settled(&op, &api, "node-other-port", "ProbeSucceeded").await;
    kubectl_ok(c, &["delete", "node", &format!("node-{ns}")], None);
}

/// One operator serves two namespaces with the same flags; the label on one
/// of them closes private networks to its checkers (here loopback counts as
/// private through `--private-cidrs`, so that a listener can witness it),
/// and removing it opens them again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn private_networks_close_per_namespace_by_label() {
    // A cluster of its own: the operator watches every namespace.
    let c: &'static Cluster = Box::leak(Box::new(Cluster::start("egress-private")));
    let lease_ns = c.namespace("egress-leases");
    let shop = c.namespace("egress-shop");
    let other = c.namespace("egress-other");
    let to_shop = Recorder::bind("127.0.0.1:0").await;
    let to_other = Recorder::bind("127.0.0.1:0").await;
    let private = format!(
        "--private-cidrs={},127.0.0.0/8",
        webchecker::probe::PRIVATE_NETWORKS
    );
    let op = Operator::spawn_all_namespaces_with(c, "egress-private", &lease_ns, &[&private]);
    op.wait_ready(Duration::from_secs(60)).await;
    let shop_api: Api<WebChecker> = Api::namespaced(c.client().await, &shop);
    let other_api: Api<WebChecker> = Api::namespaced(c.client().await, &other);
    apply(
        c,
        &shop,
        &checker("svc", &format!("host: http://{}", to_shop.addr)),
    );
    apply(
        c,
        &other,
        &checker("svc", &format!("host: http://{}", to_other.addr)),
    );
    settled(&op, &shop_api, "svc", "ProbeSucceeded").await;
    settled(&op, &other_api, "svc", "ProbeSucceeded").await;

    kubectl_ok(
        c,
        &[
            "label",
            "namespace",
            &shop,
            "webchecker.test.network.io/private-networks=deny",
        ],
        None,
    );
    let msg = settled(&op, &shop_api, "svc", "Forbidden").await;
    assert!(
        msg.contains("(a private network, closed to this namespace)"),
        "{msg}"
    );
    // Probes of one checker never overlap: from the first Forbidden one on,
    // nothing more reaches the listener.
    let seen = to_shop.accepts();
    settled(&op, &shop_api, "svc", "Forbidden").await;
    assert_eq!(to_shop.accepts(), seen, "a restricted probe connected");
    // The other namespace, same target network, same operator: still open.
    let before = to_other.accepts();
    settled(&op, &other_api, "svc", "ProbeSucceeded").await;
    assert!(to_other.accepts() >= before + 2);
    // The default private ranges, literal and embedded (no packet is sent).
    apply(c, &shop, &checker("ten", "host: http://10.1.2.3"));
    apply(
        c,
        &shop,
        &checker("ten64", "host: http://[64:ff9b::a01:203]"),
    );
    apply(c, &shop, &checker("ula", "host: http://[fd12::1]"));
    for name in ["ten", "ten64", "ula"] {
        let msg = settled(&op, &shop_api, name, "Forbidden").await;
        assert!(msg.contains("closed to this namespace"), "{name}: {msg}");
    }

    kubectl_ok(
        c,
        &[
            "label",
            "namespace",
            &shop,
            "webchecker.test.network.io/private-networks-",
        ],
        None,
    );
    settled(&op, &shop_api, "svc", "ProbeSucceeded").await;
    assert!(to_shop.accepts() > seen);
}

/// An operator without permission on Nodes, the kubernetes Service and its
/// EndpointSlices runs, probes, names the missing grants in its log and
/// exports webchecker_address_discovery_up 0 for them; granting Nodes later
/// closes a Node's own kubelet port without a restart (10250 and 10255 need
/// no Node: they are closed from the start).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_permission_on_nodes_the_operator_runs_and_says_so() {
    let c = cluster();
    let ns = c.namespace("egress-limited");
    let role = format!("egress-limited-{ns}");
    let rbac = crate::support::release::rbac_without_address_discovery(&ns, &role);
    kubectl_ok(c, &["apply", "-f", "-"], Some(&rbac));
    let (kc, _) = crate::support::release::service_account(c, &ns, "limited").await;
    let args = with_fast(&[]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let op = Operator::spawn_with_kubeconfig(c, &format!("op-{ns}"), &ns, &args, &kc);
    op.wait_ready(Duration::from_secs(60)).await;
    let m = op.metrics().await.expect("metrics");
    let up = |m: &str, s: &str| metric(m, "webchecker_address_discovery_up", &[("source", s)]);
    for (source, want) in [
        ("nodes", 0.0),
        ("service", 0.0),
        ("endpointslices", 0.0),
        ("namespaces", 1.0),
    ] {
        assert_eq!(up(&m, source), Some(want), "{source}");
    }
    let log = op.log_text();
    assert!(
        log.contains("address discovery failing") && log.contains("list and watch on nodes"),
        "the log must name the missing grant:\n{log}"
    );

    // It probes, and the default kubelet ports are closed without Nodes.
    let k = own_loopback(22);
    let kubelet = Recorder::bind(&format!("{k}:0")).await;
    let default_port = Recorder::bind(&format!("{k}:10250")).await;
    let api: Api<WebChecker> = Api::namespaced(c.client().await, &ns);
    apply(
        c,
        &ns,
        &checker("default", &format!("host: http://{}", default_port.addr)),
    );
    let msg = settled(&op, &api, "default", "Forbidden").await;
    assert!(msg.contains("(a kubelet port)"), "{msg}");
    assert_eq!(default_port.accepts(), 0);
    apply(
        c,
        &ns,
        &checker("before", &format!("host: http://{}", kubelet.addr)),
    );
    settled(&op, &api, "before", "ProbeSucceeded").await;

    // The admin grants Nodes; a Node whose kubelet listens there exists already.
    create_node(c, &format!("node-{ns}"), &[&k], kubelet.port());
    let grant = format!(
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {{name: {role}-nodes}}\nrules:\n- {{apiGroups: [\"\"], resources: [nodes], verbs: [list, watch]}}\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata: {{name: {role}-nodes}}\nroleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: {role}-nodes}}\nsubjects: [{{kind: ServiceAccount, name: limited, namespace: {ns}}}]\n"
    );
    kubectl_ok(c, &["apply", "-f", "-"], Some(&grant));
    eventually(
        Duration::from_secs(30),
        "webchecker_address_discovery_up{source=nodes} 1",
        || async { (up(&op.metrics().await?, "nodes") == Some(1.0)).then_some(()) },
    )
    .await;
    // The Node was listed: from now on its kubelet port is closed.
    let seen = kubelet.accepts();
    apply(
        c,
        &ns,
        &checker("after", &format!("host: http://{}", kubelet.addr)),
    );
    let msg = settled(&op, &api, "after", "Forbidden").await;
    assert!(msg.contains("(a kubelet port)"), "{msg}");
    let msg = settled(&op, &api, "before", "Forbidden").await;
    assert!(msg.contains("(a kubelet port)"), "{msg}");
    assert!(
        op.log_text().contains("address discovery works again"),
        "recovery logged"
    );
    // "before" may have connected before its probe that saw the Node; after
    // its first Forbidden probe nothing does.
    let now = kubelet.accepts();
    settled(&op, &api, "before", "Forbidden").await;
    assert_eq!(kubelet.accepts(), now);
    assert!(now >= seen);
    kubectl_ok(c, &["delete", "node", &format!("node-{ns}")], None);
}

/// Through the operator: a proxied target's name is resolved by the
/// operator (through the test kit's name server) and refused before the
/// proxy hears of it; `--check-proxied-targets=false` leaves names to the
/// proxy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operator_refuses_a_proxied_name_of_a_denied_address() {
    let c = cluster();
    let dns = support::dns::Dns::shared();
    let loopback: std::net::IpAddr = "127.0.0.1".parse().unwrap();
    dns.add(
        "metadata.egress.test",
        &["169.254.169.254".parse().unwrap()],
    );
    dns.add("api.egress.test", &[loopback]);
    dns.add("fine.egress.test", &[loopback]);
    let proxy = Recorder::bind("127.0.0.1:0").await;
    let via = format!("proxy: {{url: 'http://{}'}}", proxy.addr);
    let ns = c.namespace("egress-proxy");
    let op = spawn(c, &ns, &[]);
    op.wait_ready(Duration::from_secs(60)).await;
    let api: Api<WebChecker> = Api::namespaced(c.client().await, &ns);
    let port = api_port(c);
    let cases = [
        (
            "meta",
            "http://metadata.egress.test".to_string(),
            "(link-local",
        ),
        (
            "api-tunnel",
            format!("https://api.egress.test:{port}"),
            "(the Kubernetes API server)",
        ),
    ];
    for (name, url, _) in &cases {
        apply(c, &ns, &checker(name, &format!("host: {url}\n{via}")));
    }
    apply(
        c,
        &ns,
        &checker("fine", &format!("host: http://fine.egress.test:9\n{via}")),
    );
    for (name, url, why) in &cases {
        let msg = settled(&op, &api, name, "Forbidden").await;
        assert!(
            msg.contains(why) && msg.contains("the proxy was not asked"),
            "{name} ({url}): {msg}"
        );
    }
    settled(&op, &api, "fine", "ProbeSucceeded").await;
    let heads = proxy.heads();
    assert!(
        heads
            .iter()
            .all(|h| h == "GET http://fine.egress.test:9/ HTTP/1.1"),
        "only the allowed name reached the proxy: {heads:?}"
    );
    assert_eq!(proxy.accepts(), heads.len());

    // The opt-out: the same checker, names left to the proxy.
    let ns2 = c.namespace("egress-proxy-off");
    let op2 = spawn(c, &ns2, &["--check-proxied-targets=false"]);
    op2.wait_ready(Duration::from_secs(60)).await;
    let api2: Api<WebChecker> = Api::namespaced(c.client().await, &ns2);
    apply(
        c,
        &ns2,
        &checker("meta", &format!("host: http://metadata.egress.test\n{via}")),
    );
    settled(&op2, &api2, "meta", "ProbeSucceeded").await;
    assert!(
        proxy
            .heads()
            .contains(&"GET http://metadata.egress.test/ HTTP/1.1".to_string())
    );
}
