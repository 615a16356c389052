//! What a probe sees of the layers under HTTP (docs/probes.md), against real
//! servers on loopback (rustls and hyper): a full, verified TLS handshake on
//! every probe, the certificate chain, HTTP/2 and compression.

mod kinds;
use webchecker_kit as support;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use webchecker::probe::{AddressPolicy, Outcome, ProbePlan, Prober, Reason, ValueRef, plan};

use support::speaks::{Speaks, SwapCert, Target, provider};
use support::targets::{Answer, Leaf, TestCa};

// ============================================================== probing

fn prober() -> Prober {
    Prober::new(
        Some("protocols-test"),
        AddressPolicy::with_loopback(),
        64 * 1024,
    )
}

/// A plan from YAML; `ca` (PEM) is served as ConfigMap ca/ca.crt.
fn mk(yaml: &str, ca: Option<&str>) -> ProbePlan {
    let spec = serde_yaml::from_str(yaml).unwrap_or_else(|e| panic!("{yaml}: {e}"));
    let values: HashMap<ValueRef, Vec<u8>> = ca
        .map(|ca| (ValueRef::config_map("ca", "ca.crt"), ca.as_bytes().to_vec()))
        .into_iter()
        .collect();
    plan(&spec, &|r| {
        values
            .get(r)
            .cloned()
            .ok_or_else(|| "not found".to_string())
    })
    .unwrap_or_else(|e| panic!("{yaml}: {e}"))
}

const CA_BUNDLE: &str = "tls: {caBundle: {configMapKeyRef: {name: ca, key: ca.crt}}}";

/// Probes and checks the probe ended within its deadline plus 100 ms.
async fn probe(p: &Prober, plan: &ProbePlan) -> Outcome {
    let t = Instant::now();
    let o = p.probe(plan, "protocols-test", &|| true).await.unwrap();
    let limit = plan.timeout + Duration::from_millis(100);
    assert!(t.elapsed() <= limit, "took {:?}: {o:?}", t.elapsed());
    o
}

fn expect(o: &Outcome, reason: Reason, part: &str) {
    assert_eq!(o.reason, reason, "{o:?}");
    assert!(
        o.message.contains(part),
        "expected {part:?} in {:?}",
        o.message
    );
}

// ============================================================== TLS

/// A client with rustls's default session resumption: one HTTP/1.1 request,
/// read to the end (so it has taken the server's tickets). Its handshake kind.
async fn resuming_request(
    client: &Arc<rustls::ClientConfig>,
    addr: SocketAddr,
) -> rustls::HandshakeKind {
    let tcp = TcpStream::connect(addr).await.unwrap();
    let name = ServerName::try_from(addr.ip().to_string()).unwrap();
    let mut tls = tokio_rustls::TlsConnector::from(client.clone())
        .connect(name, tcp)
        .await
        .unwrap();
    tls.write_all(b"GET / HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut out = Vec::new();
    let _ = tls.read_to_end(&mut out).await;
    assert!(
        out.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&out)
    );
    tls.get_ref().1.handshake_kind().unwrap()
}

#[tokio::test]
async fn a_certificate_swapped_behind_valid_tickets_fails_the_next_probe() {
    let ca = TestCa::new();
    let good = ca.leaf(&["127.0.0.1"]);
    let expired = ca.leaf_valid(&["127.0.0.1"], -30, -2);
    let cert = SwapCert::new(&good);
    let t = Target::start(Speaks::Tls(cert.clone(), vec![b"http/1.1"]), |_| {
        Answer::ok()
    })
    .await;
    let plan = mk(
        &format!("host: https://{}\n{CA_BUNDLE}", t.addr),
        Some(&ca.pem),
    );
    let p = prober();

    // The control: a client that resumes sessions, trusting the same CA.
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(ca.pem.as_bytes()) {
        roots.add(c.unwrap()).unwrap();
    }
    let resuming = Arc::new(
        rustls::ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth(),
    );
    assert_eq!(
        resuming_request(&resuming, t.addr).await,
        rustls::HandshakeKind::Full
    );

    expect(&probe(&p, &plan).await, Reason::ProbeSucceeded, "HTTP 200");
    cert.set(&expired);

    // The server still honours its tickets: the resuming client sees no change.
    assert_eq!(
        resuming_request(&resuming, t.addr).await,
        rustls::HandshakeKind::Resumed
    );
    // A probe makes a full handshake and sees the expired certificate.
    let o = probe(&p, &plan).await;
    expect(&o, Reason::CertificateInvalid, "it has expired");
    // And every probe after it.
    expect(
        &probe(&p, &plan).await,
        Reason::CertificateInvalid,
        "it has expired",
    );
    cert.set(&good);
    expect(&probe(&p, &plan).await, Reason::ProbeSucceeded, "HTTP 200");
}

