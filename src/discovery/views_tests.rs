//! The views' event handlers on made-up events: which sources each event
//! makes work for, and what is kept.

use super::*;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

fn ing(ns: &str, name: &str) -> Ingress {
    Ingress {
        metadata: ObjectMeta {
            namespace: Some(ns.into()),
            name: Some(name.into()),
            uid: Some(format!("uid-{name}")),
            ..Default::default()
        },
        ..Default::default()
    }
}

fn meta<K>(ns: &str, name: &str, annotations: &[(&str, &str)]) -> PartialObjectMeta<K> {
    use kube::core::PartialObjectMetaExt;
    ObjectMeta {
        namespace: (!ns.is_empty()).then(|| ns.to_string()),
        name: Some(name.into()),
        uid: Some(format!("uid-{name}")),
        annotations: Some(
            annotations
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        ),
        ..Default::default()
    }
    .into_response_partial()
}

fn checker(name: &str, owner: &str) -> PartialObjectMeta<WebChecker> {
    let mut m = meta(
        "web",
        name,
        &[(FINGERPRINT_ANNOTATION, "f1"), ("other.io/x", "y")],
    );
    m.metadata.owner_references = Some(vec![OwnerReference {
        api_version: "networking.k8s.io/v1".into(),
        kind: "Ingress".into(),
        name: owner.into(),
        uid: format!("uid-{owner}"),
        controller: Some(true),
        ..Default::default()
    }]);
    m.metadata.labels = Some([(SOURCE_LABEL.to_string(), "ingress".to_string())].into());
    m
}

/// `c` as a checker of the Gateway API's route `kind` (`source` label `label`).
fn of_route(
    mut c: PartialObjectMeta<WebChecker>,
    kind: &str,
    label: &str,
) -> PartialObjectMeta<WebChecker> {
    let r = &mut c.metadata.owner_references.as_mut().unwrap()[0];
    (r.api_version, r.kind) = ("gateway.networking.k8s.io/v1".into(), kind.into());
    c.metadata.labels = Some([(SOURCE_LABEL.to_string(), label.to_string())].into());
    c
}

fn drain(q: &mut WorkQueue<Key>) -> Vec<String> {
    let mut out = Vec::new();
    while let Some(k) = q.pop() {
        out.push(k.2.clone());
        q.done(k, true, std::time::Instant::now());
    }
    out
}

fn listed() -> (State, WorkQueue<Key>) {
    let (mut s, mut q) = (State::default(), WorkQueue::default());
    on_ingress(Event::Init, &mut s, &mut q);
    for (ns, n) in [("web", "a"), ("web", "b"), ("shop", "c")] {
        on_ingress(Event::InitApply(ing(ns, n)), &mut s, &mut q);
    }
    on_ingress(Event::InitDone, &mut s, &mut q);
    on_namespace(Event::Init, &mut s, &mut q);
    let web = meta::<Namespace>("", "web", &[("team", "y")]);
    on_namespace(Event::InitApply(web), &mut s, &mut q);
    on_namespace(Event::InitDone, &mut s, &mut q);
    on_checker(Event::InitDone, &mut s, &mut q);
    drain(&mut q);
    (s, q)
}

#[test]
fn a_namespace_annotation_makes_work_for_its_ingresses_only() {
    let (mut s, mut q) = listed();
    let ns = |a: &[(&str, &str)]| Event::Apply(meta::<Namespace>("", "web", a));
    on_namespace(ns(&[("team", "x")]), &mut s, &mut q);
    assert_eq!(drain(&mut q), Vec::<String>::new(), "not ours: no work");
    on_namespace(
        ns(&[(super::super::annotations::CHECK, "true")]),
        &mut s,
        &mut q,
    );
    assert_eq!(drain(&mut q), ["a", "b"]);
    on_namespace(
        ns(&[(super::super::annotations::CHECK, "true")]),
        &mut s,
        &mut q,
    );
    assert_eq!(drain(&mut q), Vec::<String>::new(), "unchanged: no work");
}

