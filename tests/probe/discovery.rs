//! Part 2: route discovery (`--discover-routes`, docs/discovery.md) against
//! the real API server, whose Ingress API needs no controller, with the
//! Gateway API CRDs of the pinned release installed (no Gateway controller
//! either: the test writes a Gateway's status as one would). The
//! generated checkers probe port 80 of their hosts: a target listens on
//! port 80 of a loopback address of this test's own, and the kit's name
//! server answers every name under `<namespace>.test` with it (Ingress
//! hosts must be names, not addresses).
//!
//! Deleting an Ingress deletes its checkers through the garbage collector,
//! which this control plane does not run: here the ownerReference is
//! checked; the deletion itself is checked on the real node
//! (tests/node/main.rs), whose kube-controller-manager runs it.

use webchecker::discovery::annotations::{
    CHECK, EXPECTED_STATUS_CODES, FAILURE_THRESHOLD, INTERVAL_SECONDS, PATH, VIA,
};
use webchecker::discovery::{
    FIELD_MANAGER, FINGERPRINT_ANNOTATION, SOURCE_LABEL, SOURCE_NAME_LABEL,
};

use super::ops::*;
use super::support::targets::RecordingTarget;
use super::*;

/// A generated checker's bound from the Ingress's change to the checker
/// (the issue's figure): the leader's watch, one apply, the test's poll.
pub(super) const WITHIN: Duration = Duration::from_secs(2);

/// The name of the checker the `kind` (`source` label) object `source`
/// generates for `host` (through DNS).
pub(super) fn name_of(kind: &str, source: &str, host: &str) -> String {
    webchecker::discovery::names::generated(kind, source, host, None, None)
}

/// The same through the Gateway `gw` of the route's namespace (`ns`).
pub(super) fn name_via(kind: &str, source: &str, host: &str, ns: &str, gw: &str) -> String {
    let key = format!("{ns}/{gw}");
    webchecker::discovery::names::generated(kind, source, host, Some((&key, gw)), None)
}

pub(super) fn ingress(name: &str, annotations: &[(&str, &str)], hosts: &[&str]) -> String {
    let rules: String = hosts
        .iter()
        .map(|h| {
            format!(
                "  - host: {h}\n    http:\n      paths:\n      - path: /\n        pathType: Prefix\n        backend:\n          service: {{name: web, port: {{number: 80}}}}\n"
            )
        })
        .collect();
    let ann = annotations_block(annotations);
    format!(
        "apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata:\n  name: {name}\n{ann}spec:\n  rules:\n{rules}"
    )
}

/// The `annotations:` block of a manifest's metadata (empty without any).
pub(super) fn annotations_block(annotations: &[(&str, &str)]) -> String {
    if annotations.is_empty() {
        return String::new();
    }
    let ann: String = annotations
        .iter()
        .map(|(k, v)| format!("    {k}: {v:?}\n"))
        .collect();
    format!("  annotations:\n{ann}")
}

/// An operator of namespace `ns` with `--discover-routes`, ready.
pub(super) async fn discovering_op(c: &Cluster, ns: &str) -> Operator {
    let op = spawn_op(
        c,
        &format!("op-{ns}"),
        ns,
        &["--discover-routes"],
        &[],
        "info,webchecker=debug",
    );
    op.wait_ready(Duration::from_secs(60)).await;
    op
}

/// The names of the checkers generated from Ingress `source`.
async fn generated(api: &kube::Api<WebChecker>, source: &str) -> Vec<String> {
    generated_from(api, "ingress", source).await
}