/// A CA, an intermediate that expires in `intermediate_days` and a leaf for
/// 127.0.0.1 that expires in 90 days, which the server sends with the
/// intermediate. The root's PEM and the leaf.
fn two_level_chain(intermediate_days: i64) -> (String, Leaf, i64) {
    use chrono::Datelike;
    let day = |d: i64| {
        let t = chrono::Utc::now().date_naive() + chrono::Duration::days(d);
        (
            rcgen::date_time_ymd(t.year(), t.month() as u8, t.day() as u8),
            t,
        )
    };
    let ca = |name: &str| {
        let mut p = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        p.distinguished_name.push(rcgen::DnType::CommonName, name);
        p.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        (p, rcgen::KeyPair::generate().unwrap())
    };
    let (root_p, root_k) = ca("test root");
    let root = root_p.clone().self_signed(&root_k).unwrap();
    let (mut int_p, int_k) = ca("test intermediate");
    let (until, date) = day(intermediate_days);
    int_p.not_before = day(-1).0;
    int_p.not_after = until;
    let int = int_p
        .clone()
        .signed_by(&int_k, &rcgen::Issuer::new(root_p, root_k))
        .unwrap();
    let mut leaf_p = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()]).unwrap();
    leaf_p.not_before = day(-1).0;
    leaf_p.not_after = day(90).0;
    let not_after = leaf_p.not_after.unix_timestamp();
    let key = rcgen::KeyPair::generate().unwrap();
    let leaf = leaf_p
        .signed_by(&key, &rcgen::Issuer::new(int_p, int_k))
        .unwrap();
    let leaf = Leaf {
        chain: vec![leaf.der().clone(), int.der().clone()],
        cert_pem: leaf.pem(),
        key_pem: key.serialize_pem(),
        not_after,
    };
    let int_not_after = date.and_hms_opt(0, 0, 0).unwrap().and_utc().timestamp();
    (root.pem(), leaf, int_not_after)
}

#[tokio::test]
async fn an_intermediate_that_expires_first_is_the_expiry() {
    let (root, leaf, int_not_after) = two_level_chain(20);
    let t = Target::start(Speaks::Tls(SwapCert::new(&leaf), vec![b"http/1.1"]), |_| {
        Answer::ok()
    })
    .await;
    let o = probe(
        &prober(),
        &mk(
            &format!("host: https://{}\n{CA_BUNDLE}", t.addr),
            Some(&root),
        ),
    )
    .await;
    expect(&o, Reason::ProbeSucceeded, "HTTP 200");
    assert_eq!(o.cert_not_after, Some(int_not_after));
    let tls = o.tls.as_ref().unwrap();
    assert_eq!(tls.version, "TLS 1.3");
    assert!(tls.cipher.starts_with("TLS13_"), "{tls:?}");
    let chain = tls.chain.as_ref().unwrap();
    assert_eq!(chain.earliest, 1);
    let names: Vec<(&str, &str)> = chain
        .certificates
        .iter()
        .map(|c| (c.subject.as_str(), c.issuer.as_str()))
        .collect();
    assert_eq!(
        names,
        [
            ("CN=rcgen self signed cert", "CN=test intermediate"),
            ("CN=test intermediate", "CN=test root")
        ]
    );
}

// ============================================================== compression

fn gzip(data: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

fn encode(coding: &str, data: &[u8]) -> Vec<u8> {
    use std::io::Write;
    match coding {
        "gzip" => gzip(data),
        "deflate" => {
            let mut e = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::fast());
            e.write_all(data).unwrap();
            e.finish().unwrap()
        }
        "br" => {
            let mut out = Vec::new();
            let mut w = brotli::CompressorWriter::new(&mut out, 4096, 5, 22);
            w.write_all(data).unwrap();
            drop(w);
            out
        }
        "zstd" => zstd::encode_all(data, 3).unwrap(),
        _ => data.to_vec(),
    }
}

