//! API Priority and Fairness: the chart's FlowSchema serves the operator's
//! Lease requests and the TokenReviews of the asks it serves at the
//! built-in `leader-election` priority level.
//!
//! Rendered, it covers the Lease verbs of the chart's Role, in the release
//! namespace, and `create` of `tokenreviews`, for the chart's
//! ServiceAccount, and nothing else. On a real API server, the FlowSchema
//! and the priority level that served a request are named (by UID) in its
//! `X-Kubernetes-PF-*` response headers: each Lease verb and a TokenReview
//! of the operator's ServiceAccount are ours at `leader-election`; its other
//! requests, its Leases elsewhere, other users' Leases and TokenReviews are
//! not. Under load,
//! a renewal is answered at once while the operator's own burst of status
//! writes holds every seat of `workload-low`, where the same ServiceAccount's
//! other requests wait (and where its Leases would wait without the
//! FlowSchema).

use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::Client;
use kube::client::Body;
use kube::config::{KubeConfigOptions, Kubeconfig};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

use super::rbac::{grants, operator_lease_grants};
use super::rendered::*;
use super::*;
use support::release::{service_account, text};
use support::{eventually, kubeconfig_server, metric};

/// The built-in priority level of kube-controller-manager's and
/// kube-scheduler's Leases, where the chart puts the operator's.
const LEADER_ELECTION: &str = "leader-election";
/// The built-in FlowSchema of every ServiceAccount's requests, and its level.
const SERVICE_ACCOUNTS: &str = "service-accounts";
const WORKLOAD_LOW: &str = "workload-low";
const MEMBER_LABEL: &str = "webchecker.test.network.io/member";

fn yaml(s: &str) -> Value {
    serde_yaml::from_str(s).unwrap()
}

/// (apiGroup, resource, verb) of the FlowSchema's resource rules, as
/// `grants` reads a Role's rules.
fn flow_schema_grants(rule: &Value) -> std::collections::BTreeSet<(String, String, String)> {
    let mut as_role = serde_yaml::Mapping::new();
    as_role.insert("rules".into(), rule["resourceRules"].clone());
    grants(&Value::Mapping(as_role))
}

#[test]
fn the_flow_schema_covers_the_lease_verbs_of_the_role_and_nothing_else() {
    let docs = render(&[]);
    let fs = one(&docs, "FlowSchema");
    assert_eq!(
        fs["apiVersion"].as_str(),
        Some("flowcontrol.apiserver.k8s.io/v1")
    );
    assert_eq!(
        fs["metadata"]["name"].as_str(),
        Some(format!("{FULLNAME}-leases").as_str())
    );
    let spec = &fs["spec"];
    assert_eq!(
        spec["priorityLevelConfiguration"]["name"].as_str(),
        Some(LEADER_ELECTION)
    );
    // Ahead of every built-in schema that could match the ServiceAccount:
    // service-accounts (9000) and, for a release in kube-system,
    // kube-system-service-accounts (900). Behind exempt and probes (1, 2).
    let precedence = spec["matchingPrecedence"].as_u64().expect("precedence");
    assert!(
        (3..900).contains(&precedence),
        "matchingPrecedence {precedence}"
    );
    assert_eq!(spec["distinguisherMethod"]["type"].as_str(), Some("ByUser"));
    let rules = spec["rules"].as_sequence().expect("rules");
    assert_eq!(rules.len(), 1, "{rules:?}");
    let rule = &rules[0];
    assert_eq!(
        rule["subjects"],
        yaml(&format!(
            "[{{kind: ServiceAccount, serviceAccount: {{name: {FULLNAME}, namespace: {RELEASE_NS}}}}}]"
        ))
    );
    assert!(rule["nonResourceRules"].is_null(), "{rule:?}");
    let resource_rules = rule["resourceRules"].as_sequence().unwrap();
    assert_eq!(resource_rules.len(), 2, "{resource_rules:?}");
    // The TokenReviews of the asks the replicas serve: cluster-scoped, create.
    assert_eq!(
        resource_rules[1],
        yaml(
            "{apiGroups: [authentication.k8s.io], resources: [tokenreviews], clusterScope: true, verbs: [create]}"
        )
    );
    // The namespace where the operator keeps its Leases (POD_NAMESPACE).
    assert_eq!(
        resource_rules[0]["namespaces"],
        yaml(&format!("[{RELEASE_NS}]"))
    );
    assert!(
        !resource_rules[0]["clusterScope"]
            .as_bool()
            .unwrap_or_default()
    );
    // Exactly the verbs the operator uses on Leases, those of the Role.
    let role = one_in(&docs, "Role", RELEASE_NS);
    let role_leases: std::collections::BTreeSet<_> = grants(role)
        .into_iter()
        .filter(|(g, r, _)| g == "coordination.k8s.io" && r == "leases")
        .collect();
    let lease_rule = yaml(&format!(
        "{{resourceRules: [{}]}}",
        serde_json::to_string(&resource_rules[0]).unwrap()
    ));
    assert_eq!(flow_schema_grants(&lease_rule), operator_lease_grants());
    assert_eq!(flow_schema_grants(&lease_rule), role_leases);

    // The ServiceAccount's name and the precedence follow the values.
    let all_on = render(&["-f", ALL_ON]);
    let fs = one(&all_on, "FlowSchema");
    assert_eq!(fs["spec"]["matchingPrecedence"].as_u64(), Some(300));
    let subject = &fs["spec"]["rules"][0]["subjects"][0]["serviceAccount"];
    assert_eq!(subject["name"].as_str(), Some("webchecker"));
    assert_eq!(subject["namespace"].as_str(), Some(RELEASE_NS));
    // Off on request, nothing else changed.
    let off = render(&["--set", "flowSchema.enabled=false"]);
    assert!(!kinds(&off).contains("FlowSchema"));
    assert_eq!(off.len() + 1, docs.len());
}

