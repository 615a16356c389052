//! The checks that are not HTTP, against real servers nobody here wrote:
//! grpc-go's health service (with `grpc-health-probe`, the ecosystem's own
//! client, as a second opinion on every answer) and exim with STARTTLS and
//! an expired certificate (kit/src/peers.rs).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use futures::FutureExt;
use webchecker::probe::{AddressPolicy, GrpcFacts, Prober, Reason, Serving, ValueRef, plan};

use super::support::peers::{GrpcHealth, Smtp, grpc_health_probe, grpc_health_probe_args};
use super::support::targets::TestCa;
use super::{CA_BUNDLE, expect, mk, probe, prober};

/// A plan whose Secret and ConfigMap values are `values`.
fn mk_with(yaml: &str, values: &[(ValueRef, &str)]) -> webchecker::probe::ProbePlan {
    let spec = serde_yaml::from_str(yaml).unwrap_or_else(|e| panic!("{yaml}: {e}"));
    let values: HashMap<ValueRef, Vec<u8>> = values
        .iter()
        .map(|(r, v)| (r.clone(), v.as_bytes().to_vec()))
        .collect();
    plan(&spec, &|r| {
        values.get(r).cloned().ok_or_else(|| "not found".into())
    })
    .unwrap_or_else(|e| panic!("{yaml}: {e}"))
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

/// grpc-health-probe's exit code (0 SERVING, 2 connection failure, 3 RPC
/// failure such as NOT_FOUND, 4 NOT_SERVING), off the runtime.
async fn second_opinion(addr: std::net::SocketAddr, service: &str) -> i32 {
    let service = service.to_string();
    tokio::task::spawn_blocking(move || {
        let s = (!service.is_empty()).then_some(service.as_str());
        grpc_health_probe(addr, s, None).0
    })
    .await
    .unwrap()
}

async fn start_grpc(statuses: &'static [(&'static str, &'static str)]) -> GrpcHealth {
    tokio::task::spawn_blocking(move || GrpcHealth::start(statuses, None, None))
        .await
        .unwrap()
}

#[tokio::test]
async fn grpc_health_answers_give_their_reasons_and_grpc_health_probe_agrees() {
    let server = start_grpc(&[
        ("", "SERVING"),
        ("shop.Orders", "SERVING"),
        ("shop.Stock", "NOT_SERVING"),
    ])
    .await;
    let addr = server.addr();
    let p = prober();
    let check = |service: &str| {
        mk(
            &format!("host: grpc://{addr}\ngrpc: {{service: {service:?}}}"),
            None,
        )
    };
    // (service, reason, a part of the message, grpc-health-probe's exit code)
    let cases = [
        ("", Reason::ProbeSucceeded, "SERVING (the server)", 0),
        ("shop.Orders", Reason::ProbeSucceeded, "SERVING", 0),
        ("shop.Stock", Reason::NotServing, "answered NOT_SERVING", 4),
        (
            "shop.Nope",
            Reason::ServiceUnknown,
            "does not know service \"shop.Nope\" (gRPC status NOT_FOUND)",
            3,
        ),
    ];
    for (service, reason, part, code) in cases {
        let o = probe(&p, &check(service)).await;
        expect(&o, reason, part);
        assert_eq!(second_opinion(addr, service).await, code, "{service:?}");
        assert!(o.phases.connect > std::time::Duration::ZERO, "{o:?}");
    }
    let o = probe(&p, &check("shop.Stock")).await;
    assert_eq!(
        o.grpc,
        Some(GrpcFacts {
            status: 0,
            serving: Some(Serving::NotServing)
        })
    );
    let o = probe(&p, &check("shop.Nope")).await;
    assert_eq!(
        o.grpc,
        Some(GrpcFacts {
            status: 5,
            serving: None
        })
    );

    // A flip is seen by the next probe, by both clients.
    server.set_async("shop.Orders", "NOT_SERVING").await;
    expect(
        &probe(&p, &check("shop.Orders")).await,
        Reason::NotServing,
        "NOT_SERVING",
    );
    assert_eq!(second_opinion(addr, "shop.Orders").await, 4);
    server.set_async("shop.Orders", "SERVING").await;
    expect(
        &probe(&p, &check("shop.Orders")).await,
        Reason::ProbeSucceeded,
        "SERVING",
    );

    // An HTTP server is no gRPC server; a server that is gone refuses.
    drop(server);
    let o = probe(&p, &check("")).await;
    expect(&o, Reason::ConnectError, "connection refused");
    assert_eq!(o.grpc, None);
    assert_eq!(second_opinion(addr, "").await, 2);
}

#[tokio::test]
async fn grpcs_verifies_the_server_every_probe_and_presents_a_client_certificate() {
    let ca = TestCa::new();
    let leaf = ca.leaf(&["127.0.0.1"]);
    let client = ca.leaf(&["probe.webchecker.test"]);
    let dir = tempfile::tempdir().unwrap();
    let cert = write(dir.path(), "cert.pem", &leaf.cert_pem);
    let key = write(dir.path(), "key.pem", &leaf.key_pem);
    let ca_file = write(dir.path(), "ca.pem", &ca.pem);
    let client_cert = write(dir.path(), "client.pem", &client.cert_pem);
    let client_key = write(dir.path(), "client.key", &client.key_pem);
    let (c, k, a) = (cert.clone(), key.clone(), ca_file.clone());
    let server = tokio::task::spawn_blocking(move || {
        GrpcHealth::start(&[("", "SERVING")], Some((&c, &k)), Some(&a))
    })
    .await
    .unwrap();
    let host = format!("host: grpcs://{}", server.addr());
    let p = prober();
    let ca_ref = (ValueRef::config_map("ca", "ca.crt"), ca.pem.as_str());
    let secrets = [
        ca_ref.clone(),
        (
            ValueRef::secret("client", "tls.crt"),
            client.cert_pem.as_str(),
        ),
        (
            ValueRef::secret("client", "tls.key"),
            client.key_pem.as_str(),
        ),
    ];
    let with_client = format!(
        "{host}\ntls: {{caBundle: {{configMapKeyRef: {{name: ca, key: ca.crt}}}}, clientCertificate: {{secretName: client}}}}"
    );
    let o = probe(&p, &mk_with(&with_client, &secrets)).await;
    expect(&o, Reason::ProbeSucceeded, "SERVING");
    let tls = o.tls.as_ref().expect("a handshake");
    assert_eq!(tls.version, "TLS 1.3");
    assert_eq!(o.cert_not_after, Some(leaf.not_after));

    // Without the client certificate the server refuses the handshake.
    let o = probe(&p, &mk_with(&format!("{host}\n{CA_BUNDLE}"), &[ca_ref])).await;
    assert!(
        matches!(o.reason, Reason::TlsError | Reason::ProtocolError),
        "{o:?}"
    );
    // Without the CA the certificate is unknown: every probe verifies it.
    let o = probe(&p, &mk(&host, None)).await;
    expect(
        &o,
        Reason::CertificateInvalid,
        "unknown certificate authority",
    );

    let addr = server.addr().to_string();
    let (a, cc, ck) = (ca_file.clone(), client_cert.clone(), client_key.clone());
    let (code, out) = tokio::task::spawn_blocking(move || {
        grpc_health_probe_args(&[
            "-addr",
            &addr,
            "-tls",
            "-tls-ca-cert",
            a.to_str().unwrap(),
            "-tls-client-cert",
            cc.to_str().unwrap(),
            "-tls-client-key",
            ck.to_str().unwrap(),
        ])
    })
    .await
    .unwrap();
    assert_eq!(code, 0, "{out}");
}

/// The SMTP conversation up to STARTTLS, as a checker writes it.
fn smtp_steps(port: u16) -> String {
    format!(
        r#"host: tcp://127.0.0.1:{port}
tcp:
  queryResponse:
  - expect: "^220 "
  - send: "EHLO probe.webchecker.test\r\n"
  - expect: "^250[ -]STARTTLS"
  - expect: "^250 "
  - send: "STARTTLS\r\n"
  - expect: "^220"
    startTls: true
  - send: "EHLO probe.webchecker.test\r\n"
  - expect: "^250 "
  - send: "QUIT\r\n"
"#
    )
}

#[tokio::test]
async fn an_expired_certificate_behind_starttls_or_on_smtps_is_caught() {
    let ca = TestCa::new();
    let leaf = ca.leaf_valid(&["localhost", "127.0.0.1"], -400, -30);
    let dir = tempfile::tempdir().unwrap();
    let cert = write(dir.path(), "cert.pem", &leaf.cert_pem);
    let key = write(dir.path(), "key.pem", &leaf.key_pem);
    let smtp = tokio::task::spawn_blocking(move || Smtp::start(&cert, &key))
        .await
        .unwrap();
    let p = prober();
    let starttls = smtp_steps(smtp.smtp_port());
    let smtps = format!("host: tls://127.0.0.1:{}", smtp.smtps_port());

    let o = probe(&p, &mk(&format!("{starttls}{CA_BUNDLE}"), Some(&ca.pem))).await;
    expect(&o, Reason::CertificateInvalid, "it has expired");
    let o = probe(&p, &mk(&format!("{smtps}\n{CA_BUNDLE}"), Some(&ca.pem))).await;
    expect(&o, Reason::CertificateInvalid, "it has expired");

    // Told to skip verification, both succeed and still report the expiry.
    let insecure = "tls: {insecureSkipVerify: true}";
    let o = probe(&p, &mk(&format!("{starttls}{insecure}"), None)).await;
    expect(&o, Reason::ProbeSucceeded, "9 steps done, over TLS");
    assert_eq!(o.cert_not_after, Some(leaf.not_after));
    assert!(
        o.phases.tls > std::time::Duration::ZERO && o.phases.processing > std::time::Duration::ZERO
    );
    let o = probe(&p, &mk(&format!("{smtps}\n{insecure}"), None)).await;
    expect(&o, Reason::ProbeSucceeded, "TLS handshake done");
    assert_eq!(o.cert_not_after, Some(leaf.not_after));

    // A banner that does not match; connecting alone.
    let wrong = format!(
        "host: tcp://127.0.0.1:{}\ntcp: {{queryResponse: [{{expect: '^554'}}]}}\ntimeoutSeconds: 2\nintervalSeconds: 5",
        smtp.smtp_port()
    );
    let o = probe(&p, &mk(&wrong, None)).await;
    assert_eq!(o.reason, Reason::UnexpectedResponse, "{o:?}");
    assert!(
        !o.message.contains("ESMTP"),
        "the server's words stay out: {o:?}"
    );
    let o = probe(
        &p,
        &mk(&format!("host: tcp://127.0.0.1:{}", smtp.smtp_port()), None),
    )
    .await;
    expect(&o, Reason::ProbeSucceeded, "connected");
}

#[tokio::test]
async fn a_tcp_check_meets_the_forgery_guard_and_the_gate_before_it_connects() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let plan = mk(&format!("host: tcp://127.0.0.1:{port}"), None);
    // The default policy keeps loopback out of every namespace's reach.
    let guarded = Prober::new(None, AddressPolicy::default(), 64 * 1024);
    let o = guarded.probe(&plan, "ns", &|| true).await.unwrap();
    assert_eq!(o.reason, Reason::Forbidden, "{o:?}");
    // A closed gate: no outcome, and no connection was made.
    assert!(prober().probe(&plan, "ns", &|| false).await.is_none());
    assert!(
        listener.accept().now_or_never().is_none(),
        "a connection was made"
    );
    // The same plan with the gate open does connect.
    expect(
        &probe(&prober(), &plan).await,
        Reason::ProbeSucceeded,
        "connected",
    );
    assert!(listener.accept().now_or_never().is_some());
}
