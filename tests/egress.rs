//! Addresses a checker can reach (docs/security.md): the forgery guard's
//! defaults, the API server and kubelet addresses it learns from the cluster,
//! the private-network restriction per namespace, and proxied targets.
//!
//! The control plane here publishes its own EndpointSlice (the shared test
//! clusters run with `--endpoint-reconciler-type=none`): it advertises
//! 192.0.2.10 (TEST-NET-1; an endpoint may not be loopback), an address that
//! nothing on this machine answers and no probe may dial. Targets are
//! listeners on loopback that count every connection; a denied address must
//! end `Forbidden` with no connection at its listener.

mod support;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Api;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use webchecker::api::{WebChecker, WebCheckerSpec};
use webchecker::probe::{AddressPolicy, ClusterAddresses, Prober, Reason};

use support::*;

/// What the API server of these tests advertises (and publishes in its
/// EndpointSlice).
const ADVERTISED: &str = "192.0.2.10";

fn cluster() -> &'static Cluster {
    static C: OnceLock<Cluster> = OnceLock::new();
    C.get_or_init(|| {
        Cluster::start_with(
            "egress",
            &format!("--endpoint-reconciler-type=lease --advertise-address={ADVERTISED}"),
        )
    })
}

// ============================================================== helpers

/// A TCP listener that counts connections; it answers every request head
/// with 200 and remembers its first line (as a target or as a proxy).
#[derive(Clone)]
struct Recorder {
    addr: SocketAddr,
    accepts: Arc<AtomicUsize>,
    heads: Arc<Mutex<Vec<String>>>,
}

impl Recorder {
    async fn bind(at: &str) -> Recorder {
        let l = TcpListener::bind(at)
            .await
            .unwrap_or_else(|e| panic!("cannot listen on {at}: {e}"));
        let r = Recorder {
            addr: l.local_addr().unwrap(),
            accepts: Arc::default(),
            heads: Arc::default(),
        };
        let (accepts, heads) = (r.accepts.clone(), r.heads.clone());
        tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                accepts.fetch_add(1, Ordering::SeqCst);
                let heads = heads.clone();
                tokio::spawn(async move {
                    let mut head = Vec::new();
                    let mut buf = [0u8; 1024];
                    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 16384 {
                        match tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf)).await {
                            Ok(Ok(n)) if n > 0 => head.extend_from_slice(&buf[..n]),
                            _ => return,
                        }
                    }
                    let line = String::from_utf8_lossy(&head)
                        .lines()
                        .next()
                        .unwrap_or_default()
                        .to_string();
                    heads.lock().unwrap().push(line);
                    let _ = s
                        .write_all(
                            b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
                        )
                        .await;
                });
            }
        });
        r
    }

    fn port(&self) -> u16 {
        self.addr.port()
    }

    fn accepts(&self) -> usize {
        self.accepts.load(Ordering::SeqCst)
    }

    fn heads(&self) -> Vec<String> {
        self.heads.lock().unwrap().clone()
    }
}

/// A loopback address of its own for this test process (127.0.0.0/8 is all
/// loopback on Linux), so that fixed ports such as 10250 are free on it.
fn own_loopback(n: u8) -> String {
    format!("127.{}.{}.{n}", std::process::id() % 250 + 1, rand_byte())
}

fn rand_byte() -> u8 {
    (std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos()
        % 250) as u8
        + 1
}

