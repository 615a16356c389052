//! Part 2: a Gateway that opts in gets a checker of its own, and the
//! checkers of the routes it serves depend on it (docs/discovery.md, "From
//! a Gateway"; docs/dependencies.md). One target stands for the Gateway's
//! data plane: it answers the routes' hostnames 200 and any other name 404
//! (a Gateway that works), and everything 503 while "down". The Gateway
//! going down turns its checker Ready=False with a Warning, and the routes'
//! checkers `DependencyDown` with no Warning of their own; it coming back
//! turns them all Ready again.

use std::sync::atomic::AtomicBool;

use k8s_openapi::api::events::v1::Event;
use webchecker::discovery::annotations::{CHECK, INTERVAL_SECONDS, VIA};
use webchecker::discovery::gateway;

use super::discovery::*;
use super::ops::*;
use super::support::targets::RecordingTarget;
use super::*;

const ROUTES: usize = 4;

/// The Gateway `gw`, opted in, probed every second: one HTTP listener on `port`.
fn opted_in_gateway(port: u16) -> String {
    let ann = annotations_block(&[(CHECK, "true"), (INTERVAL_SECONDS, "1")]);
    format!(
        "apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata:\n  name: gw\n{ann}spec:\n  gatewayClassName: test\n  listeners:\n  - {{name: web, port: {port}, protocol: HTTP}}\n"
    )
}

/// Ready's (status, reason, message) of each named checker, once all have one.
async fn ready_of(wcs: &kube::Api<WebChecker>, names: &[String]) -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    for n in names {
        let Some(c) = condition(wcs, n, "Ready").await else {
            return Vec::new();
        };
        out.push((c.status, c.reason, c.message));
    }
    out
}

/// Names of the checkers that have a Warning Event.
async fn warned(client: &kube::Client, ns: &str) -> Vec<String> {
    let api: kube::Api<Event> = kube::Api::namespaced(client.clone(), ns);
    let mut out: Vec<String> = api
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.type_.as_deref() == Some("Warning"))
        .filter(|e| e.regarding.as_ref().and_then(|r| r.kind.as_deref()) == Some("WebChecker"))
        .filter_map(|e| e.regarding?.name)
        .collect();
    out.sort();
    out.dedup();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateways_checker_is_the_one_its_routes_depend_on() {
    let c = cluster();
    let (ns, client, wcs, zone) = gateway_api_namespace("probe-gateway-checker").await;
    let down = Arc::new(AtomicBool::new(false));
    let routed = format!(".{zone}:");
    let d = down.clone();
    let data_plane = RecordingTarget::http(move |r: &Request| {
        let host = r.headers.get("host").cloned().unwrap_or_default();
        match (d.load(Ordering::SeqCst), host.contains(&routed)) {
            (true, _) => Answer::status(503),
            (false, true) => Answer::ok(),
            (false, false) => Answer::status(404),
        }
    })
    .await;
    let port = data_plane.addr.port();
    apply_ok(&ns, &opted_in_gateway(port)).await;
    let op = discovering_op(c, &ns).await;
    let hosts: Vec<String> = (0..ROUTES).map(|i| format!("r{i}.{zone}")).collect();
    let host_refs: Vec<&str> = hosts.iter().map(String::as_str).collect();
    let ann = [(CHECK, "true"), (VIA, "gateway"), (INTERVAL_SECONDS, "1")];
    apply_ok(&ns, &httproute("shop", &ann, &host_refs)).await;
    gateway_address(&ns, "127.0.0.1").await;

    let t = Instant::now();
    let gw = gateway::checker_name("gw");
    wait_generated_from(&wcs, "gateway", "gw", std::slice::from_ref(&gw), t).await;
    let routes: Vec<String> = hosts
        .iter()
        .map(|h| name_via("httproute", "shop", h, &ns, "gw"))
        .collect();
    wait_generated_from(&wcs, "httproute", "shop", &routes, t).await;
    let g = wcs.get(&gw).await.unwrap();
    assert_eq!(g.spec.host, format!("http://127.0.0.1:{port}"));
    for r in &routes {
        let spec = wcs.get(r).await.unwrap().spec;
        let names = spec.depends_on.and_then(|d| d.names);
        assert_eq!(
            names,
            Some(vec![gw.clone()]),
            "{r} depends on the Gateway's checker"
        );
    }
    println!(
        "the Gateway's checker and its {ROUTES} routes' after {:.2?}",
        t.elapsed()
    );

    let all: Vec<String> = std::iter::once(gw.clone()).chain(routes).collect();
    the_gateway_down_pages_once(&client, &wcs, &ns, &all, &down).await;
    drop(op);
}

/// Every checker of `all` (the Gateway's first) Ready; the data plane down:
/// the Gateway's checker down with a Warning, the routes' `DependencyDown`
/// with none; back up: all Ready, still the one Warning.
async fn the_gateway_down_pages_once(
    client: &kube::Client,
    wcs: &kube::Api<WebChecker>,
    ns: &str,
    all: &[String],
    down: &AtomicBool,
) {
    let gw = all[0].clone();
    let (client, wcs) = (client.clone(), wcs.clone());
    eventually(Duration::from_secs(30), "every checker Ready", || async {
        let r = ready_of(&wcs, all).await;
        (r.len() == all.len() && r.iter().all(|(s, _, _)| s == "True")).then_some(())
    })
    .await;

    let t = Instant::now();
    down.store(true, Ordering::SeqCst);
    let states = eventually(
        Duration::from_secs(30),
        "the routes DependencyDown",
        || async {
            let r = ready_of(&wcs, all).await;
            let routes_wait = r
                .iter()
                .skip(1)
                .all(|(s, why, _)| s == "False" && why == "DependencyDown");
            (r.len() == all.len() && r[0].0 == "False" && routes_wait).then_some(r)
        },
    )
    .await;
    println!(
        "the Gateway down: its checker {:?}, the routes DependencyDown after {:.2?}",
        states[0].1,
        t.elapsed()
    );
    assert_eq!(states[0].1, "UnexpectedStatus", "{states:?}");
    for (_, _, message) in &states[1..] {
        assert!(
            message.contains(&gw),
            "names the Gateway's checker: {message}"
        );
    }
    let warned_of = eventually(Duration::from_secs(10), "the Gateway's Warning", || async {
        let w = warned(&client, ns).await;
        w.contains(&gw).then_some(w)
    })
    .await;
    assert_eq!(
        warned_of,
        vec![gw.clone()],
        "only the Gateway's checker pages"
    );

    let t = Instant::now();
    down.store(false, Ordering::SeqCst);
    eventually(
        Duration::from_secs(30),
        "every checker Ready again",
        || async {
            let r = ready_of(&wcs, all).await;
            (r.len() == all.len() && r.iter().all(|(s, _, _)| s == "True")).then_some(())
        },
    )
    .await;
    println!(
        "the Gateway back: every checker Ready after {:.2?}",
        t.elapsed()
    );
    assert_eq!(
        warned(&client, ns).await,
        vec![gw],
        "still only the Gateway's"
    );
}