#[test]
fn a_status_write_makes_no_work_and_an_adopted_checker_moves() {
    let (mut s, mut q) = listed();
    on_checker(Event::Apply(checker("a-x", "a")), &mut s, &mut q);
    assert_eq!(drain(&mut q), ["a"]);
    on_checker(Event::Apply(checker("a-x", "a")), &mut s, &mut q);
    assert_eq!(drain(&mut q), Vec::<String>::new());
    // The Ingress was made again (a new UID) and adopted its checker.
    let mut adopted = checker("a-x", "a");
    adopted.metadata.owner_references.as_mut().unwrap()[0].uid = "uid-a2".into();
    on_checker(Event::Apply(adopted.clone()), &mut s, &mut q);
    assert!(!s.generated.contains_key("uid-a"), "{:?}", s.generated);
    assert_eq!(s.generated["uid-a2"]["a-x"].fingerprint, "f1");
    on_checker(Event::Delete(adopted), &mut s, &mut q);
    assert_eq!(drain(&mut q), ["a"], "made again if still wanted");
    assert!(s.generated.is_empty() && s.owner_of.is_empty());
}

#[test]
fn only_the_controller_of_the_labelled_kind_owns_a_checker() {
    let (mut s, mut q) = listed();
    let mut mention = checker("a-x", "a");
    mention.metadata.owner_references.as_mut().unwrap()[0].controller = None;
    on_checker(Event::Apply(mention), &mut s, &mut q);
    let mut mislabelled = checker("a-y", "a");
    mislabelled.metadata.labels = Some([(SOURCE_LABEL.to_string(), "service".to_string())].into());
    on_checker(Event::Apply(mislabelled), &mut s, &mut q);
    let mut huge = checker("a-z", "a");
    huge.metadata.annotations =
        Some([(FINGERPRINT_ANNOTATION.to_string(), "f".repeat(4096))].into());
    on_checker(Event::Apply(huge), &mut s, &mut q);
    assert_eq!(drain(&mut q), ["a"], "only a-z is a's");
    assert_eq!(s.generated["uid-a"].keys().collect::<Vec<_>>(), ["a-z"]);
    assert_eq!(s.generated["uid-a"]["a-z"].fingerprint, "", "not kept");
}

#[test]
fn namespaces_keep_our_annotations_and_a_bounded_set_of_labels() {
    let mut n = meta::<Namespace>(
        "",
        "web",
        &[(annotations::CHECK, "true"), ("other.io/big", "x")],
    );
    n.metadata.labels = Some([("team".to_string(), "web".to_string())].into());
    let info = namespace_info(&n);
    assert_eq!(
        info.annotations.keys().collect::<Vec<_>>(),
        [annotations::CHECK]
    );
    assert_eq!(info.labels.as_ref().unwrap()["team"], "web");
    n.metadata.labels = Some(
        (0..=MAX_NAMESPACE_LABELS)
            .map(|i| (format!("l{i}"), String::new()))
            .collect(),
    );
    assert_eq!(namespace_info(&n).labels, None);
}

fn route(ns: &str, name: &str, parent: (&str, Option<&str>)) -> HTTPRoute {
    let mut r = HTTPRoute::new(name, Default::default());
    r.metadata.namespace = Some(ns.into());
    r.metadata.uid = Some(format!("uid-{name}"));
    // Opted in: one that cannot is a stub, which no Gateway concerns.
    r.metadata.annotations = Some([(annotations::CHECK.to_string(), "true".to_string())].into());
    r.spec.parent_refs = Some(vec![super::super::gateway_api::ParentRef {
        name: parent.0.into(),
        namespace: parent.1.map(str::to_string),
        ..Default::default()
    }]);
    r
}

fn gateway(ns: &str, name: &str) -> Gateway {
    let mut g = Gateway::new(name, Default::default());
    g.metadata.namespace = Some(ns.into());
    g
}