fn kubectl_ok(c: &Cluster, args: &[&str], input: Option<&str>) -> String {
    let out = match input {
        Some(i) => c.kubectl_stdin(args, i),
        None => c.kubectl(args),
    };
    assert!(
        out.status.success(),
        "kubectl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).to_string()
}

fn checker(name: &str, spec: &str) -> String {
    let spec: String = spec.lines().map(|l| format!("  {l}\n")).collect();
    format!(
        "apiVersion: test.network.io/v1alpha1\nkind: WebChecker\nmetadata:\n  name: {name}\nspec:\n  intervalSeconds: 2\n{spec}"
    )
}

fn apply(c: &Cluster, ns: &str, yaml: &str) {
    kubectl_ok(c, &["apply", "-n", ns, "-f", "-"], Some(yaml));
}

/// A Node object whose kubelet listens on `port` of each of `addresses`.
fn create_node(c: &Cluster, name: &str, addresses: &[&str], port: u16) {
    let addrs: String = addresses
        .iter()
        .map(|a| format!("  - {{type: InternalIP, address: '{a}'}}\n"))
        .collect();
    let yaml = format!(
        "apiVersion: v1\nkind: Node\nmetadata:\n  name: {name}\nstatus:\n  addresses:\n{addrs}  daemonEndpoints:\n    kubeletEndpoint:\n      Port: {port}\n"
    );
    kubectl_ok(c, &["create", "-f", "-"], Some(&yaml));
}

async fn probes(op: &Operator, ns: &str, name: &str, reason: &str) -> f64 {
    let m = op.metrics().await.unwrap_or_default();
    metric(
        &m,
        "webchecker_probes_total",
        &[("namespace", ns), ("name", name), ("reason", reason)],
    )
    .unwrap_or(0.0)
}

/// Waits until the operator probed `name` twice more with `reason` and
/// its Ready condition says so; returns the condition's message.
async fn settled(op: &Operator, api: &Api<WebChecker>, name: &str, reason: &str) -> String {
    let ns = api.namespace().unwrap().to_string();
    let before = probes(op, &ns, name, reason).await;
    eventually(
        Duration::from_secs(45),
        &format!("{ns}/{name}: two more probes with reason {reason}"),
        || async { (probes(op, &ns, name, reason).await >= before + 2.0).then_some(()) },
    )
    .await;
    eventually(
        Duration::from_secs(30),
        &format!("{ns}/{name}: Ready reason {reason}"),
        || async {
            let c = api
                .get_opt(name)
                .await
                .ok()
                .flatten()?
                .status?
                .condition("Ready")?
                .clone();
            (c.reason == reason).then_some(c.message)
        },
    )
    .await
}

/// The API server's addresses as the cluster publishes them: the
/// ClusterIP of default/kubernetes and the EndpointSlice's address:port.
async fn published_api_server(c: &Cluster) -> (String, SocketAddr) {
    let client = c.client().await;
    let svc: Api<Service> = Api::namespaced(client.clone(), "default");
    let ip = svc
        .get("kubernetes")
        .await
        .unwrap()
        .spec
        .unwrap()
        .cluster_ip
        .unwrap();
    let slices: Api<EndpointSlice> = Api::namespaced(client, "default");
    let ep = eventually(
        Duration::from_secs(30),
        "the API server's EndpointSlice",
        || async {
            let s = slices.get_opt("kubernetes").await.ok().flatten()?;
            let addr = s.endpoints.as_ref()?.first()?.addresses.first()?.clone();
            let port = s.ports.as_ref()?.first()?.port?;
            Some(SocketAddr::new(addr.parse().ok()?, port as u16))
        },
    )
    .await;
    assert_eq!(ep.ip().to_string(), ADVERTISED);
    (ip, ep)
}

fn api_port(c: &Cluster) -> u16 {
    let kc = std::fs::read_to_string(&c.kubeconfig).unwrap();
    let server = kc
        .lines()
        .find_map(|l| l.trim().strip_prefix("server:"))
        .expect("server in kubeconfig")
        .trim()
        .trim_matches('"');
    server.rsplit(':').next().unwrap().parse().unwrap()
}

fn with_fast(extra: &[&str]) -> Vec<String> {
    FAST_LEASES
        .iter()
        .chain(extra)
        .map(|s| s.to_string())
        .collect()
}

fn spawn(c: &Cluster, ns: &str, extra: &[&str]) -> Operator {
    let args = with_fast(extra);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    Operator::spawn(c, &format!("op-{ns}"), ns, &args)
}

// ============================================================== end to end

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
            "192.0.2.77:10250 is an address the operator may not probe (a kubelet port of a Node)",
        ),
        (
            "kubelet-ro",
            "http://192.0.2.77:10255".to_string(),
            "(a kubelet port of a Node)",
        ),
        (
            "kubelet-own-port",
            "https://192.0.2.77:31077".to_string(),
            "(a kubelet port of a Node)",
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
/// and the kubelet ports of a Node that appears while the operator runs stay
/// denied, and no connection reaches those listeners.
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

    // A Node appears: its kubelet ports close as soon as the watch sees it.
    // The sentinel (its own kubelet port, nothing listening) turns from
    // ConnectError to Forbidden when the operator knows the Node.
    create_node(c, &format!("node-{ns}"), &[&k], sentinel_port);
    apply(
        c,
        &ns,
        &checker("sentinel", &format!("host: http://{k}:{sentinel_port}")),
    );
    let msg = settled(&op, &api, "sentinel", "Forbidden").await;
    assert!(msg.contains("(a kubelet port of a Node)"), "{msg}");
    for (name, r) in [("kubelet", &kubelet), ("kubelet-ro", &kubelet_ro)] {
        apply(c, &ns, &checker(name, &format!("host: https://{}", r.addr)));
        let msg = settled(&op, &api, name, "Forbidden").await;
        assert!(msg.contains("(a kubelet port of a Node)"), "{name}: {msg}");
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

fn free_port_on(ip: &str) -> u16 {
    std::net::TcpListener::bind(format!("{ip}:0"))
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
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
/// closes the kubelet ports without a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_permission_on_nodes_the_operator_runs_and_says_so() {
    let c = cluster();
    let ns = c.namespace("egress-limited");
    let role = format!("egress-limited-{ns}");
    let rbac = format!(
        r#"apiVersion: v1
kind: ServiceAccount
metadata: {{name: limited, namespace: {ns}}}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {{name: {role}}}
rules:
- {{apiGroups: [test.network.io], resources: [webcheckers], verbs: [get, list, watch, patch]}}
- {{apiGroups: [test.network.io], resources: [webcheckers/status], verbs: [patch]}}
- {{apiGroups: [events.k8s.io], resources: [events], verbs: [create, patch]}}
- {{apiGroups: [""], resources: [namespaces], verbs: [list, watch]}}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {{name: {role}}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: {role}}}
subjects: [{{kind: ServiceAccount, name: limited, namespace: {ns}}}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {{name: leases, namespace: {ns}}}
rules:
- {{apiGroups: [coordination.k8s.io], resources: [leases], verbs: [get, list, watch, create, update, delete]}}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {{name: leases, namespace: {ns}}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: leases}}
subjects: [{{kind: ServiceAccount, name: limited, namespace: {ns}}}]
"#
    );
    kubectl_ok(c, &["apply", "-f", "-"], Some(&rbac));
    let token = kubectl_ok(
        c,
        &["create", "token", "limited", "-n", &ns, "--duration=1h"],
        None,
    );
    let kc = token_kubeconfig(c, &format!("limited-{ns}"), token.trim());
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

    // It probes.
    let k = own_loopback(22);
    let kubelet = Recorder::bind(&format!("{k}:10250")).await;
    let api: Api<WebChecker> = Api::namespaced(c.client().await, &ns);
    apply(
        c,
        &ns,
        &checker("before", &format!("host: http://{}", kubelet.addr)),
    );
    settled(&op, &api, "before", "ProbeSucceeded").await;

    // The admin grants Nodes; a Node at that address exists already.
    create_node(c, &format!("node-{ns}"), &[&k], 10250);
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
    assert!(msg.contains("(a kubelet port of a Node)"), "{msg}");
    let msg = settled(&op, &api, "before", "Forbidden").await;
    assert!(msg.contains("(a kubelet port of a Node)"), "{msg}");
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

fn token_kubeconfig(c: &Cluster, user: &str, token: &str) -> PathBuf {
    let mut kc: serde_yaml::Value =
        serde_yaml::from_str(&std::fs::read_to_string(&c.kubeconfig).unwrap()).unwrap();
    kc["users"] =
        serde_yaml::from_str(&format!("- name: {user}\n  user:\n    token: {token}\n")).unwrap();
    for ctx in kc["contexts"].as_sequence_mut().expect("contexts") {
        ctx["context"]["user"] = serde_yaml::Value::String(user.to_string());
    }
    let path = c.dir.join(format!("kubeconfig-{user}"));
    std::fs::write(&path, serde_yaml::to_string(&kc).unwrap()).unwrap();
    path
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

// ============================================================== proxies (no cluster)

fn plan(yaml: &str) -> webchecker::probe::ProbePlan {
    let spec: WebCheckerSpec = serde_yaml::from_str(yaml).unwrap();
    webchecker::probe::plan(&spec, &|_| Err("no values".into())).unwrap()
}

/// Behind a proxy the operator resolves the target's name and judges every
/// address before the proxy hears of it. Names come from the prober's own
/// table (no system resolver involved).
#[tokio::test]
async fn a_proxied_name_resolving_to_a_denied_address_is_refused_before_the_proxy() {
    let proxy = Recorder::bind("127.0.0.1:0").await;
    let via = format!("proxy: {{url: 'http://{}'}}", proxy.addr);
    let mut p = Prober::new(Some("egress"), AddressPolicy::with_loopback(), 65536);
    let hosts: HashMap<&str, &[&str]> = HashMap::from([
        ("metadata.test", &["169.254.169.254"][..]),
        ("mixed.test", &["192.0.2.1", "[fd00:ec2::254]"][..]),
        ("nat64.test", &["64:ff9b::a9fe:a9fe"][..]),
        ("fine.test", &["192.0.2.1"][..]),
    ]);
    for (h, ips) in &hosts {
        p.static_hosts.insert(
            h.to_string(),
            ips.iter()
                .map(|i| i.trim_matches(['[', ']']).parse().unwrap())
                .collect(),
        );
    }
    // What a name resolves to is not quoted, only why it is refused.
    for (url, why) in [
        (
            "http://metadata.test",
            "metadata.test resolves to an address the operator may not probe (link-local",
        ),
        ("https://metadata.test", "(link-local"),
        (
            "http://mixed.test:8080",
            "(cloud metadata: AWS instance metadata over IPv6)",
        ),
        ("https://nat64.test", "(link-local"),
        (
            "http://169.254.169.254",
            "169.254.169.254 is an address the operator may not probe (link-local",
        ),
    ] {
        let o = p
            .probe(&plan(&format!("host: {url}\n{via}")), "ns", &|| true)
            .await
            .unwrap();
        assert_eq!(o.reason, Reason::Forbidden, "{url}: {o:?}");
        assert!(o.message.contains(why), "{url}: {}", o.message);
        if !url.contains("//169") {
            assert!(
                o.message.contains("the proxy was not asked"),
                "{}",
                o.message
            );
        }
    }
    assert_eq!(proxy.accepts(), 0, "the proxy heard of a denied target");
    // A name with only allowed addresses goes to the proxy, in absolute form.
    let o = p
        .probe(
            &plan(&format!("host: http://fine.test\n{via}")),
            "ns",
            &|| true,
        )
        .await
        .unwrap();
    assert_eq!(o.reason, Reason::ProbeSucceeded, "{o:?}");
    assert_eq!(proxy.heads(), vec!["GET http://fine.test/ HTTP/1.1"]);
    // A proxy at a denied address is not dialled either.
    let o = p
        .probe(
            &plan("host: http://fine.test\nproxy: {url: 'http://169.254.169.254:3128'}"),
            "ns",
            &|| true,
        )
        .await
        .unwrap();
    assert_eq!(o.reason, Reason::Forbidden);
    assert!(
        o.message
            .contains("the proxy 169.254.169.254 is an address"),
        "{}",
        o.message
    );
    // --check-proxied-targets=false: names are the proxy's business (a
    // literal address is still judged).
    p.policy.check_proxied_targets = false;
    let o = p
        .probe(
            &plan(&format!("host: http://metadata.test\n{via}")),
            "ns",
            &|| true,
        )
        .await
        .unwrap();
    assert_eq!(o.reason, Reason::ProbeSucceeded, "{o:?}");
    assert_eq!(proxy.heads()[1], "GET http://metadata.test/ HTTP/1.1");
    let o = p
        .probe(
            &plan(&format!("host: http://169.254.169.254\n{via}")),
            "ns",
            &|| true,
        )
        .await
        .unwrap();
    assert_eq!(o.reason, Reason::Forbidden);
    assert_eq!(proxy.accepts(), 2);
}

/// A restricted namespace's `proxy.url` is judged like its targets; the
/// operator's own proxy (`proxy.fromEnvironment`) is the admin's choice.
#[tokio::test]
async fn a_restricted_namespace_may_use_the_admins_proxy_but_not_its_own() {
    let proxy = Recorder::bind("127.0.0.1:0").await;
    let (tx, rx) = tokio::sync::watch::channel(ClusterAddresses::default());
    tx.send_modify(|c| {
        c.restricted_namespaces.insert("shop".into());
    });
    let policy = AddressPolicy {
        private: vec!["127.0.0.0/8".parse().unwrap()],
        cluster: rx,
        ..AddressPolicy::with_loopback()
    };
    let mut p = Prober::new(Some("egress"), policy, 65536);
    p.env_proxy = webchecker::probe::EnvProxy::parse(
        Some(format!("http://{}", proxy.addr).as_str()),
        None,
        None,
    );
    p.static_hosts
        .insert("public.test".into(), vec!["192.0.2.1".parse().unwrap()]);
    let own = plan(&format!(
        "host: http://public.test\nproxy: {{url: 'http://{}'}}",
        proxy.addr
    ));
    let env = plan("host: http://public.test\nproxy: {fromEnvironment: true}");
    let o = p.probe(&own, "shop", &|| true).await.unwrap();
    assert_eq!(o.reason, Reason::Forbidden, "{o:?}");
    assert!(
        o.message.contains("closed to this namespace"),
        "{}",
        o.message
    );
    assert_eq!(proxy.accepts(), 0);
    let o = p.probe(&env, "shop", &|| true).await.unwrap();
    assert_eq!(o.reason, Reason::ProbeSucceeded, "{o:?}");
    let o = p.probe(&own, "other", &|| true).await.unwrap();
    assert_eq!(o.reason, Reason::ProbeSucceeded, "{o:?}");
    assert_eq!(proxy.accepts(), 2);
}