#[tokio::test]
async fn bodies_are_decoded_in_the_coding_asked_for() {
    let doc = br#"{"status": "ok", "n": 1}"#;
    for coding in ["gzip", "deflate", "br", "zstd"] {
        let body = encode(coding, doc);
        let t = Target::start(Speaks::Http1, move |_| Answer {
            body: body.clone(),
            ..Answer::ok().header("content-encoding", coding)
        })
        .await;
        let o = probe(
            &prober(),
            &mk(
                &format!(
                    "host: http://{}\ncompression: {coding}\njsonChecks: [{{pointer: /status, equals: ok}}]\nbodyMatch: {{regex: '\"n\": 1'}}",
                    t.addr
                ),
                None,
            ),
        )
        .await;
        expect(&o, Reason::ProbeSucceeded, "HTTP 200");
        assert_eq!(t.seen()[0].1["accept-encoding"], coding);
    }
}

#[tokio::test]
async fn identity_is_asked_for_and_a_server_that_compresses_anyway_is_decoded() {
    let body = gzip(b"all is well");
    let t = Target::start(Speaks::Http1, move |_| Answer {
        body: body.clone(),
        ..Answer::ok().header("content-encoding", "gzip")
    })
    .await;
    let o = probe(
        &prober(),
        &mk(
            &format!("host: http://{}\nbodyMatch: {{regex: well}}", t.addr),
            None,
        ),
    )
    .await;
    expect(&o, Reason::ProbeSucceeded, "HTTP 200");
    assert_eq!(t.seen()[0].1["accept-encoding"], "identity");

    // Broken or unknown codings are protocol errors when the body is read.
    let t = Target::start(Speaks::Http1, |req| {
        let body = gzip(b"all is well");
        let (coding, body) = match req.uri.path() {
            "/cut" => ("gzip", body[..body.len() - 4].to_vec()),
            "/fine" => ("gzip", body),
            "/hop" => {
                return Answer::redirect(302, "/fine").header("content-encoding", "compress");
            }
            _ => ("compress", body),
        };
        Answer {
            body,
            ..Answer::ok().header("content-encoding", coding)
        }
    })
    .await;
    let yaml = |path: &str| {
        format!(
            "host: http://{}\npath: {path}\nbodyMatch: {{regex: well}}",
            t.addr
        )
    };
    let o = probe(&prober(), &mk(&yaml("/cut"), None)).await;
    expect(
        &o,
        Reason::ProtocolError,
        "HTTP 200: the response body is not valid gzip",
    );
    assert_eq!(o.status_code, Some(200));
    let o = probe(&prober(), &mk(&yaml("/other"), None)).await;
    expect(
        &o,
        Reason::ProtocolError,
        "a Content-Encoding the probe does not decode",
    );
    // Only the final response's body counts: a redirect's is not checked.
    let o = probe(
        &prober(),
        &mk(&format!("{}\nfollowRedirects: true", yaml("/hop")), None),
    )
    .await;
    expect(&o, Reason::ProbeSucceeded, "HTTP 200");
}

/// A raw server that answers every connection with `head` and `body`, and
/// counts the body bytes it got written before the client went away.
async fn raw_server(
    head: String,
    body: Arc<Vec<u8>>,
) -> (SocketAddr, Arc<Mutex<Vec<usize>>>, tokio::task::AbortHandle) {
    let listener = support::listener().await;
    let addr = listener.local_addr().unwrap();
    let written = Arc::new(Mutex::new(Vec::new()));
    let w2 = written.clone();
    let task = tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = listener.accept().await else {
                continue;
            };
            let (head, body, written) = (head.clone(), body.clone(), w2.clone());
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                let _ = s.read(&mut buf).await;
                let _ = s.write_all(head.as_bytes()).await;
                let mut n = 0;
                for chunk in body.chunks(64 * 1024) {
                    if s.write_all(chunk).await.is_err() {
                        break;
                    }
                    n += chunk.len();
                }
                written.lock().unwrap().push(n);
            });
        }
    });
    (addr, written, task.abort_handle())
}

