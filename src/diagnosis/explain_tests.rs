//! The explanations from objects written as the API server returns them.

use super::*;

fn pod(yaml: &str) -> Pod {
    serde_yaml::from_str(yaml).unwrap()
}

/// 2026-12-07T12:00:00Z
fn now() -> Timestamp {
    "2026-12-07T12:00:00Z".parse().unwrap()
}

/// What a Service without a ready endpoint says.
fn unready(service: &str, pods: &[Pod]) -> Diagnosis {
    service_pods(service, pods, false, now()).expect("something to say")
}

fn json(yaml: &str) -> Value {
    serde_yaml::from_str(yaml).unwrap()
}

const CRASHING: &str = "
metadata: {name: cart-7d9f-abc}
status:
  phase: Running
  conditions: [{type: Ready, status: 'False'}, {type: PodScheduled, status: 'True'}]
  containerStatuses:
  - name: app
    image: shop/cart:1.2
    imageID: ''
    ready: false
    restartCount: 5
    state: {waiting: {reason: CrashLoopBackOff, message: 'back-off 2m40s restarting failed container=app; secret=hunter2'}}
    lastState: {terminated: {exitCode: 1, reason: Error, message: 'panic: password hunter2'}}
";

#[test]
fn crashing_pods_are_named_with_their_restarts_and_nothing_they_printed() {
    let mut second = pod(CRASHING);
    second.metadata.name = Some("cart-7d9f-def".into());
    let d = unready("cart", &[pod(CRASHING), second]);
    assert_eq!(d.cause, "CrashLoopBackOff");
    assert_eq!(
        d.message,
        "Service cart has no ready endpoints: pods cart-7d9f-abc, cart-7d9f-def: CrashLoopBackOff (container app, restarted 5 times)"
    );
    assert!(!d.message.contains("hunter2"));
}

#[test]
fn at_most_three_pods_are_named() {
    let pods: Vec<Pod> = (0..5)
        .map(|i| {
            let mut p = pod(CRASHING);
            p.metadata.name = Some(format!("cart-{i}"));
            p
        })
        .collect();
    let d = unready("cart", &pods);
    assert_eq!(
        d.message,
        "Service cart has no ready endpoints: pods cart-0, cart-1, cart-2 and 2 more: CrashLoopBackOff (container app, restarted 5 times)"
    );
}

#[test]
fn each_plain_reason_has_its_cause() {
    let cases = [
        (
            "status: {containerStatuses: [{name: app, image: 'registry.local/cart:9', imageID: '', ready: false, restartCount: 0, state: {waiting: {reason: ImagePullBackOff}}}]}",
            "ImagePullBackOff",
            "ImagePullBackOff (image registry.local/cart:9)",
        ),
        (
            "status: {containerStatuses: [{name: app, image: x, imageID: '', ready: false, restartCount: 3, state: {waiting: {reason: CrashLoopBackOff}}, lastState: {terminated: {exitCode: 137, reason: OOMKilled}}}]}",
            "OOMKilled",
            "OOMKilled, in CrashLoopBackOff (container app, restarted 3 times)",
        ),
        (
            "status: {containerStatuses: [{name: app, image: x, imageID: '', ready: false, restartCount: 2, state: {terminated: {exitCode: 2, reason: Error}}}]}",
            "CrashLoopBackOff",
            "CrashLoopBackOff (container app, exited with code 2, restarted 2 times)",
        ),
        (
            "status: {phase: Pending, conditions: [{type: PodScheduled, status: 'False', reason: Unschedulable}]}",
            "Unschedulable",
            "Unschedulable: no node can run it",
        ),
        (
            "status: {conditions: [{type: Ready, status: 'False'}], containerStatuses: [{name: app, image: x, imageID: '', ready: false, restartCount: 0, state: {running: {}}}]}",
            "NotReady",
            "running, its readiness probe fails",
        ),
    ];
    for (status, cause, what) in cases {
        let p = pod(&format!("metadata: {{name: p}}\n{status}"));
        let d = unready("cart", &[p]);
        assert_eq!(d.cause, cause, "{status}");
        assert_eq!(
            d.message,
            format!("Service cart has no ready endpoints: pod p: {what}")
        );
    }
}

