//! Part 2: gRPC health, tcp and tls checkers through an operator: Ready and
//! its reason in status, `kubectl get wc`, the metrics of their kinds.

use super::ops::*;
use super::*;
use support::peers::{GrpcHealth, Smtp};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_tcp_and_tls_checkers_report_like_http_ones() {
    let c = cluster();
    let ns = c.namespace("probe-kinds");
    let client = c.client().await;
    let api = checkers(&client, &ns);
    let grpc = tokio::task::spawn_blocking(|| {
        GrpcHealth::start(
            &[("", "SERVING"), ("shop.Stock", "NOT_SERVING")],
            None,
            None,
        )
    })
    .await
    .unwrap();
    let ca = TestCa::new();
    let expired = ca.leaf_valid(&["localhost", "127.0.0.1"], -400, -30);
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    std::fs::write(&cert, &expired.cert_pem).unwrap();
    std::fs::write(&key, &expired.key_pem).unwrap();
    let smtp = tokio::task::spawn_blocking(move || Smtp::start(&cert, &key))
        .await
        .unwrap();
    config_map(&client, &ns, "ca", &[("ca.crt", &ca.pem)]).await;
    let op = ready_op(c, &ns).await;

    let every = "intervalSeconds: 2";
    let ca_bundle = "tls: {caBundle: {configMapKeyRef: {name: ca, key: ca.crt}}}";
    let addr = grpc.addr();
    apply_checker(&ns, "orders", &format!("host: grpc://{addr}\n{every}")).await;
    apply_checker(
        &ns,
        "stock",
        &format!("host: grpc://{addr}\ngrpc: {{service: shop.Stock}}\n{every}"),
    )
    .await;
    let mail = format!(
        "host: tcp://127.0.0.1:{}\n{every}\n{ca_bundle}\ntcp:\n  queryResponse:\n  - expect: '^220 '\n  - send: \"EHLO probe\\r\\n\"\n  - expect: '^250 '\n  - send: \"STARTTLS\\r\\n\"\n  - expect: '^220'\n    startTls: true",
        smtp.smtp_port()
    );
    apply_checker(&ns, "mail", &mail).await;
    apply_checker(
        &ns,
        "smtps",
        &format!(
            "host: tls://127.0.0.1:{}\n{every}\ntls: {{insecureSkipVerify: true, certificateExpiryWarningDays: 30}}",
            smtp.smtps_port()
        ),
    )
    .await;

    let within = Duration::from_secs(30);
    let orders = wait_condition(&api, "orders", "Ready", "True", "ProbeSucceeded", within).await;
    assert!(orders.message.contains("SERVING"), "{}", orders.message);
    let stock = wait_condition(&api, "stock", "Ready", "False", "NotServing", within).await;
    assert!(stock.message.contains("NOT_SERVING"), "{}", stock.message);
    let mail = wait_condition(&api, "mail", "Ready", "False", "CertificateInvalid", within).await;
    assert!(mail.message.contains("expired"), "{}", mail.message);
    let smtps = wait_condition(&api, "smtps", "Ready", "True", "ProbeSucceeded", within).await;
    assert!(
        smtps.message.starts_with("TLS") && !smtps.message.contains("HTTP"),
        "{}",
        smtps.message
    );
    // The certificate is still judged for its expiry when it is not verified.
    wait_condition(
        &api,
        "smtps",
        "CertificateExpiring",
        "True",
        "CertificateExpired",
        within,
    )
    .await;

    // A flip at run time turns the checker False with the reason.
    grpc.set_async("", "NOT_SERVING").await;
    wait_condition(&api, "orders", "Ready", "False", "NotServing", within).await;

    let text = op.scrape().await;
    for want in [
        format!(
            "webchecker_grpc_healthcheck_response{{name=\"stock\",namespace=\"{ns}\",serving_status=\"NOT_SERVING\"}} 1"
        ),
        format!("webchecker_grpc_status_code{{name=\"stock\",namespace=\"{ns}\"}} 0"),
    ] {
        assert!(text.lines().any(|l| l == want), "missing {want}");
    }
    assert!(text.contains("kind=\"tcp\"") && text.contains("kind=\"grpc\""));
    let out = c.kubectl_async(&["get", "wc", "-n", &ns]).await;
    println!("kubectl get wc:\n{}", text_of(&out.stdout));
}

fn text_of(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}
