//! Part 1: the gate (no request while closed), TLS options, and every reason
//! from a target built for it.

use super::ops::text;
use super::*;

/// A raw target that records every byte each connection sends it, and
/// answers 200 to whatever ends with a request head.
struct Recorder {
    server: Server,
    received: Arc<Mutex<Vec<Vec<u8>>>>,
}

impl Recorder {
    async fn start() -> Recorder {
        let received = Arc::new(Mutex::new(Vec::new()));
        let r2 = received.clone();
        let server = Server::raw("127.0.0.1:0", move |mut s| {
            let received = r2.clone();
            async move {
                let head = read_head(&mut s).await;
                if head.ends_with(b"\r\n\r\n") {
                    let _ = s
                        .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
                        .await;
                }
                received.lock().unwrap().push(head);
            }
        })
        .await;
        Recorder { server, received }
    }

    /// What each connection sent, once `n` connections have ended.
    async fn received(&self, n: usize) -> Vec<Vec<u8>> {
        let deadline = Instant::now() + Duration::from_secs(2);
        loop {
            let r = self.received.lock().unwrap().clone();
            if r.len() >= n || Instant::now() > deadline {
                return r;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

/// A gate that is open for its first `open` calls, then closed; counts calls.
fn gate_open_for(open: usize) -> (Arc<AtomicUsize>, impl Fn() -> bool + Sync) {
    let calls = Arc::new(AtomicUsize::new(0));
    let c = calls.clone();
    (calls, move || c.fetch_add(1, Ordering::SeqCst) < open)
}

/// The prober asks the gate right before it writes each request head (every
/// redirect hop, a CONNECT and the request inside the tunnel). A closed gate
/// means no outcome and no request byte at the target, which may have seen
/// the connection.
#[tokio::test]
async fn a_closed_gate_sends_no_request_and_an_open_one_probes() {
    let p = prober();
    let t = Recorder::start().await;
    let plan = mk(&format!("host: {}", t.server.url()));

    // Closed: not a byte of a request, and no outcome.
    let (calls, closed) = gate_open_for(0);
    let held = p.probe(&plan, "probe-test", &closed).await;
    let got = t.received(1).await;
    assert_eq!(got.len(), 1, "the gate is asked after the connect");
    assert!(got[0].is_empty(), "request bytes: {:?}", text(&got[0]));
    assert_eq!(held, None);
    assert_eq!(calls.load(Ordering::SeqCst), 1);

    // Open: an ordinary probe, the gate asked once per request.
    let (calls, open) = gate_open_for(usize::MAX);
    let o = p
        .probe(&plan, "probe-test", &open)
        .await
        .expect("open gate: an outcome");
    expect(&o, Reason::ProbeSucceeded, "HTTP 200");
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    let got = t.received(2).await;
    assert!(
        got[1].starts_with(b"GET / HTTP/1.1\r\n"),
        "{}",
        text(&got[1])
    );

    // A redirect hop is gated too: open for the first request only.
    let second = Recorder::start().await;
    let to = second.server.url();
    let first = Server::http("127.0.0.1:0", move |_| Answer::redirect(302, &to)).await;
    let plan = mk(&format!("host: {}\nfollowRedirects: true", first.url()));
    let (calls, once) = gate_open_for(1);
    let held = p.probe(&plan, "probe-test", &once).await;
    let got = second.received(1).await;
    assert_eq!(got.len(), 1);
    assert!(got[0].is_empty(), "request bytes: {:?}", text(&got[0]));
    assert_eq!(first.seen().len(), 1);
    assert_eq!(held, None);
    assert_eq!(calls.load(Ordering::SeqCst), 2);

    // Through a proxy: nothing reaches the proxy with the gate closed (http
    // target, absolute form; https target, CONNECT), and with the gate open
    // for the CONNECT only the target sees a TLS handshake but no request.
    let proxy = Proxy::start(false).await;
    let leaf = Leaf::self_signed(&["127.0.0.1"]);
    let tls = Server::https("127.0.0.1:0", server_tls(&leaf, BOTH, None), |_| {
        Answer::text("")
    })
    .await;
    let via = format!("proxy: {{url: '{}'}}", proxy.url());
    let plain = mk(&format!("host: {}\n{via}", t.server.url()));
    let https = mk(&format!(
        "host: {}\ntls: {{insecureSkipVerify: true}}\n{via}",
        tls.https_url()
    ));
    let mut held = Vec::new();
    for plan in [&plain, &https] {
        let (_, closed) = gate_open_for(0);
        held.push(p.probe(plan, "probe-test", &closed).await);
    }
    let (calls, once) = gate_open_for(1);
    held.push(p.probe(&https, "probe-test", &once).await);
    let deadline = Instant::now() + Duration::from_secs(2);
    while proxy.lines().len() < 3 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let lines = proxy.lines();
    assert_eq!(
        lines.iter().filter(|l| !l.is_empty()).collect::<Vec<_>>(),
        vec![&format!("CONNECT {} HTTP/1.1", tls.addr)],
        "only the CONNECT the gate let through"
    );
    assert_eq!((proxy.server.accepts(), lines.len()), (3, 3));
    assert!(tls.seen().is_empty(), "{:?}", tls.seen());
    assert_eq!(tls.accepts(), 1);
    assert_eq!(held, vec![None, None, None]);
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    let (calls, open) = gate_open_for(usize::MAX);
    let o = p
        .probe(&https, "probe-test", &open)
        .await
        .expect("open gate: an outcome");
    expect(&o, Reason::ProbeSucceeded, "");
    assert_eq!(
        calls.load(Ordering::SeqCst),
        2,
        "the CONNECT and the request"
    );
}

// ============================================================== TLS

#[tokio::test]
async fn tls_insecure_skip_verify_still_reports_expiry() {
    let leaf = Leaf::self_signed(&["127.0.0.1"]);
    let t = Server::https("127.0.0.1:0", server_tls(&leaf, BOTH, None), |_| {
        Answer::text("")
    })
    .await;
    let o = run(&format!("host: {}", t.https_url())).await;
    expect(
        &o,
        Reason::CertificateInvalid,
        "unknown certificate authority",
    );
    let o = run(&format!(
        "host: {}\ntls: {{insecureSkipVerify: true}}",
        t.https_url()
    ))
    .await;
    expect(&o, Reason::ProbeSucceeded, "");
    assert!(o.cert_not_after.is_some());
}

#[tokio::test]
async fn tls_ca_bundle_and_server_name() {
    let pki = TestCa::new();
    let leaf = pki.leaf_valid(&["svc.internal.test"], -1, 90);
    let t = Server::https("127.0.0.1:0", server_tls(&leaf, BOTH, None), |_| {
        Answer::text("")
    })
    .await;
    let ca = |kind: &str| {
        let r = if kind == "cm" {
            ValueRef::config_map("ca", "ca.crt")
        } else {
            ValueRef::secret("ca", "ca.crt")
        };
        vec![(r, pki.pem.as_bytes().to_vec())]
    };
    let host = format!("host: {}", t.https_url());
    // Neither: the test CA is unknown.
    let o = run(&format!("{host}\ntls: {{serverName: svc.internal.test}}")).await;
    expect(
        &o,
        Reason::CertificateInvalid,
        "unknown certificate authority",
    );
    // caBundle alone: the certificate is for another name than 127.0.0.1.
    let o = probe_timed(
        &prober(),
        &plan_with(
            &format!("{host}\ntls: {{caBundle: {{configMapKeyRef: {{name: ca, key: ca.crt}}}}}}"),
            &ca("cm"),
        ),
    )
    .await;
    expect(
        &o,
        Reason::CertificateInvalid,
        "not valid for the server name",
    );
    // Both: verified.
    for (kind, src) in [
        ("cm", "configMapKeyRef: {name: ca, key: ca.crt}"),
        ("secret", "secretKeyRef: {name: ca, key: ca.crt}"),
    ] {
        let o = probe_timed(
            &prober(),
            &plan_with(
                &format!("{host}\ntls: {{serverName: svc.internal.test, caBundle: {{{src}}}}}"),
                &ca(kind),
            ),
        )
        .await;
        expect(&o, Reason::ProbeSucceeded, "");
        assert_eq!(o.cert_not_after, Some(leaf.not_after));
    }
}

#[tokio::test]
async fn tls_client_certificate() {
    let pki = TestCa::new();
    let server = pki.leaf_valid(&["127.0.0.1"], -1, 90);
    let client = pki.leaf_valid(&["probe-client"], -1, 90);
    let ca = (
        ValueRef::config_map("ca", "ca.crt"),
        pki.pem.as_bytes().to_vec(),
    );
    for (name, versions) in [
        ("TLS 1.3", &[&rustls::version::TLS13][..]),
        ("TLS 1.2", &[&rustls::version::TLS12][..]),
    ] {
        let t = Server::https(
            "127.0.0.1:0",
            server_tls(&server, versions, Some(&pki.pem)),
            |_| Answer::text(""),
        )
        .await;
        let base = format!(
            "host: {}\ntls: {{caBundle: {{configMapKeyRef: {{name: ca, key: ca.crt}}}}",
            t.https_url()
        );
        let o = probe_timed(
            &prober(),
            &plan_with(&format!("{base}}}"), std::slice::from_ref(&ca)),
        )
        .await;
        assert_eq!(o.reason, Reason::TlsError, "{name}: {o:?}");
        assert!(t.seen().is_empty());
        let o = probe_timed(
            &prober(),
            &plan_with(
                &format!("{base}, clientCertificate: {{secretName: mtls}}}}"),
                &[
                    ca.clone(),
                    (
                        ValueRef::secret("mtls", "tls.crt"),
                        client.cert_pem.as_bytes().to_vec(),
                    ),
                    (
                        ValueRef::secret("mtls", "tls.key"),
                        client.key_pem.as_bytes().to_vec(),
                    ),
                ],
            ),
        )
        .await;
        assert_eq!(o.reason, Reason::ProbeSucceeded, "{name}: {o:?}");
        assert_eq!(t.seen().len(), 1);
    }
}

#[tokio::test]
async fn tls_min_version() {
    let leaf = Leaf::self_signed(&["127.0.0.1"]);
    let t = Server::https(
        "127.0.0.1:0",
        server_tls(&leaf, &[&rustls::version::TLS12], None),
        |_| Answer::text(""),
    )
    .await;
    let base = format!("host: {}\ntls: {{insecureSkipVerify: true", t.https_url());
    expect(&run(&format!("{base}}}")).await, Reason::ProbeSucceeded, "");
    expect(
        &run(&format!("{base}, minVersion: TLS12}}")).await,
        Reason::ProbeSucceeded,
        "",
    );
    let o = run(&format!("{base}, minVersion: TLS13}}")).await;
    expect(&o, Reason::TlsError, "TLS handshake failed");
    let t13 = Server::https(
        "127.0.0.1:0",
        server_tls(&leaf, &[&rustls::version::TLS13], None),
        |_| Answer::text(""),
    )
    .await;
    let o = run(&format!(
        "host: {}\ntls: {{insecureSkipVerify: true, minVersion: TLS13}}",
        t13.https_url()
    ))
    .await;
    expect(&o, Reason::ProbeSucceeded, "");
}

// ============================================================== reasons

/// Every reason, each from a target built to cause it.
#[tokio::test]
async fn every_reason_from_a_target_built_for_it() {
    let targets = ReasonTargets::start().await;
    for (want, yaml, values, msg) in targets.cases() {
        let o = probe_timed(&prober(), &plan_with(&yaml, &values)).await;
        println!(
            "{:<20} {:>5} ms  {}",
            o.reason.as_str(),
            o.duration.as_millis(),
            o.message
        );
        expect(&o, want, msg);
    }
    // Forbidden: the guard (more in the forgery tests).
    let o = probe_timed(
        &deny(&["127.0.0.0/8"]),
        &mk(&format!("host: {}", targets.ok.url())),
    )
    .await;
    expect(&o, Reason::Forbidden, "may not probe");
    // InvalidSpec: what admission cannot see (a Secret key that is missing).
    let err = plan(
        &spec("host: http://x\nauth: {bearer: {secretKeyRef: {name: tok, key: t}}}"),
        &|r| {
            Err(format!(
                "{} {:?} not found in namespace \"ns\"",
                r.kind(),
                r.name()
            ))
        },
    )
    .unwrap_err();
    assert!(err.contains("Secret \"tok\" not found"), "{err}");
}

type Values = Vec<(ValueRef, Vec<u8>)>;

/// The targets of `every_reason_from_a_target_built_for_it`.
struct ReasonTargets {
    /// Answers 200 "hello", or as its path says: /500, /slow (200 ms), /hang (30 s).
    ok: Server,
    /// HTTPS, with a certificate for another name from `pki`.
    tls: Server,
    /// Greets like an SSH server.
    garbage: Server,
    pki: TestCa,
}

impl ReasonTargets {
    async fn start() -> ReasonTargets {
        let ok = Server::http("127.0.0.1:0", |s| match s.uri.as_str() {
            "/500" => Answer::status(500),
            "/slow" => Answer {
                delay: Duration::from_millis(200),
                ..Answer::text("")
            },
            "/hang" => Answer {
                delay: Duration::from_secs(30),
                ..Answer::text("")
            },
            _ => Answer::text("hello"),
        })
        .await;
        let pki = TestCa::new();
        let other_name = pki.leaf_valid(&["another.example"], -1, 30);
        let tls = Server::https("127.0.0.1:0", server_tls(&other_name, BOTH, None), |_| {
            Answer::text("")
        })
        .await;
        let garbage = Server::raw("127.0.0.1:0", |mut s| async move {
            let _ = s.write_all(b"SSH-2.0-OpenSSH_9.6\r\n").await;
            tokio::time::sleep(Duration::from_secs(5)).await;
        })
        .await;
        ReasonTargets {
            ok,
            tls,
            garbage,
            pki,
        }
    }

    /// `(reason, spec, referenced values, part of the message)`.
    fn cases(&self) -> Vec<(Reason, String, Values, &'static str)> {
        let ca = vec![(
            ValueRef::secret("ca", "pem"),
            self.pki.pem.as_bytes().to_vec(),
        )];
        vec![
            (
                Reason::ProbeSucceeded,
                format!("host: {}", self.ok.url()),
                vec![],
                "HTTP 200",
            ),
            (
                Reason::DnsError,
                "host: http://no-such-host.invalid".into(),
                vec![],
                "cannot resolve no-such-host.invalid",
            ),
            (
                Reason::ConnectError,
                format!("host: http://127.0.0.1:{}", closed_port()),
                vec![],
                "connection refused",
            ),
            (
                Reason::TlsError,
                format!("host: https://{}", self.ok.addr),
                vec![],
                "TLS handshake failed",
            ),
            (
                Reason::CertificateInvalid,
                format!(
                    "host: {}\ntls: {{caBundle: {{secretKeyRef: {{name: ca, key: pem}}}}}}",
                    self.tls.https_url()
                ),
                ca,
                "not valid for the server name",
            ),
            (
                Reason::Timeout,
                format!("host: {}\npath: /hang", self.ok.url()),
                vec![],
                "timed out after 1s during response headers",
            ),
            (
                Reason::UnexpectedStatus,
                format!("host: {}\npath: /500", self.ok.url()),
                vec![],
                "HTTP 500, not an expected status",
            ),
            (
                Reason::BodyMismatch,
                format!("host: {}\nbodyMatch: {{regex: goodbye}}", self.ok.url()),
                vec![],
                "does not match",
            ),
            (
                Reason::SlowResponse,
                format!(
                    "host: {}\npath: /slow\nmaxResponseTimeMillis: 50",
                    self.ok.url()
                ),
                vec![],
                "slower than maxResponseTimeMillis 50",
            ),
            (
                Reason::ProtocolError,
                format!("host: {}", self.garbage.url()),
                vec![],
                "no valid HTTP response",
            ),
        ]
    }
}