#[tokio::test]
async fn a_ten_mib_gzip_bomb_stops_at_the_body_limit_and_in_time() {
    // 10 MiB of gzip members, each 64 MiB of zeros: 10 GiB decoded.
    let member = gzip(&vec![0u8; 64 << 20]);
    let bomb: Vec<u8> = member.iter().copied().cycle().take(10 << 20).collect();
    let members = bomb.len() / member.len();
    assert!(members >= 100, "{} bytes a member", member.len());
    let bomb = Arc::new(bomb);
    let head = format!(
        "HTTP/1.1 200 OK\r\ncontent-encoding: gzip\r\ncontent-length: {}\r\n\r\n",
        bomb.len()
    );
    let (addr, written, task) = raw_server(head, bomb.clone()).await;
    let plan = mk(
        &format!(
            "host: http://{addr}\ntimeoutSeconds: 5\ncompression: gzip\njsonChecks: [{{pointer: /status}}]"
        ),
        None,
    );
    let t = Instant::now();
    let o = probe(&prober(), &plan).await;
    let took = t.elapsed();
    // Zeros are not JSON; what was decoded is exactly the limit.
    expect(
        &o,
        Reason::BodyMismatch,
        "(only the first 65536 bytes are read)",
    );
    assert!(took < Duration::from_secs(1), "{took:?}");
    // The probe closed the connection after a small part of the bomb (what
    // the kernel buffered included).
    let sent = support::eventually(Duration::from_secs(5), "the server saw the close", || {
        let w = written.lock().unwrap().clone();
        async move { w.first().copied() }
    })
    .await;
    eprintln!(
        "gzip bomb: probe took {took:?}; the server wrote {sent} of {} bytes",
        bomb.len()
    );
    assert!(
        sent < bomb.len() / 2,
        "the server wrote {sent} of {} bytes",
        bomb.len()
    );
    task.abort();
}

// ============================================================== HTTP/2

fn version(o: &Outcome) -> Option<http::Version> {
    o.http_version
}

#[tokio::test]
async fn http2_is_negotiated_by_alpn_and_http1_still_works() {
    let ca = TestCa::new();
    let leaf = ca.leaf(&["127.0.0.1"]);
    let tls = |alpn: Vec<&'static [u8]>| Speaks::Tls(SwapCert::new(&leaf), alpn);
    let h2_only = Target::start(tls(vec![b"h2"]), |_| Answer::ok()).await;
    let h1_only = Target::start(tls(vec![b"http/1.1"]), |_| Answer::ok()).await;
    let no_alpn = Target::start(tls(vec![]), |_| Answer::ok()).await;
    let p = prober();
    let yaml = |t: &Target, extra: &str| format!("host: https://{}\n{CA_BUNDLE}\n{extra}", t.addr);

    let o = probe(&p, &mk(&yaml(&h2_only, ""), Some(&ca.pem))).await;
    expect(&o, Reason::ProbeSucceeded, "HTTP 200");
    assert_eq!(version(&o), Some(http::Version::HTTP_2));
    let (v, headers) = &h2_only.seen()[0];
    assert_eq!(*v, http::Version::HTTP_2);
    assert!(!headers.contains_key("connection"), "{headers:?}");
    assert_eq!(headers["x-webchecker-replica"], "protocols-test");

    for t in [&h1_only, &no_alpn] {
        let o = probe(&p, &mk(&yaml(t, ""), Some(&ca.pem))).await;
        expect(&o, Reason::ProbeSucceeded, "HTTP 200");
        assert_eq!(version(&o), Some(http::Version::HTTP_11));
        assert_eq!(t.seen()[0].0, http::Version::HTTP_11);
    }

    // httpVersions: the 1.1-only server fails with a clear reason.
    let o = probe(
        &p,
        &mk(&yaml(&h1_only, "httpVersions: [HTTP/2]"), Some(&ca.pem)),
    )
    .await;
    expect(
        &o,
        Reason::UnexpectedHttpVersion,
        "the response is HTTP/1.1, not one of httpVersions (HTTP/2)",
    );
    assert_eq!(o.status_code, Some(200));
    let o = probe(
        &p,
        &mk(&yaml(&h2_only, "httpVersions: [HTTP/2]"), Some(&ca.pem)),
    )
    .await;
    expect(&o, Reason::ProbeSucceeded, "HTTP 200");
    let o = probe(
        &p,
        &mk(
            &yaml(&h2_only, "httpVersions: [HTTP/1.1, HTTP/1.0]"),
            Some(&ca.pem),
        ),
    )
    .await;
    expect(
        &o,
        Reason::UnexpectedHttpVersion,
        "the response is HTTP/2, not one of httpVersions (HTTP/1.1, HTTP/1.0)",
    );

    // http2: Disabled offers http/1.1 alone, which the h2-only server refuses.
    let o = probe(&p, &mk(&yaml(&h2_only, "http2: Disabled"), Some(&ca.pem))).await;
    expect(&o, Reason::TlsError, "TLS handshake failed");
    let o = probe(&p, &mk(&yaml(&h1_only, "http2: Disabled"), Some(&ca.pem))).await;
    expect(&o, Reason::ProbeSucceeded, "HTTP 200");
    // PriorKnowledge speaks HTTP/2 even to a server that did not negotiate it.
    let o = probe(
        &p,
        &mk(&yaml(&no_alpn, "http2: PriorKnowledge"), Some(&ca.pem)),
    )
    .await;
    expect(&o, Reason::ProtocolError, "");
    assert_eq!(
        no_alpn.seen().len(),
        1,
        "an HTTP/1.1 server sees no request in the h2 preface"
    );
}

