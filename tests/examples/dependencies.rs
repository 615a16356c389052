//! spec.dependsOn: a gateway and two routes behind it, on nginx.

use k8s_openapi::api::events::v1::Event;
use kube::api::ListParams;

use super::*;

/// (type, reason) of the Events about `name`.
async fn events_of(ns: &str, name: &str) -> Vec<(String, String)> {
    let api: Api<Event> = Api::namespaced(cluster().client().await, ns);
    let mut out: Vec<(String, String)> = api
        .list(&ListParams::default())
        .await
        .unwrap()
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
        .map(|e| (e.type_.unwrap_or_default(), e.reason.unwrap_or_default()))
        .collect();
    out.sort();
    out
}

fn warnings(events: &[(String, String)]) -> Vec<&str> {
    events
        .iter()
        .filter(|(t, _)| t == "Warning")
        .map(|(_, r)| r.as_str())
        .collect()
}

/// dependencies.yaml: while nginx is down the gateway pages (a Warning)
/// and both routes say DependencyDown with Normal Events; nginx back
/// without the cart's page, the cart pages on its own and search recovers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routes_behind_a_down_gateway_blame_it_and_page_only_on_their_own() {
    let (ns, api) = world("ex-deps").await;
    let ip = loopback_ip();
    let public = PublicCa::new();
    let leaf = public.ca.leaf(&["shop.example.com"]);
    let all = [
        ("www/healthz", "ok\n"),
        ("www/cart/health", "ok\n"),
        ("www/search/health", "ok\n"),
    ];
    let web = https_site(ip, &["shop.example.com"], &leaf, &all, "").await;
    let _op = operator(&ns, &format!("op-{ns}"), &[&public.flag]).await;
    apply_example(&ns, "dependencies.yaml").await;
    for name in ["gateway", "cart", "search"] {
        wait_condition(&api, name, ("Ready", "True", "ProbeSucceeded"), FIRST).await;
    }
    let every = interval_of(&api, "cart").await;

    // The gateway goes: the three fail together.
    drop(web);
    wait_condition(
        &api,
        "gateway",
        ("Ready", "False", "ConnectError"),
        after_change(every),
    )
    .await;
    for name in ["cart", "search"] {
        let c = wait_condition(
            &api,
            name,
            ("Ready", "False", "DependencyDown"),
            // Its failure waits for the gateway's to be known.
            after_change(2 * every),
        )
        .await;
        assert!(
            c.message
                .starts_with("depends on gateway, which is down (ConnectError)"),
            "{name}: {}",
            c.message
        );
    }
    show(&ns).await;
    assert_eq!(warnings(&events_of(&ns, "gateway").await), ["ConnectError"]);
    for name in ["cart", "search"] {
        let events = events_of(&ns, name).await;
        assert_eq!(warnings(&events), Vec::<&str>::new(), "{name}: {events:?}");
        assert!(
            events.contains(&("Normal".into(), "DependencyDown".into())),
            "{name}: {events:?}"
        );
    }

    // Back, but without the cart's page: the cart pages on its own.
    let some = [("www/healthz", "ok\n"), ("www/search/health", "ok\n")];
    let _web = https_site(ip, &["shop.example.com"], &leaf, &some, "").await;
    wait_condition(
        &api,
        "gateway",
        ("Ready", "True", "ProbeSucceeded"),
        after_change(every),
    )
    .await;
    wait_condition(
        &api,
        "search",
        ("Ready", "True", "ProbeSucceeded"),
        after_change(every),
    )
    .await;
    wait_condition(
        &api,
        "cart",
        ("Ready", "False", "UnexpectedStatus"),
        after_change(2 * every),
    )
    .await;
    let cart = eventually(after_change(every), "the cart's own Warning", || async {
        let events = events_of(&ns, "cart").await;
        (warnings(&events) == ["UnexpectedStatus"]).then_some(events)
    })
    .await;
    println!("cart: {cart:?}");
    assert_eq!(
        warnings(&events_of(&ns, "search").await),
        Vec::<&str>::new()
    );
    show(&ns).await;
}
