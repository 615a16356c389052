//! Part 2: Services as a discovery source (docs/discovery.md, "From a
//! Service") on the real API server. A Service opts in with its own
//! annotation (its Namespace's does not cover it) and gets one checker at
//! its absolute cluster name,
//! `http://<name>.<namespace>.svc.cluster.local.:<port>`, which never goes
//! through the resolver's search list. The kit's name server answers that
//! name here (a node's cluster DNS would), so the checker is probed end to
//! end. The garbage collector that deletes the
//! checker with its Service does not run on this control plane: the
//! ownerReference it follows is checked (tests/probe/discovery.rs says why).

use webchecker::discovery::annotations::{CHECK, PATH, PORT, SCHEME};

use super::discovery::*;
use super::ops::*;
use super::*;

/// A Service `name` with these annotations and (name, port) TCP ports.
fn service(name: &str, annotations: &[(&str, &str)], ports: &[(&str, u16)]) -> String {
    let ann = annotations_block(annotations);
    let ports: String = ports
        .iter()
        .map(|(n, p)| format!("  - {{name: {n}, port: {p}, targetPort: {p}}}\n"))
        .collect();
    format!(
        "apiVersion: v1\nkind: Service\nmetadata:\n  name: {name}\n{ann}spec:\n  selector: {{app: {name}}}\n  ports:\n{ports}"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn services_that_opt_in_themselves_get_a_checker_at_their_cluster_name() {
    let c = cluster();
    let ns = c.namespace("probe-services");
    let client = c.client().await;
    let wcs = checkers(&client, &ns);
    let ip = loopback_ip();
    let target = Server::http(&format!("{ip}:8080"), |_| Answer::ok()).await;
    // Every name of the cluster domain of this namespace answers with the
    // target's address, as a node's cluster DNS answers a Service's.
    Dns::shared().add_zone(&format!("{ns}.svc.cluster.local"), &[ip.parse().unwrap()]);
    // The Namespace opts in: that covers its routes, not its Services.
    kubectl(&["annotate", "namespace", &ns, &format!("{CHECK}=true")]).await;
    apply_ok(&ns, &service("plain", &[], &[("http", 8080)])).await;
    let op = discovering_op(c, &ns).await;
    eventually(Duration::from_secs(30), "Services watched", || async {
        let m = op.scrape().await;
        let listed = metric(&m, "webchecker_discovery_active", &[]) == Some(1.0);
        let on = metric(
            &m,
            "webchecker_discovery_source_watched",
            &[("source", "service")],
        );
        (listed && on == Some(1.0)).then_some(())
    })
    .await;

    let web = |extra: &[(&str, &str)]| {
        let mut ann = vec![(CHECK, "true"), (PATH, "/healthz")];
        ann.extend_from_slice(extra);
        service("web", &ann, &[("metrics", 9090), ("http", 8080)])
    };
    let t = Instant::now();
    apply_ok(&ns, &web(&[])).await;
    let checker = name_of("service", "web", "svc");
    let names = [checker.clone()];
    let took = wait_generated_from(&wcs, "service", "web", &names, t).await;
    println!("a Service annotated: its WebChecker after {took:.2?}");
    assert!(took < WITHIN, "{took:?}");
    let wc = wcs.get(&checker).await.unwrap();
    assert_eq!(
        wc.spec.host,
        format!("http://web.{ns}.svc.cluster.local.:8080")
    );
    assert_eq!(wc.spec.path, "/healthz");
    owned_by_the_service(&client, &wc, &ns, "web").await;
    let host = ready_with_host(&wcs, &checker, &target).await;
    assert_eq!(host, Some(format!("web.{ns}.svc.cluster.local:8080")));
    let sel = format!("{}=web", webchecker::discovery::SOURCE_NAME_LABEL);
    let out = c.kubectl_async(&["get", "wc", "-n", &ns, "-l", &sel]).await;
    println!("$ kubectl get wc -l {sel}\n{}", text(&out.stdout));
    assert_eq!(source_column(&text(&out.stdout)), ["service"]);
    // Listed with the Namespace's opt-in before the annotated one came:
    // nothing for a Service that says nothing itself.
    assert_eq!(
        generated_from(&wcs, "service", "plain").await,
        Vec::<String>::new()
    );

    // The annotations choose the port and the scheme.
    apply_ok(&ns, &web(&[(PORT, "9443"), (SCHEME, "https")])).await;
    let want = format!("https://web.{ns}.svc.cluster.local.:9443");
    eventually(Duration::from_secs(10), "the annotated port", || async {
        wcs.get(&checker).await.ok().filter(|w| w.spec.host == want)
    })
    .await;
    no_http_port_is_said_on_the_service(&client, &ns).await;

    // The annotation removed: the checker goes.
    let t = Instant::now();
    apply_ok(
        &ns,
        &service("web", &[], &[("metrics", 9090), ("http", 8080)]),
    )
    .await;
    let took = wait_generated_from(&wcs, "service", "web", &[], t).await;
    println!("the Service's annotation removed: its WebChecker deleted after {took:.2?}");
}

/// Once `checker` is Ready, the Host header of its first request of
/// `/healthz` at `target`.
async fn ready_with_host(
    wcs: &kube::Api<WebChecker>,
    checker: &str,
    target: &Server,
) -> Option<String> {
    let within = Duration::from_secs(30);
    wait_condition(wcs, checker, "Ready", "True", "ProbeSucceeded", within).await;
    target
        .seen()
        .iter()
        .find(|r| r.uri == "/healthz")
        .and_then(|r| r.headers.get("host").cloned())
}

/// A Service that opts in without a port named http or https: a Warning
/// `NoHTTPPort` on it, and no checker.
async fn no_http_port_is_said_on_the_service(client: &kube::Client, ns: &str) {
    apply_ok(
        ns,
        &service("db", &[(CHECK, "true")], &[("postgres", 5432)]),
    )
    .await;
    let note = warning_note(client, ns, "Service", "db", "NoHTTPPort").await;
    println!("a Service without an HTTP port: Warning NoHTTPPort: {note}");
    assert!(note.contains(PORT), "{note}");
    let wcs = checkers(client, ns);
    assert_eq!(
        generated_from(&wcs, "service", "db").await,
        Vec::<String>::new()
    );
}

/// The checker names its Service (core `v1`) as controller owner, so the
/// garbage collector deletes it with the Service.
async fn owned_by_the_service(client: &kube::Client, wc: &WebChecker, ns: &str, name: &str) {
    use k8s_openapi::api::core::v1::Service;
    let svcs: kube::Api<Service> = kube::Api::namespaced(client.clone(), ns);
    let uid = svcs.get(name).await.unwrap().metadata.uid.unwrap();
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
        ("v1", "Service", name, uid.as_str(), Some(true))
    );
}

/// A Service's checker probes its absolute name: with a pod's resolver
/// settings (`ndots:5`, a search list) a relative `<svc>.<ns>.svc` would be
/// looked up under the search domains first, where the owner of a
/// namespace named `svc` (here: a zone of the test's own) would answer
/// with an address of their choosing. The search domain is never asked,
/// its address never dialled; the Host header has no trailing dot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_services_checker_never_goes_through_the_search_list() {
    let c = cluster();
    let ns = c.namespace("probe-svc-abs");
    let client = c.client().await;
    let wcs = checkers(&client, &ns);
    let (good, evil) = (loopback_ip(), loopback_ip());
    let target = Server::http(&format!("{good}:8080"), |_| Answer::ok()).await;
    let trap = Server::raw(&format!("{evil}:8080"), |_s| async {}).await;
    let search = format!("svc.{ns}-search.test");
    Dns::shared().add(
        &format!("web.{ns}.svc.cluster.local"),
        &[good.parse().unwrap()],
    );
    Dns::shared().add_zone(&search, &[evil.parse().unwrap()]);
    let resolv = Dns::shared().dir().join(format!("resolv-{ns}.conf"));
    std::fs::write(
        &resolv,
        format!(
            "nameserver {}\nsearch {search}\noptions ndots:5\n",
            Dns::shared().addr
        ),
    )
    .unwrap();
    let flag = format!("--resolv-conf={}", resolv.display());
    let op = spawn_op(
        c,
        &format!("op-{ns}"),
        &ns,
        &["--discover-routes", &flag],
        &[],
        "info,webchecker=debug",
    );
    op.wait_ready(Duration::from_secs(60)).await;
    let ann = [(CHECK, "true"), (PATH, "/healthz")];
    apply_ok(&ns, &service("web", &ann, &[("http", 8080)])).await;
    let checker = name_of("service", "web", "svc");
    let host = ready_with_host(&wcs, &checker, &target).await;
    assert_eq!(host, Some(format!("web.{ns}.svc.cluster.local:8080")));
    let asked = Dns::shared().queries_under(&search);
    println!(
        "a Service's checker with ndots:5 and search {search}: Ready, {asked} queries under the search domain, {} connections to its address",
        trap.accepts()
    );
    assert_eq!(asked, 0, "the search list was asked");
    assert_eq!(trap.accepts(), 0, "the search domain's address was dialled");
    drop(op);
}