#[test]
fn no_pod_or_no_plain_reason() {
    let d = unready("cart", &[]);
    assert_eq!(
        (d.cause.as_str(), d.message.as_str()),
        (
            "NoReadyEndpoints",
            "Service cart has no ready endpoints: no pod matches its selector"
        )
    );
    let d = unready(
        "cart",
        &[pod("metadata: {name: p}\nstatus: {phase: Running}")],
    );
    assert_eq!(
        d.message,
        "Service cart has no ready endpoints: 1 pod matches its selector, not ready"
    );
}

/// A container that exits at once and has no readiness probe is Ready for
/// a moment after each restart, and its endpoint with it: the crash loop
/// is still named, and a crash long ago is no loop.
#[test]
fn a_crash_loop_is_named_while_its_pod_is_ready_for_a_moment() {
    let restarted = |finished: &str| {
        pod(&format!(
            "metadata: {{name: p}}\nstatus: {{conditions: [{{type: Ready, status: 'True'}}], containerStatuses: [{{name: app, image: x, imageID: '', ready: true, restartCount: 4, state: {{running: {{startedAt: '2026-12-07T11:59:59Z'}}}}, lastState: {{terminated: {{exitCode: 2, reason: Error, finishedAt: '{finished}'}}}}}}]}}"
        ))
    };
    let d = service_pods("cart", &[restarted("2026-12-07T11:59:58Z")], true, now()).unwrap();
    assert_eq!(d.cause, "CrashLoopBackOff");
    assert_eq!(
        d.message,
        "Service cart: pod p: CrashLoopBackOff (container app, exited with code 2, restarted 4 times)"
    );
    // Restarted long ago and running since: nothing plain to say.
    assert_eq!(
        service_pods("cart", &[restarted("2026-12-06T11:00:00Z")], true, now()),
        None
    );
    // Ready endpoints and healthy pods: the cluster sees nothing wrong.
    let healthy = pod(
        "metadata: {name: p}\nstatus: {conditions: [{type: Ready, status: 'True'}], containerStatuses: [{name: app, image: x, imageID: '', ready: true, restartCount: 0, state: {running: {}}}]}",
    );
    assert_eq!(service_pods("cart", &[healthy], true, now()), None);
}

#[test]
fn endpoints_are_ready_unless_they_say_otherwise() {
    let slice = |ready: &str| -> EndpointSlice {
        serde_yaml::from_str(&format!(
            "metadata: {{name: s}}\naddressType: IPv4\nendpoints: [{{addresses: [10.0.0.1]{ready}}}]"
        ))
        .unwrap()
    };
    assert!(has_ready_endpoint(&[slice("")]));
    assert!(has_ready_endpoint(&[slice(", conditions: {ready: true}")]));
    assert!(!has_ready_endpoint(&[slice(
        ", conditions: {ready: false}"
    )]));
    assert!(!has_ready_endpoint(&[]));
}

#[test]
fn a_route_not_accepted_or_unresolved_and_a_gateway_not_programmed() {
    let r = json(
        "status: {parents: [{parentRef: {name: edge}, conditions: [{type: Accepted, status: 'False', reason: NotAllowedByListeners, message: x}]}]}",
    );
    let d = route("HTTPRoute", "cart", &r).unwrap();
    assert_eq!(d.cause, "RouteNotAccepted");
    assert_eq!(
        d.message,
        "HTTPRoute cart is not accepted by Gateway edge: NotAllowedByListeners"
    );
    let r = json(
        "status: {parents: [{parentRef: {name: edge}, conditions: [{type: Accepted, status: 'True'}, {type: ResolvedRefs, status: 'False', reason: BackendNotFound}]}]}",
    );
    assert_eq!(
        route("GRPCRoute", "cart", &r).unwrap().cause,
        "BackendNotResolved"
    );
    let ok = json(
        "status: {parents: [{parentRef: {name: edge}, conditions: [{type: Accepted, status: 'True'}]}]}",
    );
    assert_eq!(route("HTTPRoute", "cart", &ok), None);
    let g = json(
        "status: {conditions: [{type: Programmed, status: 'False', reason: AddressNotAssigned}]}",
    );
    assert_eq!(
        gateway("edge", &g).unwrap().message,
        "Gateway edge is not programmed: AddressNotAssigned"
    );
    assert_eq!(gateway("edge", &json("status: {}")), None);
}