/// A UID by kind and name (cluster-scoped objects).
async fn uid(cluster: &Cluster, kind: &str, name: &str) -> String {
    let v = kubectl_json(cluster, &["get", kind, name]).await;
    v["metadata"]["uid"].as_str().expect("uid").to_string()
}

/// The UIDs the `X-Kubernetes-PF-*` headers name.
struct Uids {
    ours: String,
    leader_election: String,
    service_accounts: String,
    workload_low: String,
}

impl Uids {
    /// Waits until the API server's flow control took our FlowSchema in: its
    /// controller writes the `Dangling` condition after it has digested the
    /// configuration that holds it (false: the level exists).
    async fn of_release(cluster: &Cluster, flow_schema: &str) -> Uids {
        eventually(
            Duration::from_secs(30),
            "the FlowSchema's Dangling condition",
            || async {
                let fs = kubectl_json(cluster, &["get", "flowschema", flow_schema]).await;
                let conditions = fs["status"]["conditions"].as_array()?;
                let c = conditions.iter().find(|c| c["type"] == "Dangling")?;
                assert_eq!(c["status"], "False", "the FlowSchema dangles: {c}");
                Some(())
            },
        )
        .await;
        Uids {
            ours: uid(cluster, "flowschema", flow_schema).await,
            leader_election: uid(cluster, "prioritylevelconfiguration", LEADER_ELECTION).await,
            service_accounts: uid(cluster, "flowschema", SERVICE_ACCOUNTS).await,
            workload_low: uid(cluster, "prioritylevelconfiguration", WORKLOAD_LOW).await,
        }
    }
}

/// A client with the credentials of `kubeconfig` that takes each answer as
/// it comes: kube's default client sends a request again after a 429, which
/// would hide a renewal's wait in a queue (15 s a try) behind its retries.
async fn client_without_retries(kubeconfig: &Path) -> Client {
    let kc = Kubeconfig::read_from(kubeconfig).unwrap();
    let mut cfg = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .unwrap();
    cfg.default_retry = false;
    Client::try_from(cfg).unwrap()
}

/// One request as the API server answered it.
#[derive(Debug)]
struct Served {
    status: u16,
    /// UIDs of the FlowSchema and the priority level that served it.
    flow_schema: String,
    level: String,
    body: serde_json::Value,
    took: Duration,
}

impl Served {
    fn assert_ours(&self, uids: &Uids, what: &str) {
        assert!(
            (200..300).contains(&self.status),
            "{what}: {} {}",
            self.status,
            self.body
        );
        assert_eq!(
            self.flow_schema, uids.ours,
            "{what}: served by FlowSchema {} (service-accounts: {}), not the chart's",
            self.flow_schema, uids.service_accounts
        );
        assert_eq!(
            self.level, uids.leader_election,
            "{what}: priority level {}, not leader-election",
            self.level
        );
    }

