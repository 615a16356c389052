//! Part 2: GRPCRoutes (the Gateway API's own CRD, no Gateway controller:
//! the test writes the Gateway's status as one would) get gRPC health
//! checkers: through DNS one per hostname (`grpcs://` where the Gateway's
//! listener for it is HTTPS), owned by the route and labelled `grpcroute`;
//! an annotation a gRPC check has no use for is a Warning on the route;
//! with `via: gateway` the checker calls grpc-go's health server (the
//! kit's `GrpcHealth`, standing in for the Gateway) and turns Ready, and
//! the `grpc-service` annotation names the service asked.

use webchecker::discovery::annotations::{CHECK, GRPC_SERVICE, INTERVAL_SECONDS, PATH, VIA};

use super::discovery::*;
use super::ops::*;
use super::support::peers::GrpcHealth;
use super::*;

/// A GRPCRoute of the Gateway API, in this test's namespace, under Gateway `gw`.
fn grpcroute(name: &str, annotations: &[(&str, &str)], hosts: &[&str]) -> String {
    let ann = annotations_block(annotations);
    format!(
        "apiVersion: gateway.networking.k8s.io/v1\nkind: GRPCRoute\nmetadata:\n  name: {name}\n{ann}spec:\n  parentRefs: [{{name: gw}}]\n  hostnames: {hosts:?}\n  rules:\n  - backendRefs: [{{name: orders, port: 50051}}]\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discovery_grpcroutes_get_grpc_health_checkers_probed_through_their_gateway() {
    let c = cluster();
    let (ns, client, wcs, zone) = gateway_api_namespace("probe-grpcroutes").await;
    // Names of the zone resolve where nothing listens: only connectTo
    // reaches the health server.
    Dns::shared().add_zone(&zone, &[loopback_ip().parse().unwrap()]);
    let grpc = tokio::task::spawn_blocking(|| {
        GrpcHealth::start(
            &[("", "SERVING"), ("shop.Stock", "NOT_SERVING")],
            None,
            None,
        )
    })
    .await
    .unwrap();
    let port = grpc.addr().port();
    let secure = format!("secure.{zone}");
    apply_ok(&ns, &gateway(port, 443, &secure)).await;
    apply_ok(&ns, &grpcroute("plain", &[], &[&format!("plain.{zone}")])).await;
    let op = discovering_op(c, &ns).await;
    eventually(Duration::from_secs(30), "GRPCRoutes watched", || async {
        let m = op.scrape().await;
        let on = [("source", "grpcroute")];
        (metric(&m, "webchecker_discovery_source_watched", &on) == Some(1.0)).then_some(())
    })
    .await;
    let routes = GrpcRoutes {
        ns,
        client,
        wcs,
        zone,
        secure,
        port,
    };
    routes.through_dns().await;
    routes.through_the_gateway().await;
    assert_eq!(
        generated_from(&routes.wcs, "grpcroute", "plain").await,
        Vec::<String>::new(),
        "neither the route nor its Namespace opts in"
    );
    drop(op);
}

/// The namespace of the test, its zone, and the port of its health server.
struct GrpcRoutes {
    ns: String,
    client: kube::Client,
    wcs: kube::Api<WebChecker>,
    /// `<ns>.test`.
    zone: String,
    /// The host the Gateway's listener serves over HTTPS.
    secure: String,
    /// The health server's.
    port: u16,
}

impl GrpcRoutes {
    async fn through_dns(&self) {
        let (ns, client, wcs) = (&self.ns, &self.client, &self.wcs);
        let (zone, secure) = (&self.zone, &self.secure);
        // Through DNS: one checker per hostname, a port always (the CRD's rule
        // for grpc:// hosts); the path annotation is named on the route and
        // left out (spec.path stays "/", which the CRD wants on a gRPC check).
        let a = format!("a.{zone}");
        let t = Instant::now();
        let orders = grpcroute(
            "orders",
            &[(CHECK, "true"), (PATH, "/healthz")],
            &[&a, secure],
        );
        apply_ok(ns, &orders).await;
        let names = [
            name_of("grpcroute", "orders", &a),
            name_of("grpcroute", "orders", secure),
        ];
        let took = wait_generated_from(wcs, "grpcroute", "orders", &names, t).await;
        println!("a GRPCRoute with two hostnames annotated: its two WebCheckers after {took:.2?}");
        assert!(took < WITHIN, "{took:?}");
        let wc = wcs.get(&names[0]).await.unwrap();
        assert_eq!(wc.spec.host, format!("grpc://{a}:80"));
        assert_eq!(wc.spec.path, "/");
        assert!(wc.spec.grpc.is_none(), "the server as a whole");
        let wc = wcs.get(&names[1]).await.unwrap();
        assert_eq!(wc.spec.host, format!("grpcs://{secure}:443"));
        owned_by_the_grpcroute(client, wcs, ns, "orders", &names[0]).await;
        let sel = "webchecker.test.network.io/source-name=orders";
        let out = cluster()
            .kubectl_async(&["get", "wc", "-n", ns, "-l", sel])
            .await;
        println!("$ kubectl get wc -l {sel}\n{}", text(&out.stdout));
        assert_eq!(
            source_column(&text(&out.stdout)),
            ["grpcroute", "grpcroute"]
        );
        let note = warning_note(client, ns, "GRPCRoute", "orders", "InvalidAnnotation").await;
        assert!(note.contains(PATH), "{note}");
        println!("an HTTP annotation on a GRPCRoute: Warning InvalidAnnotation: {note}");
    }

    async fn through_the_gateway(&self) {
        let (ns, wcs) = (&self.ns, &self.wcs);
        let (zone, port) = (&self.zone, self.port);
        // Through the Gateway: its address is the health server's.
        gateway_address(ns, "127.0.0.1").await;
        let www = format!("www.{zone}");
        let edge = |extra: &[(&str, &str)]| {
            let mut ann = vec![(CHECK, "true"), (VIA, "gateway"), (INTERVAL_SECONDS, "1")];
            ann.extend_from_slice(extra);
            grpcroute("edge", &ann, &[&www])
        };
        let t = Instant::now();
        apply_ok(ns, &edge(&[])).await;
        let name = name_via("grpcroute", "edge", &www, ns, "gw");
        let took =
            wait_generated_from(wcs, "grpcroute", "edge", std::slice::from_ref(&name), t).await;
        println!("a via-gateway GRPCRoute: its WebChecker after {took:.2?}");
        let wc = wcs.get(&name).await.unwrap();
        assert_eq!(wc.spec.host, format!("grpc://{www}:{port}"));
        assert_eq!(wc.spec.connect_to.as_deref(), Some("127.0.0.1"));
        let within = Duration::from_secs(30);
        let ready = wait_condition(wcs, &name, "Ready", "True", "ProbeSucceeded", within).await;
        assert!(ready.message.contains("SERVING"), "{}", ready.message);
        println!("probed through the Gateway's address: {}", ready.message);

        apply_ok(ns, &edge(&[(GRPC_SERVICE, "shop.Stock")])).await;
        let down = wait_condition(wcs, &name, "Ready", "False", "NotServing", within).await;
        let svc = wcs
            .get(&name)
            .await
            .unwrap()
            .spec
            .grpc
            .and_then(|g| g.service);
        assert_eq!(svc.as_deref(), Some("shop.Stock"));
        println!("grpc-service: shop.Stock: {}", down.message);
    }
}

/// The checker names its GRPCRoute as controller owner.
async fn owned_by_the_grpcroute(
    client: &kube::Client,
    wcs: &kube::Api<WebChecker>,
    ns: &str,
    route: &str,
    name: &str,
) {
    use webchecker::discovery::gateway_api::GRPCRoute;
    let routes: kube::Api<GRPCRoute> = kube::Api::namespaced(client.clone(), ns);
    let uid = routes.get(route).await.unwrap().metadata.uid.unwrap();
    let owners = wcs
        .get(name)
        .await
        .unwrap()
        .metadata
        .owner_references
        .unwrap_or_default();
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
            "GRPCRoute",
            route,
            uid.as_str(),
            Some(true)
        )
    );
}
