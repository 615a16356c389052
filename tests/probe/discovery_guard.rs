//! Part 2: a generated checker gives its route's author no more reach than
//! a checker they write by hand (DESIGN.md, "Tenancy"): the forgery guard
//! judges the addresses a route points its checker at. A tenant's Ingress
//! whose status (as its controller, or anyone who may write it, set it)
//! names an address the operator may not probe (`via: load-balancer`, so
//! `spec.connectTo`), a tenant's Gateway whose status names one (its
//! checker probes that address), and a tenant's Service whose cluster name
//! resolves to one (a headless Service with Endpoints of their choosing would), give
//! checkers that are Ready=False with `Forbidden`, a `CheckerDown` on the
//! route, and no connection to the denied address, round after round.

use webchecker::discovery::annotations::{CHECK, INTERVAL_SECONDS, VIA};
use webchecker::discovery::route_events::CHECKER_DOWN;

use super::discovery::*;
use super::ops::*;
use super::*;

/// A Service `name` with one TCP port named http on 80, opted in.
fn http_service(name: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Service\nmetadata:\n  name: {name}\n  annotations:\n    {CHECK}: \"true\"\n    {INTERVAL_SECONDS}: \"1\"\nspec:\n  ports:\n  - {{name: http, port: 80}}\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routes_pointing_at_denied_addresses_are_forbidden_and_never_dialled() {
    let c = cluster();
    let (ns, client, wcs, _) = gateway_api_namespace("probe-routes-guard").await;
    // The denied address: a listener of this test's own that counts the
    // connections it gets (it should get none).
    let denied_ip = loopback_ip();
    let denied = Server::raw(&format!("{denied_ip}:80"), |_s| async {}).await;
    // The route's own name resolves to an allowed address: only where the
    // route points the checker is denied.
    let zone = format!("{ns}.test");
    let allowed = loopback_ip();
    let _allowed = Server::http(&format!("{allowed}:80"), |_| Answer::ok()).await;
    Dns::shared().add_zone(&zone, &[allowed.parse().unwrap()]);
    Dns::shared().add(
        &format!("meta.{ns}.svc.cluster.local"),
        &[denied_ip.parse().unwrap()],
    );
    let deny = format!("--deny-cidrs=169.254.0.0/16,{denied_ip}/32");
    let op = spawn_op(
        c,
        &format!("op-{ns}"),
        &ns,
        &["--discover-routes", &deny],
        &[],
        "info,webchecker=debug",
    );
    op.wait_ready(Duration::from_secs(60)).await;

    let host = format!("lb.{zone}");
    ingress_whose_status_names(&ns, &host, &denied_ip).await;
    apply_ok(&ns, &http_service("meta")).await;
    gateway_whose_status_names(&ns, &denied_ip).await;

    let bound = Duration::from_secs(30);
    let lb = name_of("ingress", "lb", &host);
    let meta = name_of("service", "meta", "svc");
    let by_status = wait_condition(&wcs, &lb, "Ready", "False", "Forbidden", bound).await;
    let wc = wcs.get(&lb).await.unwrap();
    assert_eq!(wc.spec.connect_to.as_deref(), Some(denied_ip.as_str()));
    println!("Ingress status -> {denied_ip}: {}", by_status.message);
    assert!(
        by_status.message.contains(&format!(
            "connectTo {denied_ip} is an address the operator may not probe"
        )),
        "{}",
        by_status.message
    );
    let by_name = wait_condition(&wcs, &meta, "Ready", "False", "Forbidden", bound).await;
    println!("Service name -> {denied_ip}: {}", by_name.message);
    assert!(
        by_name
            .message
            .contains("resolves only to addresses the operator may not probe"),
        "{}",
        by_name.message
    );
    assert!(!by_name.message.contains(&denied_ip), "{}", by_name.message);
    let gw = webchecker::discovery::gateway::checker_name("gw");
    let by_gateway = wait_condition(&wcs, &gw, "Ready", "False", "Forbidden", bound).await;
    assert_eq!(
        wcs.get(&gw).await.unwrap().spec.host,
        format!("http://{denied_ip}")
    );
    println!("Gateway status -> {denied_ip}: {}", by_gateway.message);
    let down = eventually(bound, "CheckerDown on the Ingress", || async {
        events_of(&client, &ns, "lb")
            .await
            .into_iter()
            .find(|(_, reason, _)| reason == CHECKER_DOWN)
    })
    .await;
    assert!(down.2.contains("Forbidden"), "{down:?}");

    // Round after round (each checker every second), still no connection.
    three_forbidden_probes_of_each(&op, &[&lb, &meta, &gw], bound).await;
    assert_eq!(
        denied.accepts(),
        0,
        "no connection reached the denied address"
    );
}

/// Ingress lb for `host` (via: load-balancer), its status naming `ip` as
/// its load balancer's address.
async fn ingress_whose_status_names(ns: &str, host: &str, ip: &str) {
    let ann = [
        (CHECK, "true"),
        (VIA, "load-balancer"),
        (INTERVAL_SECONDS, "1"),
    ];
    apply_ok(ns, &ingress("lb", &ann, &[host])).await;
    let status = format!(r#"{{"status":{{"loadBalancer":{{"ingress":[{{"ip":"{ip}"}}]}}}}}}"#);
    kubectl(&[
        "-n",
        ns,
        "patch",
        "ingress",
        "lb",
        "--subresource=status",
        "--type=merge",
        "-p",
        &status,
    ])
    .await;
}

/// Gateway gw, opted in, probed every second, with an HTTP listener on 80
/// and its status naming `ip` as its address.
async fn gateway_whose_status_names(ns: &str, ip: &str) {
    let ann = annotations_block(&[(CHECK, "true"), (INTERVAL_SECONDS, "1")]);
    apply_ok(
        ns,
        &format!(
            "apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata:\n  name: gw\n{ann}spec:\n  gatewayClassName: test\n  listeners:\n  - {{name: web, port: 80, protocol: HTTP}}\n"
        ),
    )
    .await;
    gateway_address(ns, ip).await;
}

/// Waits (`bound`) until `op` made three forbidden probes of each checker.
async fn three_forbidden_probes_of_each(op: &Operator, names: &[&str], bound: Duration) {
    eventually(bound, "three forbidden probes of each", || async {
        let m = op.scrape().await;
        let n = |name: &str| {
            metric(
                &m,
                "webchecker_probes_total",
                &[("name", name), ("reason", "Forbidden")],
            )
            .unwrap_or(0.0)
        };
        names.iter().all(|c| n(c) >= 3.0).then_some(())
    })
    .await;
}
