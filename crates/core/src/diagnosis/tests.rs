use super::*;

#[test]
fn a_generated_checker_s_target_is_its_source_in_its_namespace() {
    let t = target_of(
        "shop",
        "http://10.0.0.1",
        Some(("HTTPRoute", "shop", "cart")),
    );
    assert_eq!(t, Some(Target::HttpRoute("cart".into())));
    let t = target_of("shop", "cart.shop.svc", Some(("Service", "infra", "cart")));
    assert_eq!(
        t, None,
        "another namespace's object: nothing, not even by host"
    );
    assert_eq!(
        target_of("shop", "x", Some(("Gateway", "shop", "gw"))),
        None
    );
}

#[test]
fn a_host_naming_a_service_of_its_namespace_is_that_service() {
    for host in [
        "cart.shop.svc",
        "cart.shop.svc.cluster.local",
        "Cart.Shop.SVC.cluster.local.",
    ] {
        assert_eq!(
            target_of("shop", host, None),
            Some(Target::Service("cart".into())),
            "{host}"
        );
    }
    for host in [
        "cart.infra.svc",
        "cart",
        "cart.shop",
        "www.example.com",
        ".shop.svc",
    ] {
        assert_eq!(target_of("shop", host, None), None, "{host}");
    }
}

#[test]
fn a_tls_failure_asks_for_the_host_s_certificates_whatever_the_host() {
    let s = subject_of("shop", "Shop.Example.com.", None, "CertificateInvalid").unwrap();
    assert_eq!(s.target, None);
    assert_eq!(s.certificate_host.as_deref(), Some("shop.example.com"));
    assert_eq!(s.describe(), "Certificates for shop.example.com");
    let s = subject_of("shop", "cart.shop.svc", None, "TLSError").unwrap();
    assert_eq!(s.target, Some(Target::Service("cart".into())));
    assert_eq!(
        s.describe(),
        "Certificates for cart.shop.svc, then Service cart"
    );
    // Any other failure: the target alone, or nothing.
    let s = subject_of("shop", "cart.shop.svc", None, "UnexpectedStatus").unwrap();
    assert_eq!(s.certificate_host, None);
    assert_eq!(
        subject_of("shop", "shop.example.com", None, "Timeout"),
        None
    );
}

fn q(ns: &str, name: &str) -> Queued {
    Queued {
        key: format!("{ns}/{name}"),
        seq: 1,
        namespace: ns.into(),
        subject: Subject {
            target: Some(Target::Service(name.into())),
            certificate_host: None,
        },
    }
}

#[test]
fn a_flood_in_one_namespace_delays_another_by_one_diagnosis_at_most() {
    let mut queue = Queue::new(8);
    let mut dropped = 0;
    for i in 0..1000 {
        if !queue.push(q("flood", &format!("c{i}"))) {
            dropped += 1;
        }
    }
    assert_eq!(
        (queue.len(), dropped),
        (8, 992),
        "its fill waits, the rest is dropped"
    );
    assert!(queue.push(q("quiet", "api")));
    let first = queue.pop().unwrap();
    assert_eq!(first.namespace, "flood");
    assert_eq!(
        queue.pop().unwrap(),
        q("quiet", "api"),
        "its turn comes next"
    );
    let rest: Vec<String> = std::iter::from_fn(|| queue.pop())
        .map(|q| q.namespace)
        .collect();
    assert_eq!(rest, vec!["flood".to_string(); 7]);
    assert!(queue.is_empty());
}

#[test]
fn a_checker_waits_once() {
    let mut queue = Queue::new(8);
    assert!(queue.push(q("shop", "api")));
    assert!(!queue.push(q("shop", "api")));
    queue.pop();
    assert!(queue.push(q("shop", "api")), "again once taken");
}