#[tokio::test]
async fn h2c_with_prior_knowledge_and_its_failures() {
    let h2c = Target::start(Speaks::H2c, |_| Answer::ok()).await;
    let h1 = Target::start(Speaks::Http1, |_| Answer::ok()).await;
    let p = prober();
    let o = probe(
        &p,
        &mk(
            &format!(
                "host: http://{}\nhttp2: PriorKnowledge\nmethod: POST\nbody: hello",
                h2c.addr
            ),
            None,
        ),
    )
    .await;
    expect(&o, Reason::ProbeSucceeded, "HTTP 200");
    assert_eq!(version(&o), Some(http::Version::HTTP_2));
    assert_eq!(h2c.seen()[0].0, http::Version::HTTP_2);
    // Without prior knowledge plain http is HTTP/1.1, which an h2c-only server does not speak.
    let o = probe(&p, &mk(&format!("host: http://{}", h2c.addr), None)).await;
    expect(&o, Reason::ProtocolError, "");
    // And HTTP/2 to an HTTP/1.1 server is a protocol error, not a hang.
    let o = probe(
        &p,
        &mk(
            &format!("host: http://{}\nhttp2: PriorKnowledge", h1.addr),
            None,
        ),
    )
    .await;
    expect(&o, Reason::ProtocolError, "");
    let o = probe(&p, &mk(&format!("host: http://{}", h1.addr), None)).await;
    expect(&o, Reason::ProbeSucceeded, "HTTP 200");
    assert_eq!(version(&o), Some(http::Version::HTTP_11));
}

