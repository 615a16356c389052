//! gRPC health (grpc-go's health server), SMTP with STARTTLS and SMTPS
//! (exim).

use std::path::Path;

use support::peers::{GrpcHealth, Smtp};

use super::*;

/// The PEM files of `leaf` in a fresh directory: (cert, key).
fn pem_files(leaf: &Leaf, name: &str) -> (PathBuf, PathBuf) {
    let dir = cluster().dir.join(format!("{name}-{}", rand_suffix()));
    std::fs::create_dir_all(&dir).unwrap();
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    std::fs::write(&cert, &leaf.cert_pem).unwrap();
    std::fs::write(&key, &leaf.key_pem).unwrap();
    (cert, key)
}

/// grpc-health.yaml: orders (shop.Orders on orders.shop.svc:50051, h2c) and
/// payments (the whole server at payments.example.com:443, TLS) are Ready
/// while grpc-go answers SERVING; shop.Orders set NOT_SERVING turns orders
/// Ready=False, reason NotServing, within two intervals.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_health_in_the_clear_and_over_tls() {
    let (ns, api) = world("ex-grpc").await;
    let (orders_ip, payments_ip) = (loopback_ip(), loopback_ip());
    let public = PublicCa::new();
    let (cert, key) = pem_files(&public.ca.leaf(&["payments.example.com"]), "payments");
    let orders = tokio::task::spawn_blocking(move || {
        GrpcHealth::start_at(
            (orders_ip, 50051).into(),
            &[("shop.Orders", "SERVING")],
            None,
            None,
        )
    })
    .await
    .unwrap();
    // grpc-go's health.NewServer() serves the server as a whole ("").
    let _payments = tokio::task::spawn_blocking(move || {
        GrpcHealth::start_at(
            (payments_ip, 443).into(),
            &[],
            Some((Path::new(&cert), Path::new(&key))),
            None,
        )
    })
    .await
    .unwrap();
    resolve(&["orders.shop.svc"], orders_ip);
    resolve(&["payments.example.com"], payments_ip);
    let _op = operator(&ns, &format!("op-{ns}"), &[&public.flag]).await;

    apply_example(&ns, "grpc-health.yaml").await;
    let ready = ("Ready", "True", "ProbeSucceeded");
    for name in ["orders", "payments"] {
        let c = wait_condition(&api, name, ready, FIRST).await;
        assert!(c.message.contains("SERVING"), "{name}: {}", c.message);
    }
    show(&ns).await;

    orders.set_async("shop.Orders", "NOT_SERVING").await;
    let within = after_change(interval_of(&api, "orders").await);
    let down = ("Ready", "False", "NotServing");
    let c = wait_condition(&api, "orders", down, within).await;
    assert!(c.message.contains("NOT_SERVING"), "{}", c.message);
    let payments = condition(&api, "payments", "Ready").await.unwrap();
    assert_eq!(payments.status, "True", "{payments:?}");
}

/// smtp-starttls.yaml and tls-certificate-expiry.yaml against one exim on
/// mail.example.com:25 (STARTTLS) and :465 (SMTPS), its certificate 25 days
/// from expiry: both Ready=True; CertificateExpiring is False for the
/// 21-day warning of the first and True (ExpiresSoon) for the 30-day warning
/// of the second.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn smtp_starttls_and_a_tls_port_with_its_certificate_expiry() {
    let (ns, api) = world("ex-mail").await;
    let ip = loopback_ip();
    let public = PublicCa::new();
    let leaf = public.ca.leaf_valid(&["mail.example.com"], -60, 25);
    let (cert, key) = pem_files(&leaf, "mail");
    let _smtp = tokio::task::spawn_blocking(move || Smtp::start_at((ip, 25, 465), &cert, &key))
        .await
        .unwrap();
    resolve(&["mail.example.com"], ip);
    let _op = operator(&ns, &format!("op-{ns}"), &[&public.flag]).await;

    apply_example(&ns, "smtp-starttls.yaml").await;
    apply_example(&ns, "tls-certificate-expiry.yaml").await;
    let ready = ("Ready", "True", "ProbeSucceeded");
    wait_condition(&api, "mail", ready, FIRST).await;
    wait_condition(&api, "mail-smtps", ready, FIRST).await;
    let valid = ("CertificateExpiring", "False", "CertificateValid");
    wait_condition(&api, "mail", valid, FIRST).await;
    let soon = ("CertificateExpiring", "True", "ExpiresSoon");
    let c = wait_condition(&api, "mail-smtps", soon, FIRST).await;
    assert!(c.message.contains("days"), "{}", c.message);
    show(&ns).await;
}