    fn assert_service_accounts(&self, uids: &Uids, what: &str) {
        assert_eq!(
            self.flow_schema, uids.service_accounts,
            "{what} ({}): FlowSchema {}, not service-accounts (the chart's: {})",
            self.status, self.flow_schema, uids.ours
        );
        assert_eq!(
            self.level, uids.workload_low,
            "{what}: priority level {}",
            self.level
        );
    }
}

/// Sends one request as `client`; `read` false leaves the body unread (a watch).
async fn send(
    client: &Client,
    method: &str,
    path: &str,
    body: Option<&serde_json::Value>,
    read: bool,
) -> Served {
    let req = http::Request::builder()
        .method(method)
        .uri(path)
        .header("content-type", "application/json")
        .body(Body::from(
            body.map(|b| serde_json::to_vec(b).unwrap())
                .unwrap_or_default(),
        ))
        .unwrap();
    let t = Instant::now();
    let resp = client
        .send(req)
        .await
        .unwrap_or_else(|e| panic!("{method} {path}: {e}"));
    let took = t.elapsed();
    let (flow_schema, level) = {
        let header = |name: &str| {
            resp.headers()
                .get(name)
                .map(|v| v.to_str().unwrap().to_string())
                .unwrap_or_else(|| panic!("{method} {path}: no {name} header: {resp:?}"))
        };
        (
            header("x-kubernetes-pf-flowschema-uid"),
            header("x-kubernetes-pf-prioritylevel-uid"),
        )
    };
    let status = resp.status().as_u16();
    let body = if read {
        let bytes = resp.into_body().collect_bytes().await.unwrap();
        serde_json::from_slice(&bytes)
            .unwrap_or_else(|_| String::from_utf8_lossy(&bytes).trim().into())
    } else {
        serde_json::Value::Null
    };
    Served {
        status,
        flow_schema,
        level,
        body,
        took,
    }
}

fn now_micro() -> String {
    chrono::Utc::now()
        .format("%Y-%m-%dT%H:%M:%S%.6fZ")
        .to_string()
}

fn leases_path(ns: &str) -> String {
    format!("/apis/coordination.k8s.io/v1/namespaces/{ns}/leases")
}

/// A membership Lease as a replica creates it.
fn member_lease(name: &str) -> serde_json::Value {
    json!({
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": name, "labels": {MEMBER_LABEL: "true"}},
        "spec": {"holderIdentity": name, "leaseDurationSeconds": 10, "renewTime": now_micro()},
    })
}

/// A renewal as the membership does it: read the Lease, replace it with a
/// new renewTime (the read's resourceVersion as precondition). Both requests
/// must be ours; returns the time both took.
async fn renew(client: &Client, ns: &str, name: &str, uids: &Uids, what: &str) -> Duration {
    let path = format!("{}/{name}", leases_path(ns));
    let got = send(client, "GET", &path, None, true).await;
    got.assert_ours(uids, &format!("get ({what})"));
    let mut lease = got.body;
    lease["spec"]["renewTime"] = json!(now_micro());
    let put = send(client, "PUT", &path, Some(&lease), true).await;
    put.assert_ours(uids, &format!("update ({what})"));
    got.took + put.took
}

const REVIEWS: &str = "/apis/authentication.k8s.io/v1/tokenreviews";

