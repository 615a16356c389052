//! Route discovery: the opted-in Ingress and HTTPRoute of examples/.

use webchecker::discovery::names;

use super::*;

/// The cluster's Gateway the example's HTTPRoute names (`public`), as a
/// platform team would run it: HTTP, and HTTPS for every name under
/// example.com. No Gateway controller runs here: only its listeners count.
const GATEWAY: &str = "apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata:
  name: public
spec:
  gatewayClassName: public
  listeners:
  - {name: http, port: 80, protocol: HTTP}
  - name: https
    port: 443
    protocol: HTTPS
    hostname: \"*.example.com\"
    tls:
      mode: Terminate
      certificateRefs: [{name: wildcard-example-com}]
";

/// ingress.yaml and httproute.yaml with `--discover-routes`: one checker
/// each, of the name the example's comment gives, owned by its route,
/// probing https://<host>/healthz through the name server, Ready=True.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_opted_in_ingress_and_httproute_get_checkers() {
    tokio::task::spawn_blocking(|| cluster().install_gateway_api())
        .await
        .unwrap();
    let (ns, api) = world("ex-routes").await;
    let ip = loopback_ip();
    let public = PublicCa::new();
    let leaf = public.ca.leaf(&["shop.example.com", "store.example.com"]);
    let hosts = ["shop.example.com", "store.example.com"];
    let web = https_site(ip, &hosts, &leaf, &[("www/healthz", "ok\n")], "").await;
    let out = cluster().apply(&ns, GATEWAY).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let flags = ["--discover-routes", public.flag.as_str()];
    let _op = operator(&ns, &format!("op-{ns}"), &flags).await;

    apply_example(&ns, "ingress.yaml").await;
    apply_example(&ns, "httproute.yaml").await;
    let ready = ("Ready", "True", "ProbeSucceeded");
    for (file, kind, route, host) in [
        (
            "ingress.yaml",
            "Ingress",
            "shop",
            "https://shop.example.com",
        ),
        (
            "httproute.yaml",
            "HTTPRoute",
            "store",
            "https://store.example.com",
        ),
    ] {
        let label = kind.to_ascii_lowercase();
        let h = host.trim_start_matches("https://");
        let name = &names::generated(&label, route, h, None, None);
        let comment = std::fs::read_to_string(example(file)).unwrap();
        assert!(
            comment.contains(&format!(" {name},")),
            "examples/{file} must say the checker's name (`Here: {name},`)"
        );
        wait_condition(&api, name, ready, FIRST).await;
        let wc = api.get(name).await.unwrap();
        assert_eq!(
            (wc.spec.host.as_str(), wc.spec.path.as_str()),
            (host, "/healthz")
        );
        let owners = wc.metadata.owner_references.unwrap_or_default();
        assert!(
            owners
                .iter()
                .any(|o| o.kind == kind && o.name == route && o.controller == Some(true)),
            "{name}: owners {owners:?}"
        );
        let log = web.access_log();
        assert!(
            log.contains(&format!("{h} - \"GET /healthz HTTP/1.1\" 200")),
            "{name}: nginx's log:\n{log}"
        );
    }
    show(&ns).await;
    the_routes_fall_and_the_cluster_says_why(&ns, &api, web).await;
}

/// nginx stops and the Gateway's controller stops accepting the route (the
/// test writes the route's status as a controller does): each generated
/// checker's diagnosis names its route's trouble, in its status and its
/// Warning. This cluster has no ingress controller, so the Ingress has no
/// address.
async fn the_routes_fall_and_the_cluster_says_why(ns: &str, api: &Api<WebChecker>, web: Nginx) {
    let status = r#"{"status": {"parents": [{"parentRef": {"name": "public"}, "controllerName": "example.net/gateway",
        "conditions": [{"type": "Accepted", "status": "False", "reason": "NotAllowedByListeners",
        "message": "no listener allows this route", "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": 1}]}]}}"#;
    let patch = [
        "patch",
        "httproute",
        "store",
        "-n",
        ns,
        "--subresource=status",
        "--type=merge",
        "-p",
        status,
    ];
    let out = cluster().kubectl_async(&patch).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    drop(web);
    for (kind, route, host, cause, message) in [
        (
            "httproute",
            "store",
            "store.example.com",
            "RouteNotAccepted",
            "HTTPRoute store is not accepted by Gateway public: NotAllowedByListeners",
        ),
        (
            "ingress",
            "shop",
            "shop.example.com",
            "NoLoadBalancerAddress",
            "Ingress shop has no load-balancer address: no ingress controller has taken it",
        ),
    ] {
        let name = names::generated(kind, route, host, None, None);
        let d = eventually(after_change(10), &format!("{name}'s diagnosis"), || async {
            let s = api.get(&name).await.ok()?.status?;
            s.condition("Ready").filter(|c| c.status == "False")?;
            s.diagnosis
        })
        .await;
        assert_eq!((d.cause.as_str(), d.message.as_str()), (cause, message));
    }
    show(ns).await;
}