#[test]
fn a_gateway_makes_work_for_the_routes_that_name_it() {
    let (mut s, mut q) = listed();
    on_route(Event::InitDone, &mut s, &mut q);
    for r in [
        route("web", "r1", ("gw", None)),
        route("shop", "r2", ("gw", Some("web"))),
        route("shop", "r3", ("gw", None)),
    ] {
        on_route(Event::Apply(r), &mut s, &mut q);
    }
    assert!(!s.ready(Kind::HttpRoute), "the Gateways are not listed yet");
    on_gateway(Event::InitDone, &mut s, &mut q);
    assert!(s.ready(Kind::HttpRoute) && s.ready(Kind::Ingress));
    drain(&mut q);
    on_gateway(Event::Apply(gateway("web", "gw")), &mut s, &mut q);
    assert_eq!(
        drain(&mut q),
        ["gw", "r2", "r1"],
        "the Gateway itself (a source too), then its routes: r3 names shop's gw"
    );
    let checker = of_route(checker("r1-x", "r1"), "HTTPRoute", "httproute");
    on_checker(Event::Apply(checker), &mut s, &mut q);
    let popped = q.pop().unwrap();
    assert_eq!(popped, (Kind::HttpRoute, "web".into(), "r1".into()));
    q.done(popped, true, std::time::Instant::now());
    let ns = Event::Apply(meta::<Namespace>(
        "",
        "shop",
        &[(super::super::annotations::CHECK, "true")],
    ));
    on_namespace(ns, &mut s, &mut q);
    assert_eq!(
        drain(&mut q),
        ["c", "r2", "r3"],
        "the Ingress and the routes of shop"
    );
}

#[test]
fn a_gateway_makes_work_for_the_grpcroutes_that_name_it_too() {
    let (mut s, mut q) = listed();
    on_route(Event::InitDone, &mut s, &mut q);
    on_gateway(Event::InitDone, &mut s, &mut q);
    assert!(
        !s.ready(Kind::GrpcRoute),
        "the GRPCRoutes are not listed yet"
    );
    on_grpc_route(Event::InitDone, &mut s, &mut q);
    assert!(s.ready(Kind::GrpcRoute));
    let mut g = GRPCRoute::new("g1", Default::default());
    g.metadata.namespace = Some("web".into());
    g.metadata.uid = Some("uid-g1".into());
    g.metadata.annotations = route("web", "g1", ("gw", None)).metadata.annotations;
    g.spec.parent_refs = route("web", "x", ("gw", None)).spec.parent_refs;
    on_grpc_route(Event::Apply(g), &mut s, &mut q);
    on_route(
        Event::Apply(route("web", "r1", ("gw", None))),
        &mut s,
        &mut q,
    );
    drain(&mut q);
    on_gateway(Event::Apply(gateway("web", "gw")), &mut s, &mut q);
    assert_eq!(drain(&mut q), ["gw", "r1", "g1"]);
    let c = of_route(checker("g1-x", "g1"), "GRPCRoute", "grpcroute");
    on_checker(Event::Apply(c), &mut s, &mut q);
    let popped = q.pop().unwrap();
    assert_eq!(popped, (Kind::GrpcRoute, "web".into(), "g1".into()));
}

#[test]
fn a_relist_replaces_the_ingresses_at_its_end() {
    let (mut s, mut q) = listed();
    s.want(&(Kind::Ingress, "web".into(), "a".into()), 2);
    on_ingress(Event::Init, &mut s, &mut q);
    on_ingress(Event::InitApply(ing("web", "b")), &mut s, &mut q);
    assert_eq!(s.ingresses.map.len(), 3, "unchanged until the list ends");
    on_ingress(Event::InitDone, &mut s, &mut q);
    assert_eq!(s.ingresses.map.len(), 1);
    assert_eq!(s.wanted_total, 0, "a's checkers are no longer counted");
    assert_eq!(drain(&mut q), ["b"]);
}