/// A TokenReview of a made-up token, as a replica reviews an ask's token.
fn token_review() -> serde_json::Value {
    json!({
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
        "spec": {"token": "made-up", "audiences": ["webchecker-operator.test.network.io/confirm"]},
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operators_lease_requests_are_served_at_leader_election() {
    let cluster = Cluster::shared("chart");
    // A release of its own: the install test owns the README's.
    let (release, ns) = ("apf", "apf");
    let fullname = format!("{release}-webchecker-operator");
    let flow_schema = format!("{fullname}-leases");
    helm_install(cluster, release, ns, &[]).await;
    let uids = Uids::of_release(cluster, &flow_schema).await;
    let (kubeconfig, _) = service_account(cluster, ns, &fullname).await;
    let operator = client_without_retries(&kubeconfig).await;

    // Every Lease verb of the Role, as the membership, the election, the
    // member view and the sharder use them.
    let leases = leases_path(ns);
    let name = "webchecker-member-apf-0";
    let one = format!("{leases}/{name}");
    send(&operator, "POST", &leases, Some(&member_lease(name)), true)
        .await
        .assert_ours(&uids, "create");
    let took = renew(&operator, ns, name, &uids, "renewal").await;
    println!("get + update of a Lease: {took:?}");
    let selected = format!("{leases}?labelSelector={MEMBER_LABEL}%3Dtrue");
    send(&operator, "GET", &selected, None, true)
        .await
        .assert_ours(&uids, "list");
    let watch = format!("{selected}&watch=true&timeoutSeconds=1");
    send(&operator, "GET", &watch, None, false)
        .await
        .assert_ours(&uids, "watch");
    send(&operator, "DELETE", &one, None, true)
        .await
        .assert_ours(&uids, "delete");
    // A TokenReview, as a replica reviews an ask's token.
    send(&operator, "POST", REVIEWS, Some(&token_review()), true)
        .await
        .assert_ours(&uids, "a TokenReview");

    nothing_else_is_ours(cluster, &operator, ns, &uids).await;

    // flowSchema.enabled=false: the FlowSchema goes, and the operator's Leases
    // are back with every ServiceAccount's requests.
    ok(
        cluster_helm(
            cluster,
            &[
                "upgrade",
                release,
                CHART,
                "-n",
                ns,
                "--reuse-values",
                "--set",
                "flowSchema.enabled=false",
            ],
        )
        .await,
        "helm upgrade",
    );
    let gone = kubectl(cluster, &["get", "flowschema", &flow_schema]).await;
    assert!(
        !gone.status.success() && text(&gone.stderr).contains("NotFound"),
        "the FlowSchema after flowSchema.enabled=false: {}",
        text(&gone.stderr)
    );
    eventually(
        Duration::from_secs(30),
        "the operator's Leases at service-accounts",
        || async {
            let s = send(&operator, "GET", &leases, None, true).await;
            (s.flow_schema == uids.service_accounts).then_some(s)
        },
    )
    .await
    .assert_service_accounts(&uids, "the operator's Leases without the FlowSchema");
    ok(
        cluster_helm(cluster, &["uninstall", release, "-n", ns]).await,
        "helm uninstall",
    );
}

/// Nothing else: the same ServiceAccount's other requests, its Leases in
/// another namespace (refused by RBAC, classified all the same), another
/// ServiceAccount's Leases in the release namespace.
async fn nothing_else_is_ours(cluster: &Cluster, operator: &Client, ns: &str, uids: &Uids) {
    let checkers = format!("/apis/test.network.io/v1alpha1/namespaces/{ns}/webcheckers");
    send(operator, "GET", &checkers, None, true)
        .await
        .assert_service_accounts(uids, "the operator's list of WebCheckers");
    let elsewhere = send(operator, "GET", &leases_path("default"), None, true).await;
    assert_eq!(elsewhere.status, 403);
    elsewhere.assert_service_accounts(uids, "the operator's Leases in namespace default");
    ok(
        kubectl(cluster, &["create", "serviceaccount", "tenant", "-n", ns]).await,
        "kubectl create serviceaccount",
    );
    let tenant = client_without_retries(&service_account(cluster, ns, "tenant").await.0).await;
    let theirs = send(&tenant, "GET", &leases_path(ns), None, true).await;
    assert_eq!(theirs.status, 403);
    theirs.assert_service_accounts(uids, "another ServiceAccount's Leases");
    let theirs = send(&tenant, "POST", REVIEWS, Some(&token_review()), true).await;
    theirs.assert_service_accounts(uids, "another ServiceAccount's TokenReview");
}

// ------------------------------------------------------------ under load

/// A small API server: 15 seats in all, `workload-low` a handful of them, so
/// that a burst can hold every seat `workload-low` may ever get (its own and
/// all it may borrow).
const SMALL_API_SERVER: &str = "--max-requests-inflight=10 --max-mutating-requests-inflight=5";

/// Requests on connections of their own (HTTP/1.1 over TLS), written by hand:
/// the head of a request is sent and its body withheld. The API server
/// classifies a request by its head and dispatches it (or queues it); a
/// dispatched request holds a seat of its priority level while the handler
/// waits for the body, until the test sends it. A stand-in for slow requests
/// whose end the test decides.
struct Raw {
    addr: String,
    connector: tokio_rustls::TlsConnector,
    token: String,
}

impl Raw {
    fn new(cluster: &Cluster, kubeconfig: &Path) -> Raw {
        let kc = std::fs::read_to_string(&cluster.kubeconfig).unwrap();
        let addr = kubeconfig_server(&kc)
            .trim_start_matches("https://")
            .to_string();
        let sa: Value =
            serde_yaml::from_str(&std::fs::read_to_string(kubeconfig).unwrap()).unwrap();
        let token = sa["users"][0]["user"]["token"]
            .as_str()
            .expect("token")
            .to_string();
        let mut roots = rustls::RootCertStore::empty();
        for c in CertificateDer::pem_file_iter(cluster.dir.join("pki/ca.crt")).unwrap() {
            roots.add(c.unwrap()).unwrap();
        }
        let cfg = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::aws_lc_rs::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
        Raw {
            addr,
            connector: tokio_rustls::TlsConnector::from(Arc::new(cfg)),
            token,
        }
    }

    /// Sends the head of a merge patch of `path` whose body will be `{}`.
    async fn hold_patch(&self, path: &str) -> TlsStream<TcpStream> {
        let tcp = TcpStream::connect(&self.addr).await.unwrap();
        let host = self.addr.rsplit_once(':').unwrap().0.to_string();
        let name = ServerName::try_from(host).unwrap();
        let mut tls = self.connector.connect(name, tcp).await.unwrap();
        let head = format!(
            "PATCH {path} HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {}\r\n\
             Content-Type: application/merge-patch+json\r\nContent-Length: 2\r\n\r\n",
            self.addr, self.token
        );
        tls.write_all(head.as_bytes()).await.unwrap();
        tls.flush().await.unwrap();
        tls
    }
}

/// Sends the withheld body; the status of the answer.
async fn release(mut tls: TlsStream<TcpStream>) -> u16 {
    tls.write_all(b"{}").await.unwrap();
    tls.flush().await.unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 512];
    while !got.windows(2).any(|w| w == b"\r\n") {
        let n = tls.read(&mut buf).await.unwrap();
        assert!(n > 0, "connection closed before the status line");
        got.extend_from_slice(&buf[..n]);
    }
    let line = String::from_utf8_lossy(&got);
    line.split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("status line: {line}"))
}

/// Flow control of `workload-low` as the API server counts it.
struct Level {
    executing: f64,
    waiting: f64,
}

async fn flow_control(admin: &Client, name: &str) -> f64 {
    let text = admin
        .request_text(http::Request::get("/metrics").body(vec![]).unwrap())
        .await
        .unwrap();
    metric(&text, name, &[("priority_level", WORKLOAD_LOW)])
        .unwrap_or_else(|| panic!("{name} of {WORKLOAD_LOW} in /metrics"))
}

async fn workload_low(admin: &Client) -> Level {
    Level {
        executing: flow_control(admin, "apiserver_flowcontrol_current_executing_requests").await,
        waiting: flow_control(admin, "apiserver_flowcontrol_current_inqueue_requests").await,
    }
}

/// Waits until `workload-low` holds `n` requests, executing or waiting, with
/// some waiting: every seat it has is taken.
async fn saturated_with(admin: &Client, n: usize, what: &str) -> Level {
    eventually(Duration::from_secs(10), what, || async {
        let l = workload_low(admin).await;
        (l.executing + l.waiting == n as f64 && l.waiting > 0.0).then_some(l)
    })
    .await
}

/// `(n, U)`: the size of a burst that keeps any further request of its flow
/// from being served before it is released (see the test), and the upper
/// limit of seats of `workload-low`.
async fn burst_size(cluster: &Cluster, admin: &Client) -> (usize, usize) {
    let upper = flow_control(admin, "apiserver_flowcontrol_upper_limit_seats").await as usize;
    let pl = kubectl_json(
        cluster,
        &["get", "prioritylevelconfiguration", WORKLOAD_LOW],
    )
    .await;
    let queuing = &pl["spec"]["limited"]["limitResponse"]["queuing"];
    let hand = queuing["handSize"].as_u64().expect("handSize") as usize;
    let limit = queuing["queueLengthLimit"].as_u64().unwrap() as usize;
    let n = upper + hand * (upper + 1);
    assert!(
        upper + 3 <= limit,
        "queues too short for the burst: {queuing}"
    );
    (n, upper)
}

/// WebChecker burst (its status is what the burst writes), and membership
/// Lease `lease` created by the operator's ServiceAccount.
async fn burst_checker_and_member_lease(
    cluster: &Cluster,
    operator: &Client,
    lease: &str,
    uids: &Uids,
) {
    let checker = support::checker_yaml("burst", "http://127.0.0.1:9", "/", 30, "");
    ok(
        cluster.apply(RELEASE_NS, &checker).await,
        "kubectl apply a WebChecker",
    );
    send(
        operator,
        "POST",
        &leases_path(RELEASE_NS),
        Some(&member_lease(lease)),
        true,
    )
    .await
    .assert_ours(uids, "create");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewal_is_answered_while_the_operators_own_burst_fills_workload_low() {
    let cluster: &'static Cluster =
        Box::leak(Box::new(Cluster::start_with("chart-apf", SMALL_API_SERVER)));
    helm_install(cluster, RELEASE, RELEASE_NS, &[]).await;
    let uids = Uids::of_release(cluster, &format!("{FULLNAME}-leases")).await;
    let admin = cluster.client().await;
    let (kubeconfig, _) = service_account(cluster, RELEASE_NS, FULLNAME).await;
    let operator = client_without_retries(&kubeconfig).await;
    let lease = "webchecker-member-wc-0";
    burst_checker_and_member_lease(cluster, &operator, lease, &uids).await;
    let idle = renew(&operator, RELEASE_NS, lease, &uids, "renewal").await;

    // The burst: status writes of the operator's ServiceAccount, each holding
    // a seat until released. Seats open only by borrowing, up to the level's
    // upper limit U; the ServiceAccount's flow spreads its waiting requests
    // over the `handSize` queues of its hand, each request joining the
    // shortest. With U + handSize x (U + 1) requests, any further request of
    // the flow has at least U ahead of it in its queue: it cannot be served
    // before the burst is released, however many seats open meanwhile. All
    // until the release must fit in the 15 s a request may wait in a queue
    // (then 429): it takes under a second.
    let (n, upper) = burst_size(cluster, &admin).await;
    let raw = Raw::new(cluster, &kubeconfig);
    let status =
        format!("/apis/test.network.io/v1alpha1/namespaces/{RELEASE_NS}/webcheckers/burst/status");
    let t = Instant::now();
    let held = futures::future::join_all((0..n).map(|_| raw.hold_patch(&status))).await;
    let level = saturated_with(&admin, n, "the burst in workload-low").await;
    println!(
        "burst of {n} status writes (workload-low: upper limit {upper} seats): {} executing, {} waiting, after {:?}",
        level.executing,
        level.waiting,
        t.elapsed()
    );

    // The same ServiceAccount's own read of a WebChecker waits behind it
    // (on a client of its own: the operator's coordination has API clients of
    // its own, and the renewal keeps its warm connection)...
    let reader = client_without_retries(&kubeconfig).await;
    let control = tokio::spawn({
        let path =
            format!("/apis/test.network.io/v1alpha1/namespaces/{RELEASE_NS}/webcheckers/burst");
        async move { send(&reader, "GET", &path, None, true).await }
    });
    saturated_with(&admin, n + 1, "the WebChecker read waiting in workload-low").await;
    // ... while its renewal is answered at once, at leader-election.
    let loaded = renew(
        &operator,
        RELEASE_NS,
        lease,
        &uids,
        "renewal under the burst",
    )
    .await;
    assert!(
        !control.is_finished(),
        "the WebChecker read was answered: workload-low was not full"
    );
    let after = workload_low(&admin).await;
    assert_eq!(
        after.executing + after.waiting,
        (n + 1) as f64,
        "the burst was still held when the renewal was answered"
    );

    let t = Instant::now();
    let answers = futures::future::join_all(held.into_iter().map(release)).await;
    let released = t.elapsed();
    let read = control.await.unwrap();
    println!(
        "renewal (get + update): {idle:?} idle, {loaded:?} under the burst; the same \
         ServiceAccount's WebChecker read waited {:?}, until the burst was released \
         (all {n} answered in {released:?})",
        read.took
    );
    assert!(
        answers.iter().all(|s| *s == 200),
        "the burst's answers (429: it waited in its queue too long): {answers:?}"
    );
    assert_eq!(read.status, 200, "{}", read.body);
    read.assert_service_accounts(&uids, "the WebChecker read");
}