/// The names of the checkers generated from the `kind` (label value) object
/// `source`.
pub(super) async fn generated_from(
    api: &kube::Api<WebChecker>,
    kind: &str,
    source: &str,
) -> Vec<String> {
    let lp = kube::api::ListParams::default().labels(&format!(
        "{SOURCE_LABEL}={kind},{SOURCE_NAME_LABEL}={source}"
    ));
    let mut names: Vec<String> = api
        .list(&lp)
        .await
        .map(|l| {
            l.items
                .iter()
                .map(|c| c.metadata.name.clone().unwrap_or_default())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// Waits (polling every 20 ms) until exactly `want` are generated from
/// Ingress `source`; how long after `from` that was.
async fn wait_generated(
    api: &kube::Api<WebChecker>,
    source: &str,
    want: &[String],
    from: Instant,
) -> Duration {
    wait_generated_from(api, "ingress", source, want, from).await
}

pub(super) async fn wait_generated_from(
    api: &kube::Api<WebChecker>,
    kind: &str,
    source: &str,
    want: &[String],
    from: Instant,
) -> Duration {
    let mut want = want.to_vec();
    want.sort();
    let deadline = from + Duration::from_secs(30);
    loop {
        let got = generated_from(api, kind, source).await;
        if got == want {
            return from.elapsed();
        }
        assert!(
            Instant::now() < deadline,
            "checkers of {kind} {source}: {got:?}, want {want:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A loopback address of this test's own (port 80 is then free on it).
pub(super) fn loopback_ip() -> String {
    let r: u32 = rand::random();
    format!(
        "127.{}.{}.{}",
        100 + r % 100,
        (r >> 8) % 256,
        2 + (r >> 16) % 250
    )
}

/// A test's namespace and a zone of it whose every name resolves to a
/// target of its own on port 80.
pub(super) struct Zone {
    pub ns: String,
    pub client: kube::Client,
    pub wcs: kube::Api<WebChecker>,
    /// `<ns>.test`.
    pub zone: String,
    pub target: Server,
}

impl Zone {
    /// Its namespace, client, checkers and zone, to own.
    pub fn parts(&self) -> (String, kube::Client, kube::Api<WebChecker>, String) {
        let z = self;
        (
            z.ns.clone(),
            z.client.clone(),
            z.wcs.clone(),
            z.zone.clone(),
        )
    }
}

/// A fresh namespace (`prefix`-...) and its zone, answered by `answer`.
pub(super) async fn zone(
    prefix: &str,
    answer: impl Fn(&Request) -> Answer + Send + Sync + 'static,
) -> Zone {
    let ns = cluster().namespace(prefix);
    let client = cluster().client().await;
    let wcs = checkers(&client, &ns);
    let zone = format!("{ns}.test");
    let ip = loopback_ip();
    let target = Server::http(&format!("{ip}:80"), answer).await;
    Dns::shared().add_zone(&zone, &[ip.parse().unwrap()]);
    Zone {
        ns,
        client,
        wcs,
        zone,
        target,
    }
}

/// A fresh namespace (`prefix`-...) of the shared control plane, with the
/// Gateway API's CRDs installed: its name, a client, its checkers and its
/// zone `<ns>.test`.
pub(super) async fn gateway_api_namespace(
    prefix: &str,
) -> (String, kube::Client, kube::Api<WebChecker>, String) {
    tokio::task::spawn_blocking(|| cluster().install_gateway_api())
        .await
        .unwrap();
    let ns = cluster().namespace(prefix);
    let client = cluster().client().await;
    let wcs = checkers(&client, &ns);
    let zone = format!("{ns}.test");
    (ns, client, wcs, zone)
}

/// Writes `ip` in the status of Gateway `gw` of `ns`, as its controller
/// would write the address it bound.
pub(super) async fn gateway_address(ns: &str, ip: &str) {
    let status = format!(r#"{{"status":{{"addresses":[{{"type":"IPAddress","value":"{ip}"}}]}}}}"#);
    kubectl(&[
        "-n",
        ns,
        "patch",
        "gateway",
        "gw",
        "--subresource=status",
        "--type=merge",
        "-p",
        &status,
    ])
    .await;
}

pub(super) async fn kubectl(args: &[&str]) {
    let out = cluster().kubectl_async(args).await;
    assert!(
        out.status.success(),
        "kubectl {args:?}: {}",
        text(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ingresses_that_opt_in_get_checkers_that_follow_them() {
    let c = cluster();
    let z = zone("probe-routes", |_| Answer::ok()).await;
    let (ns, client, wcs, zone) = z.parts();
    // Neither it nor its Namespace opts in (yet).
    apply_ok(&ns, &ingress("plain", &[], &[&format!("plain.{zone}")])).await;
    let op = discovering_op(c, &ns).await;
    wait_discovery_active(&op).await;

    let (a, b) = (format!("a.{zone}"), format!("b.{zone}"));
    an_ingress_with_two_hosts_gets_two_checkers(&z, &a, &b).await;

    // A host edited: the old checker goes, the new one comes.
    let d = format!("d.{zone}");
    let t = Instant::now();
    apply_ok(&ns, &shop(&[&a, &d], &[])).await;
    let names = [
        name_of("ingress", "shop", &a),
        name_of("ingress", "shop", &d),
    ];
    let took = wait_generated(&wcs, "shop", &names, t).await;
    println!("a host edited: the old WebChecker deleted and the new one created after {took:.2?}");
    assert!(took < WITHIN, "{took:?}");

    a_hand_set_interval_survives(
        &op,
        &wcs,
        &ns,
        &names[0],
        &shop(&[&a, &d], &[(FAILURE_THRESHOLD, "2")]),
    )
    .await;
    a_bad_annotation_is_named_on_the_ingress(
        &client,
        &ns,
        &shop(&[&a, &d], &[(EXPECTED_STATUS_CODES, "200,2xz")]),
    )
    .await;
    the_namespace_opts_in_and_an_ingress_opts_out(&wcs, &ns, &zone).await;

    // The Ingress opts out: its checkers go.
    let t = Instant::now();
    apply_ok(&ns, &ingress("shop", &[(CHECK, "false")], &[&a, &d])).await;
    let took = wait_generated(&wcs, "shop", &[], t).await;
    println!("the Ingress opted out: its WebCheckers deleted after {took:.2?}");
    print_discovery_writes(&op).await;
}

/// Ingress shop, opted in (probing /healthz every 2 s), with these hosts and
/// these annotations more.
fn shop(hosts: &[&str], extra: &[(&str, &str)]) -> String {
    let mut ann = vec![(CHECK, "true"), (PATH, "/healthz"), (INTERVAL_SECONDS, "2")];
    ann.extend_from_slice(extra);
    ingress("shop", &ann, hosts)
}

/// Ingress shop with hosts `a` and `b`: a checker for each, within
/// `WITHIN`, that probes its host, shown in the SOURCE column and owned by
/// the Ingress.
async fn an_ingress_with_two_hosts_gets_two_checkers(z: &Zone, a: &str, b: &str) {
    let t = Instant::now();
    apply_ok(&z.ns, &shop(&[a, b], &[])).await;
    let names = [name_of("ingress", "shop", a), name_of("ingress", "shop", b)];
    let took = wait_generated(&z.wcs, "shop", &names, t).await;
    println!("an Ingress with two hosts annotated: its two WebCheckers after {took:.2?}");
    assert!(took < WITHIN, "{took:?}");
    for n in &names {
        wait_condition(
            &z.wcs,
            n,
            "Ready",
            "True",
            "ProbeSucceeded",
            Duration::from_secs(30),
        )
        .await;
    }
    let hosts: std::collections::BTreeSet<String> = z
        .target
        .seen()
        .iter()
        .filter(|r| r.uri == "/healthz")
        .filter_map(|r| r.headers.get("host").cloned())
        .collect();
    assert!(hosts.contains(a) && hosts.contains(b), "{hosts:?}");
    let sel = format!("{SOURCE_NAME_LABEL}=shop");
    let out = cluster()
        .kubectl_async(&["get", "wc", "-n", &z.ns, "-l", &sel])
        .await;
    println!("$ kubectl get wc -l {sel}\n{}", text(&out.stdout));
    assert_eq!(source_column(&text(&out.stdout)), ["ingress", "ingress"]);
    owned_by_the_ingress(&z.client, &z.wcs, &z.ns, &names[0]).await;
}

/// Waits (30 s at most) until the operator's route discovery is active.
async fn wait_discovery_active(op: &Operator) {
    eventually(
        Duration::from_secs(30),
        "route discovery active",
        || async {
            (metric(&op.scrape().await, "webchecker_discovery_active", &[]) == Some(1.0))
                .then_some(())
        },
    )
    .await;
}

/// How many applies and deletes the operator's route discovery made.
async fn print_discovery_writes(op: &Operator) {
    let m = op.scrape().await;
    println!(
        "applies: {:?} applied, {:?} conflict, {:?} error; deletes: {:?}",
        metric(
            &m,
            "webchecker_discovery_applies_total",
            &[("result", "applied")]
        ),
        metric(
            &m,
            "webchecker_discovery_applies_total",
            &[("result", "conflict")]
        ),
        metric(
            &m,
            "webchecker_discovery_applies_total",
            &[("result", "error")]
        ),
        metric(
            &m,
            "webchecker_discovery_deletes_total",
            &[("result", "deleted")]
        ),
    );
}

/// The SOURCE column of each row of a `kubectl get wc` table.
pub(super) fn source_column(table: &str) -> Vec<String> {
    let mut lines = table.lines();
    let head = lines.next().unwrap_or_default();
    let (from, to) = (head.find("SOURCE").unwrap(), head.find("AGE").unwrap());
    lines
        .map(|l| {
            l.get(from..to.min(l.len()))
                .unwrap_or("")
                .trim()
                .to_string()
        })
        .collect()
}

/// The field managers of a checker.
pub(super) fn field_managers(wc: &WebChecker) -> Vec<String> {
    let fields = wc.metadata.managed_fields.iter().flatten();
    fields.filter_map(|m| m.manager.clone()).collect()
}

/// The checker names its Ingress as controller owner (the garbage collector
/// deletes it with the Ingress) and is applied by discovery's field manager.
async fn owned_by_the_ingress(
    client: &kube::Client,
    wcs: &kube::Api<WebChecker>,
    ns: &str,
    name: &str,
) {
    use k8s_openapi::api::networking::v1::Ingress;
    let ing: kube::Api<Ingress> = kube::Api::namespaced(client.clone(), ns);
    let uid = ing.get("shop").await.unwrap().metadata.uid.unwrap();
    let wc = wcs.get(name).await.unwrap();
    let owners = wc.metadata.owner_references.clone().unwrap_or_default();
    assert_eq!(owners.len(), 1, "{owners:?}");
    assert_eq!(
        (
            owners[0].kind.as_str(),
            owners[0].name.as_str(),
            owners[0].uid.as_str(),
            owners[0].controller
        ),
        ("Ingress", "shop", uid.as_str(), Some(true))
    );
    assert_eq!(wc.spec.interval_seconds, 2);
    assert_eq!(wc.spec.path, "/healthz");
    let managers = field_managers(&wc);
    assert!(managers.iter().any(|m| m == FIELD_MANAGER), "{managers:?}");
    assert!(
        wc.metadata
            .annotations
            .unwrap_or_default()
            .contains_key(FINGERPRINT_ANNOTATION),
        "the fingerprint annotation"
    );
}

/// A person sets intervalSeconds by hand; the next change of the route
/// applies its new field and leaves the hand-set value (a conflict, then an
/// apply without the field).
async fn a_hand_set_interval_survives(
    op: &Operator,
    wcs: &kube::Api<WebChecker>,
    ns: &str,
    name: &str,
    updated: &str,
) {
    kubectl(&[
        "-n",
        ns,
        "patch",
        "wc",
        name,
        "--type=merge",
        "-p",
        r#"{"spec":{"intervalSeconds":3}}"#,
    ])
    .await;
    apply_ok(ns, updated).await;
    let wc = eventually(
        Duration::from_secs(10),
        "failureThreshold 2 applied",
        || async {
            wcs.get(name)
                .await
                .ok()
                .filter(|w| w.spec.failure_threshold == Some(2))
        },
    )
    .await;
    assert_eq!(wc.spec.interval_seconds, 3, "the hand-set value survives");
    // The object changes before the operator has read the API server's
    // answer and counted it.
    eventually(Duration::from_secs(10), "the conflict counted", || async {
        let conflicts = metric(
            &op.scrape().await,
            "webchecker_discovery_applies_total",
            &[("result", "conflict")],
        );
        conflicts.filter(|n| *n >= 1.0)
    })
    .await;
    println!(
        "a hand-set intervalSeconds (3) survived a route update that applied failureThreshold 2"
    );
}

/// A bad annotation value: a Warning Event on the Ingress naming it.
async fn a_bad_annotation_is_named_on_the_ingress(client: &kube::Client, ns: &str, manifest: &str) {
    apply_ok(ns, manifest).await;
    let note = warning_note(client, ns, "Ingress", "shop", "InvalidAnnotation").await;
    assert!(note.contains(EXPECTED_STATUS_CODES), "{note}");
    println!("a bad annotation: Warning InvalidAnnotation on the Ingress: {note}");
}

/// Annotating the Namespace opts in its Ingresses that say nothing; one
/// that says "false" stays out.
async fn the_namespace_opts_in_and_an_ingress_opts_out(
    wcs: &kube::Api<WebChecker>,
    ns: &str,
    zone: &str,
) {
    apply_ok(
        ns,
        &ingress("optout", &[(CHECK, "false")], &[&format!("optout.{zone}")]),
    )
    .await;
    assert_eq!(
        generated(wcs, "plain").await,
        Vec::<String>::new(),
        "not opted in"
    );
    let t = Instant::now();
    kubectl(&["annotate", "namespace", ns, &format!("{CHECK}=true")]).await;
    let want = [name_of("ingress", "plain", &format!("plain.{zone}"))];
    let took = wait_generated(wcs, "plain", &want, t).await;
    println!(
        "the Namespace opted in: the Ingress that says nothing got its WebChecker after {took:.2?}"
    );
    assert_eq!(
        generated(wcs, "optout").await,
        Vec::<String>::new(),
        "opted out"
    );
}

/// An HTTPRoute of the Gateway API, in this test's namespace.
pub(super) fn httproute(name: &str, annotations: &[(&str, &str)], hosts: &[&str]) -> String {
    let ann = annotations_block(annotations);
    format!(
        "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata:\n  name: {name}\n{ann}spec:\n  parentRefs: [{{name: gw}}]\n  hostnames: {hosts:?}\n  rules:\n  - backendRefs: [{{name: web, port: 80}}]\n"
    )
}

/// The Gateway `gw`: an HTTP listener on `http_port` for every name, an
/// HTTPS one on `https_port` for `secure`.
pub fn gateway(http_port: u16, https_port: u16, secure: &str) -> String {
    format!(
        "apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata:\n  name: gw\nspec:\n  gatewayClassName: test\n  listeners:\n  - {{name: web, port: {http_port}, protocol: HTTP}}\n  - name: tls\n    port: {https_port}\n    protocol: HTTPS\n    hostname: {secure}\n    tls: {{mode: Terminate, certificateRefs: [{{name: gw-cert}}]}}\n"
    )
}

/// HTTPRoutes (the Gateway API's own CRDs): two hostnames give two checkers
/// owned by the route; with `via: gateway`, the checkers connect to the
/// address a Gateway controller wrote in the Gateway's status, naming the
/// route's hostname as Host (the witness's log) and as SNI (the TLS
/// target's); a hand-set interval survives a route update; a route of a
/// Namespace that does not opt in gets nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn httproutes_get_checkers_and_are_probed_through_their_gateway() {
    let c = cluster();
    let (ns, client, wcs, zone) = gateway_api_namespace("probe-httproutes").await;
    // Names of the zone resolve to an address where nothing listens on the
    // Gateway's ports: only connectTo reaches the targets.
    Dns::shared().add_zone(&zone, &[loopback_ip().parse().unwrap()]);
    let witness = Witness::start().await;
    let secure = format!("secure.{zone}");
    let leaf = Leaf::self_signed(&[&secure]);
    let tls = RecordingTarget::https(&leaf, None, |_| Answer::ok()).await;
    apply_ok(&ns, &gateway(witness.addr.port(), tls.port(), &secure)).await;
    apply_ok(&ns, &httproute("plain", &[], &[&format!("plain.{zone}")])).await;
    let op = discovering_op(c, &ns).await;
    eventually(Duration::from_secs(30), "HTTPRoutes watched", || async {
        let m = op.scrape().await;
        let on = [("source", "httproute")];
        (metric(&m, "webchecker_discovery_source_watched", &on) == Some(1.0)).then_some(())
    })
    .await;

    let (a, b) = (format!("a.{zone}"), format!("b.{zone}"));
    let t = Instant::now();
    let shop = httproute("shop", &[(CHECK, "true")], &[&a, &b]);
    apply_ok(&ns, &shop).await;
    let names = [
        name_of("httproute", "shop", &a),
        name_of("httproute", "shop", &b),
    ];
    let took = wait_generated_from(&wcs, "httproute", "shop", &names, t).await;
    println!("an HTTPRoute with two hostnames annotated: its two WebCheckers after {took:.2?}");
    assert!(took < WITHIN, "{took:?}");
    owned_by_the_route(&client, &wcs, &ns, "shop", &names[0]).await;
    assert_eq!(
        wcs.get(&names[0]).await.unwrap().spec.host,
        format!("http://{a}")
    );

    through_the_gateway(&op, &wcs, &ns, &zone, &witness, &tls).await;
    assert_eq!(
        generated_from(&wcs, "httproute", "plain").await,
        Vec::<String>::new(),
        "neither the route nor its Namespace opts in"
    );
}

/// `via: gateway`: nothing while the Gateway has no address; once its
/// status has one, the witness sees the route's hostname as Host on the
/// HTTP listener's port, the TLS target its hostname as SNI.
async fn through_the_gateway(
    op: &Operator,
    wcs: &kube::Api<WebChecker>,
    ns: &str,
    zone: &str,
    witness: &Witness,
    tls: &RecordingTarget,
) {
    let (www, secure) = (format!("www.{zone}"), format!("secure.{zone}"));
    let edge = |extra: &[(&str, &str)]| {
        let mut ann = vec![
            (CHECK, "true"),
            (VIA, "gateway"),
            (PATH, "/c/edge"),
            (INTERVAL_SECONDS, "1"),
        ];
        ann.extend_from_slice(extra);
        httproute("edge", &ann, &[&www, &secure])
    };
    apply_ok(ns, &edge(&[])).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        generated_from(wcs, "httproute", "edge").await,
        Vec::<String>::new(),
        "no address in the Gateway's status yet"
    );
    let t = Instant::now();
    gateway_address(ns, "127.0.0.1").await;
    let names = [
        name_via("httproute", "edge", &www, ns, "gw"),
        name_via("httproute", "edge", &secure, ns, "gw"),
    ];
    let took = wait_generated_from(wcs, "httproute", "edge", &names, t).await;
    println!("the Gateway got an address: the via-gateway WebCheckers after {took:.2?}");
    let wc = wcs.get(&names[0]).await.unwrap();
    let port = witness.addr.port();
    assert_eq!(wc.spec.host, format!("http://{www}:{port}"));
    assert_eq!(wc.spec.connect_to.as_deref(), Some("127.0.0.1"));
    let hit = eventually(Duration::from_secs(10), "the witness probed", || async {
        witness.hits_for("edge").into_iter().next()
    })
    .await;
    assert_eq!(hit.headers.get("host"), Some(&format!("{www}:{port}")));
    println!(
        "the witness saw Host {:?} on 127.0.0.1:{port}",
        hit.headers["host"]
    );
    let sni = eventually(Duration::from_secs(10), "a TLS handshake", || async {
        tls.handshakes().sni.into_iter().next()
    })
    .await;
    assert_eq!(sni.as_deref(), Some(secure.as_str()));
    println!("the TLS target saw SNI {sni:?} on 127.0.0.1:{}", tls.port());
    a_hand_set_interval_survives(op, wcs, ns, &names[0], &edge(&[(FAILURE_THRESHOLD, "2")])).await;
}

/// The checker names its HTTPRoute as controller owner.
async fn owned_by_the_route(
    client: &kube::Client,
    wcs: &kube::Api<WebChecker>,
    ns: &str,
    route: &str,
    name: &str,
) {
    use webchecker::discovery::gateway_api::HTTPRoute;
    let routes: kube::Api<HTTPRoute> = kube::Api::namespaced(client.clone(), ns);
    let uid = routes.get(route).await.unwrap().metadata.uid.unwrap();
    let wc = wcs.get(name).await.unwrap();
    let owners = wc.metadata.owner_references.clone().unwrap_or_default();
    assert_eq!(owners.len(), 1, "{owners:?}");
    let o = &owners[0];
    assert_eq!(
        (
            o.api_version.as_str(),
            o.kind.as_str(),
            o.name.as_str(),
            o.uid.as_str(),
            o.controller
        ),
        (
            "gateway.networking.k8s.io/v1",
            "HTTPRoute",
            route,
            uid.as_str(),
            Some(true)
        )
    );
}

/// The note of a Warning Event with `reason` regarding `kind`/`name` in `ns`,
/// once there is one.
pub(super) async fn warning_note(
    client: &kube::Client,
    ns: &str,
    kind: &str,
    name: &str,
    reason: &str,
) -> String {
    use k8s_openapi::api::events::v1::Event;
    let api: kube::Api<Event> = kube::Api::namespaced(client.clone(), ns);
    eventually(
        Duration::from_secs(10),
        &format!("a Warning Event {reason} on {kind} {name}"),
        || async {
            api.list(&Default::default())
                .await
                .ok()?
                .items
                .into_iter()
                .find_map(|e| {
                    let about = e.regarding.as_ref()?;
                    (about.kind.as_deref() == Some(kind)
                        && about.name.as_deref() == Some(name)
                        && e.type_.as_deref() == Some("Warning")
                        && e.reason.as_deref() == Some(reason))
                    .then(|| e.note.clone().unwrap_or_default())
                })
        },
    )
    .await
}
