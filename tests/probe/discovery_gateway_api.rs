//! Part 2: route discovery on a control plane without the Gateway API (a
//! cluster of its own: the shared one gets the CRDs from the HTTPRoute
//! test). Ingresses are discovered as usual while HTTPRoutes are not
//! watched (`webchecker_discovery_source_watched{source="httproute"} 0`,
//! one log line, no failing watch; GRPCRoutes alike); installing the CRDs
//! starts HTTPRoute and GRPCRoute discovery within the leader's look period
//! (30 s), no restart needed.

use webchecker::discovery::annotations::CHECK;

use super::discovery::*;
use super::ops::*;
use super::*;

/// How often the leader looks for the Gateway API while it is absent
/// (src/discovery/session.rs, GATEWAY_API_LOOK).
const LOOK: Duration = Duration::from_secs(30);
/// Room beyond one look for a loaded 2-core machine: the discovery call,
/// the two new watches' lists.
const ROOM: Duration = Duration::from_secs(15);

/// `kubectl apply` on this test's own control plane.
async fn apply_in(c: &Cluster, ns: &str, yaml: &str) {
    let out = c.apply(ns, yaml).await;
    assert!(out.status.success(), "{}\n{yaml}", text(&out.stderr));
}

fn watched(m: &str, source: &str) -> Option<f64> {
    metric(
        m,
        "webchecker_discovery_source_watched",
        &[("source", source)],
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_gateway_api_ingresses_are_discovered_and_installing_it_starts_httproutes() {
    let c: &'static Cluster = Box::leak(Box::new(Cluster::start("no-gateway-api")));
    let ns = c.namespace("probe-no-gwapi");
    let client = c.client().await;
    let wcs = checkers(&client, &ns);
    let op = spawn_op(
        c,
        &format!("op-{ns}"),
        &ns,
        &["--discover-routes"],
        &[],
        "info,webchecker=debug",
    );
    op.wait_ready(Duration::from_secs(60)).await;
    eventually(
        Duration::from_secs(30),
        "route discovery active",
        || async {
            let m = op.scrape().await;
            (metric(&m, "webchecker_discovery_active", &[]) == Some(1.0)).then_some(())
        },
    )
    .await;

    let t = Instant::now();
    let host = format!("shop.{ns}.test");
    apply_in(c, &ns, &ingress("shop", &[(CHECK, "true")], &[&host])).await;
    let want = [name_of("ingress", "shop", &host)];
    let took = wait_generated_from(&wcs, "ingress", "shop", &want, t).await;
    println!("no Gateway API: the Ingress's WebChecker after {took:.2?}");
    assert!(took < WITHIN, "{took:?}");
    let m = op.scrape().await;
    assert_eq!(watched(&m, "httproute"), Some(0.0));
    assert_eq!(watched(&m, "grpcroute"), Some(0.0));
    assert_eq!(watched(&m, "ingress"), Some(1.0));
    let restarts = metric(
        &m,
        "webchecker_watch_restarts_total",
        &[("watch", "discovery-httproutes")],
    );
    assert!(
        restarts.unwrap_or(0.0) == 0.0,
        "no HTTPRoute watch failing on 404: {restarts:?}"
    );
    let said = op
        .log_text()
        .matches("no HTTPRoutes (the Gateway API's CRDs")
        .count();
    assert_eq!(said, 1, "said once");
    let said = op.log_text().matches("no GRPCRoutes (").count();
    assert_eq!(said, 1, "said once of GRPCRoutes too");

    // The leader looks every 30 s, from its start: the CRDs are found at its
    // next look after they are served (the install waits for that), within
    // one period plus room.
    let asked = Instant::now();
    tokio::task::spawn_blocking(move || c.install_gateway_api())
        .await
        .unwrap();
    let served = Instant::now();
    eventually(LOOK + ROOM, "HTTPRoutes and GRPCRoutes watched", || async {
        let m = op.scrape().await;
        (watched(&m, "httproute") == Some(1.0) && watched(&m, "grpcroute") == Some(1.0))
            .then_some(())
    })
    .await;
    println!(
        "the Gateway API installed (CRDs served after {:.1?}): HTTPRoutes and GRPCRoutes watched {:.1?} later (looked for every {LOOK:?})",
        served - asked,
        served.elapsed()
    );
    // A CRD just installed may answer 429 "storage is (re)initializing"
    // while the API server fills its watch cache: the watch retries, and the
    // route below shows it works. Any other failure of theirs is a bug.
    let log = op.log_text();
    let failures: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("watch failed"))
        .filter(|l| l.contains("discovery-httproutes") || l.contains("discovery-grpcroutes"))
        .filter(|l| !l.contains("storage is (re)initializing"))
        .collect();
    assert!(failures.is_empty(), "{failures:#?}");

    let t = Instant::now();
    let route = format!(
        "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata:\n  name: web\n  annotations:\n    {CHECK}: \"true\"\nspec:\n  hostnames: [\"web.{ns}.test\"]\n"
    );
    apply_in(c, &ns, &route).await;
    let want = [name_of("httproute", "web", &format!("web.{ns}.test"))];
    let took = wait_generated_from(&wcs, "httproute", "web", &want, t).await;
    println!("and an HTTPRoute's WebChecker after {took:.2?}");
    assert!(took < WITHIN, "{took:?}");
    drop(op);
    c.down();
}