#[tokio::test]
async fn http2_bodies_are_checked_and_decoded_and_redirects_followed() {
    let ca = TestCa::new();
    let leaf = ca.leaf(&["127.0.0.1"]);
    let body = encode("gzip", br#"{"status": "ok"}"#);
    let t = Target::start(
        Speaks::Tls(SwapCert::new(&leaf), vec![b"h2", b"http/1.1"]),
        move |req| {
            if req.uri.path() == "/old" {
                Answer::redirect(308, "/new")
            } else {
                Answer {
                    body: body.clone(),
                    ..Answer::ok().header("content-encoding", "gzip")
                }
            }
        },
    )
    .await;
    let o = probe(
        &prober(),
        &mk(
            &format!(
                "host: https://{}\npath: /old\nfollowRedirects: true\ncompression: gzip\nhttpVersions: [HTTP/2]\njsonChecks: [{{pointer: /status, equals: ok}}]\n{CA_BUNDLE}",
                t.addr
            ),
            Some(&ca.pem),
        ),
    )
    .await;
    expect(&o, Reason::ProbeSucceeded, "HTTP 200");
    assert_eq!(o.redirects, 1);
    let seen = t.seen();
    assert_eq!(seen.len(), 2);
    assert!(
        seen.iter()
            .all(|(v, h)| *v == http::Version::HTTP_2 && h["accept-encoding"] == "gzip")
    );
}

// ============================================================== redirects

/// RFC 9110 15.4 and the Fetch standard, one case per rule: which codes are
/// followed, the method and body after each, and the body headers dropped
/// with the body.
#[tokio::test]
async fn redirect_rules_per_rfc_9110() {
    // Method, path, Content-Length, Content-Type of each request.
    type Seen = (String, String, Option<String>, Option<String>);
    let log: Arc<Mutex<Vec<Seen>>> = Arc::default();
    let l2 = log.clone();
    let t = Target::start(Speaks::Http1, move |req| {
        let h = |n: &str| req.headers.get(n).map(|v| v.to_str().unwrap().to_string());
        l2.lock().unwrap().push((
            req.method.to_string(),
            req.uri.path().to_string(),
            h("content-length"),
            h("content-type"),
        ));
        match req.uri.path().strip_prefix("/r") {
            Some(code) => Answer::redirect(code.parse().unwrap(), "/end"),
            None => Answer::ok(),
        }
    })
    .await;
    let p = prober();
    // (code, method, followed, method after, body kept)
    let cases = [
        (301, "POST", true, "GET", false),
        (302, "POST", true, "GET", false),
        (301, "PUT", true, "PUT", true),
        (302, "DELETE", true, "DELETE", true),
        (303, "POST", true, "GET", false),
        (303, "PUT", true, "GET", false),
        (303, "HEAD", true, "HEAD", false),
        (307, "POST", true, "POST", true),
        (308, "PUT", true, "PUT", true),
        (300, "GET", false, "", false),
        (304, "GET", false, "", false),
        (305, "GET", false, "", false),
    ];
    for (code, method, followed, after, kept) in cases {
        log.lock().unwrap().clear();
        let o = probe(
            &p,
            &mk(
                &format!(
                    "host: http://{}\npath: /r{code}\nmethod: {method}\nbody: hi\nheaders: [{{name: Content-Type, value: text/plain}}]\nfollowRedirects: true\nexpectedStatusCodes: [2xx, 3xx]",
                    t.addr
                ),
                None,
            ),
        )
        .await;
        let seen = log.lock().unwrap().clone();
        let what = format!("{code} after {method}: {seen:?}");
        if !followed {
            assert_eq!(
                (o.status_code, o.redirects, seen.len()),
                (Some(code), 0, 1),
                "{what}"
            );
            continue;
        }
        assert_eq!((o.status_code, o.redirects), (Some(200), 1), "{what}");
        let (m, path, length, content_type) = &seen[1];
        assert_eq!((m.as_str(), path.as_str()), (after, "/end"), "{what}");
        if kept {
            assert_eq!(
                (length.as_deref(), content_type.as_deref()),
                (Some("2"), Some("text/plain")),
                "{what}"
            );
        } else {
            assert_eq!((length, content_type), (&None, &None), "{what}");
        }
    }
}

// ============================================================== cost

/// CPU time of this thread.
fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid clock id and a valid pointer to a timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// The prober's CPU per probe (user and system time of the one thread that
/// runs the probes; the targets run on other threads), by protocol. Not a
/// gate: run with `--ignored --nocapture` to see the figures.
#[test]
#[ignore]
fn cpu_per_probe_by_protocol() {
    let ca = TestCa::new();
    let leaf = ca.leaf(&["127.0.0.1"]);
    let servers = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let tls = |alpn: Vec<&'static [u8]>| Speaks::Tls(SwapCert::new(&leaf), alpn);
    let targets = servers.block_on(async {
        vec![
            (
                "http, HTTP/1.1",
                Target::start(Speaks::Http1, |_| Answer::ok()).await,
                "",
            ),
            (
                "http, h2c",
                Target::start(Speaks::H2c, |_| Answer::ok()).await,
                "http2: PriorKnowledge",
            ),
            (
                "https, HTTP/1.1",
                Target::start(tls(vec![b"http/1.1"]), |_| Answer::ok()).await,
                "",
            ),
            (
                "https, HTTP/2",
                Target::start(tls(vec![b"h2"]), |_| Answer::ok()).await,
                "",
            ),
        ]
    });
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let p = prober();
    for (what, t, extra) in &targets {
        let scheme = if what.starts_with("https") {
            "https"
        } else {
            "http"
        };
        let plan = mk(
            &format!("host: {scheme}://{}\n{extra}\n{CA_BUNDLE}", t.addr),
            Some(&ca.pem),
        );
        let n = 2000;
        let (cpu, wall) = rt.block_on(async {
            for _ in 0..100 {
                assert!(p.probe(&plan, "x", &|| true).await.unwrap().success());
            }
            let (c, w) = (thread_cpu(), Instant::now());
            for _ in 0..n {
                assert!(p.probe(&plan, "x", &|| true).await.unwrap().success());
            }
            (thread_cpu() - c, w.elapsed())
        });
        eprintln!(
            "{what}: {:.1} µs CPU per probe, {:.1} µs wall",
            cpu.as_secs_f64() * 1e6 / f64::from(n),
            wall.as_secs_f64() * 1e6 / f64::from(n)
        );
    }
}