#[test]
fn an_ingress_without_an_address() {
    assert_eq!(
        ingress("shop", &json("status: {loadBalancer: {}}"))
            .unwrap()
            .cause,
        "NoLoadBalancerAddress"
    );
    assert_eq!(
        ingress(
            "shop",
            &json("status: {loadBalancer: {ingress: [{ip: 10.0.0.9}]}}")
        ),
        None
    );
}

#[test]
fn backends_and_parents_of_the_namespace_only() {
    let r = json(
        "spec:
  parentRefs: [{name: edge}, {name: shared, namespace: infra}]
  rules:
  - backendRefs: [{name: cart, port: 80}, {name: pay, namespace: infra, port: 80}, {name: bucket, kind: Backend}]
  - backendRefs: [{name: cart, port: 81}, {name: search, port: 80}]",
    );
    assert_eq!(backend_services(&r, "shop", 4), ["cart", "search"]);
    assert_eq!(parent_gateways(&r, "shop", 4), ["edge"]);
    let i = json(
        "spec:
  defaultBackend: {service: {name: fallback}}
  rules: [{http: {paths: [{path: /, backend: {service: {name: web, port: {number: 80}}}}]}}]",
    );
    assert_eq!(backend_services(&i, "shop", 4), ["web", "fallback"]);
}

fn cert(yaml: &str) -> Value {
    json(yaml)
}

#[test]
fn a_certificate_for_the_host_that_is_not_ready() {
    let failing = cert(
        "metadata: {name: shop-tls}
spec: {dnsNames: [www.shop.example, shop.example], issuerRef: {name: letsencrypt, kind: ClusterIssuer}}
status:
  failedIssuanceAttempts: 3
  conditions: [{type: Ready, status: 'False', reason: DoesNotExist, message: 'the issuer said: quota'}]",
    );
    let ready = cert(
        "metadata: {name: api-tls}
spec: {dnsNames: [api.shop.example], issuerRef: {name: ca}}
status: {conditions: [{type: Ready, status: 'True', reason: Ready}]}",
    );
    let d = certificate("shop.example", &[ready.clone(), failing.clone()]).unwrap();
    assert_eq!(d.cause, "CertificateNotReady");
    assert_eq!(
        d.message,
        "Certificate shop-tls for shop.example is not ready: DoesNotExist \
         (issuer ClusterIssuer letsencrypt, 3 failed issuances)"
    );
    assert!(
        !d.message.contains("quota"),
        "never the condition's message"
    );
    assert_eq!(certificate("api.shop.example", &[ready, failing]), None);
    assert_eq!(
        certificate("other.example", &[cert("metadata: {name: x}")]),
        None
    );
}

#[test]
fn a_wildcard_an_address_or_a_common_name_covers_the_host() {
    let wildcard = cert(
        "metadata: {name: wild}
spec: {dnsNames: ['*.Shop.Example'], issuerRef: {name: ca, kind: Issuer}}",
    );
    let d = certificate("cart.shop.example", std::slice::from_ref(&wildcard)).unwrap();
    assert_eq!(
        d.message,
        "Certificate wild for cart.shop.example is not ready: not issued yet (issuer Issuer ca)"
    );
    for host in ["shop.example", "a.cart.shop.example", ".shop.example"] {
        assert_eq!(
            certificate(host, std::slice::from_ref(&wildcard)),
            None,
            "{host}"
        );
    }
    let by_ip = cert(
        "metadata: {name: ip}
spec: {ipAddresses: [10.0.0.7], issuerRef: {name: ca}}
status: {failedIssuanceAttempts: 1, conditions: [{type: Ready, status: 'False', reason: Failed}]}",
    );
    assert_eq!(
        certificate("10.0.0.7", &[by_ip]).unwrap().message,
        "Certificate ip for 10.0.0.7 is not ready: Failed (issuer Issuer ca, 1 failed issuance)"
    );
    let by_cn =
        cert("metadata: {name: cn}\nspec: {commonName: legacy.example, issuerRef: {name: ca}}");
    assert!(certificate("legacy.example", &[by_cn]).is_some());
}
