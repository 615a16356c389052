//! The full HTTP check (docs/probes.md), against real local targets.
//!
//! Part 1 calls the public `Prober::probe()` directly: every option, every
//! reason and the hostile targets, with precise timings and no cluster.
//! Part 2 runs operator processes against the real control plane
//! (hack/cluster.sh): admission rules, Secrets (and that their values never
//! leak), thresholds, CertificateExpiring, the forgery guard, the proxy from
//! the environment, and 200 hostile targets at once (memory).

mod support;

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::pin::Pin;
use std::process::{Child, Command};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use webchecker::api::{WebChecker, WebCheckerSpec};
use webchecker::probe::{
    AddressPolicy, EnvProxy, Outcome, ProbePlan, Prober, Reason, ValueRef, base64, plan,
};

use support::dns::{Dns, HOSTS_FILE_NAME};
use support::*;

// ============================================================== targets

/// A request as a target saw it.
#[derive(Clone, Debug)]
struct Seen {
    method: String,
    uri: String,
    headers: HashMap<String, String>,
    body: Vec<u8>,
}

/// How a target answers.
#[derive(Clone, Debug)]
struct Reply {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
    delay: Duration,
}

impl Reply {
    fn ok(body: &str) -> Reply {
        Reply {
            status: 200,
            headers: vec![],
            body: body.as_bytes().to_vec(),
            delay: Duration::ZERO,
        }
    }
    fn status(status: u16) -> Reply {
        Reply {
            status,
            ..Reply::ok("")
        }
    }
    fn header(mut self, k: &str, v: &str) -> Reply {
        self.headers.push((k.into(), v.into()));
        self
    }
    fn redirect(code: u16, to: &str) -> Reply {
        Reply::status(code).header("location", to)
    }
}

type Handler = Arc<dyn Fn(&Seen) -> Reply + Send + Sync>;
type RawHandler = Arc<dyn Fn(TcpStream) -> Pin<Box<dyn Future<Output = ()> + Send>> + Send + Sync>;

/// A local target: HTTP (hyper), HTTPS (rustls + hyper) or raw TCP. Counts
/// accepted connections and records requests.
struct Server {
    addr: SocketAddr,
    seen: Arc<Mutex<Vec<Seen>>>,
    accepts: Arc<AtomicUsize>,
    task: tokio::task::AbortHandle,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Server {
    async fn http(bind: &str, h: impl Fn(&Seen) -> Reply + Send + Sync + 'static) -> Server {
        Self::start(bind, None, Some(Arc::new(h)), None).await
    }

    async fn https(
        bind: &str,
        tls: Arc<rustls::ServerConfig>,
        h: impl Fn(&Seen) -> Reply + Send + Sync + 'static,
    ) -> Server {
        Self::start(bind, Some(tls), Some(Arc::new(h)), None).await
    }

    async fn raw<F, Fut>(bind: &str, f: F) -> Server
    where
        F: Fn(TcpStream) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let raw: RawHandler = Arc::new(move |s| Box::pin(f(s)));
        Self::start(bind, None, None, Some(raw)).await
    }

    async fn start(
        bind: &str,
        tls: Option<Arc<rustls::ServerConfig>>,
        handler: Option<Handler>,
        raw: Option<RawHandler>,
    ) -> Server {
        let listener = TcpListener::bind(bind).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let accepts = Arc::new(AtomicUsize::new(0));
        let (s2, a2) = (seen.clone(), accepts.clone());
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                a2.fetch_add(1, Ordering::SeqCst);
                if let Some(raw) = &raw {
                    tokio::spawn(raw(stream));
                    continue;
                }
                let handler = handler.clone().unwrap();
                let seen = s2.clone();
                let tls = tls.clone();
                tokio::spawn(async move {
                    let svc = service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                        let handler = handler.clone();
                        let seen = seen.clone();
                        async move {
                            let method = req.method().to_string();
                            let uri = req.uri().to_string();
                            let headers = req
                                .headers()
                                .iter()
                                .map(|(k, v)| {
                                    (
                                        k.as_str().to_string(),
                                        String::from_utf8_lossy(v.as_bytes()).to_string(),
                                    )
                                })
                                .collect();
                            let body = req
                                .into_body()
                                .collect()
                                .await
                                .map(|b| b.to_bytes().to_vec())
                                .unwrap_or_default();
                            let s = Seen {
                                method,
                                uri,
                                headers,
                                body,
                            };
                            let reply = handler(&s);
                            seen.lock().unwrap().push(s);
                            tokio::time::sleep(reply.delay).await;
                            let mut b = hyper::Response::builder().status(reply.status);
                            for (k, v) in &reply.headers {
                                b = b.header(k, v);
                            }
                            Ok::<_, std::convert::Infallible>(
                                b.body(Full::new(Bytes::from(reply.body))).unwrap(),
                            )
                        }
                    });
                    match tls {
                        Some(cfg) => {
                            let Ok(s) = tokio_rustls::TlsAcceptor::from(cfg).accept(stream).await
                            else {
                                return;
                            };
                            let _ = hyper::server::conn::http1::Builder::new()
                                .serve_connection(TokioIo::new(s), svc)
                                .await;
                        }
                        None => {
                            let _ = hyper::server::conn::http1::Builder::new()
                                .serve_connection(TokioIo::new(stream), svc)
                                .await;
                        }
                    }
                });
            }
        });
        Server {
            addr,
            seen,
            accepts,
            task: task.abort_handle(),
        }
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn https_url(&self) -> String {
        format!("https://{}", self.addr)
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    fn accepts(&self) -> usize {
        self.accepts.load(Ordering::SeqCst)
    }
}

/// Reads an HTTP request head (up to the blank line) from a raw connection.
async fn read_head(s: &mut TcpStream) -> Vec<u8> {
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") && head.len() < 65536 {
        match s.read(&mut b).await {
            Ok(1) => head.push(b[0]),
            _ => break,
        }
    }
    head
}

/// A minimal HTTP proxy: CONNECT tunnels and absolute-form forwarding. Records
/// each request line it got.
struct Proxy {
    server: Server,
    lines: Arc<Mutex<Vec<String>>>,
}

impl Proxy {
    async fn start(refuse_connect: bool) -> Proxy {
        let lines = Arc::new(Mutex::new(Vec::new()));
        let l2 = lines.clone();
        let server = Server::raw("127.0.0.1:0", move |mut s| {
            let lines = l2.clone();
            async move {
                let head = read_head(&mut s).await;
                let text = String::from_utf8_lossy(&head).to_string();
                let line = text.lines().next().unwrap_or_default().to_string();
                lines.lock().unwrap().push(line.clone());
                let mut parts = line.split_whitespace();
                let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
                if method == "CONNECT" {
                    if refuse_connect {
                        let _ = s
                            .write_all(b"HTTP/1.1 403 Forbidden\r\ncontent-length: 0\r\n\r\n")
                            .await;
                        return;
                    }
                    let Ok(mut up) = TcpStream::connect(target).await else {
                        let _ = s.write_all(b"HTTP/1.1 502 Bad Gateway\r\n\r\n").await;
                        return;
                    };
                    let _ = s
                        .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                        .await;
                    let _ = tokio::io::copy_bidirectional(&mut s, &mut up).await;
                } else {
                    let hostport = target
                        .strip_prefix("http://")
                        .and_then(|r| r.split('/').next())
                        .unwrap_or_default()
                        .to_string();
                    let Ok(mut up) = TcpStream::connect(&hostport).await else {
                        let _ = s.write_all(b"HTTP/1.1 502 Bad Gateway\r\n\r\n").await;
                        return;
                    };
                    let _ = up.write_all(&head).await;
                    let _ = tokio::io::copy_bidirectional(&mut s, &mut up).await;
                }
            }
        })
        .await;
        Proxy { server, lines }
    }

    fn url(&self) -> String {
        self.server.url()
    }

    fn lines(&self) -> Vec<String> {
        self.lines.lock().unwrap().clone()
    }
}

// ============================================================== certificates

/// A test certificate authority (rcgen).
struct Pki {
    issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
    ca_pem: String,
}

/// A leaf certificate and its key, DER and PEM.
struct Leaf {
    chain: Vec<CertificateDer<'static>>,
    key_pem: String,
    cert_pem: String,
    not_after: i64,
}

impl Leaf {
    fn key(&self) -> PrivateKeyDer<'static> {
        PrivateKeyDer::from_pem_slice(self.key_pem.as_bytes()).unwrap()
    }
}

/// Today plus `days`, as rcgen wants it.
fn ymd_in(days: i64) -> (i32, u8, u8) {
    use chrono::Datelike;
    let d = chrono::Utc::now().date_naive() + chrono::Duration::days(days);
    (d.year(), d.month() as u8, d.day() as u8)
}

impl Pki {
    fn new() -> Pki {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "webchecker test CA");
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let cert = params.self_signed(&key).unwrap();
        Pki {
            ca_pem: cert.pem(),
            issuer: rcgen::Issuer::new(params, key),
        }
    }

    /// A certificate for `names` signed by this CA, valid until today + `days`.
    fn leaf(&self, names: &[&str], days: i64) -> Leaf {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params =
            rcgen::CertificateParams::new(names.iter().map(|s| s.to_string()).collect::<Vec<_>>())
                .unwrap();
        let (y, m, d) = ymd_in(-1);
        params.not_before = rcgen::date_time_ymd(y, m, d);
        let (y, m, d) = ymd_in(days);
        params.not_after = rcgen::date_time_ymd(y, m, d);
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        let not_after = chrono::NaiveDate::from_ymd_opt(y, m as u32, d as u32)
            .unwrap()
            .and_hms_opt(0, 0, 0)
            .unwrap()
            .and_utc()
            .timestamp();
        Leaf {
            chain: vec![cert.der().clone()],
            key_pem: key.serialize_pem(),
            cert_pem: cert.pem(),
            not_after,
        }
    }
}

/// A self-signed certificate (no CA the prober knows).
fn self_signed(names: &[&str]) -> Leaf {
    let key = rcgen::KeyPair::generate().unwrap();
    let params =
        rcgen::CertificateParams::new(names.iter().map(|s| s.to_string()).collect::<Vec<_>>())
            .unwrap();
    let cert = params.self_signed(&key).unwrap();
    Leaf {
        chain: vec![cert.der().clone()],
        key_pem: key.serialize_pem(),
        cert_pem: cert.pem(),
        not_after: 0,
    }
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// A rustls server configuration: protocol versions, and client
/// certificates required (signed by `client_ca`) when given.
fn server_tls(
    leaf: &Leaf,
    versions: &[&'static rustls::SupportedProtocolVersion],
    client_ca: Option<&str>,
) -> Arc<rustls::ServerConfig> {
    let b = rustls::ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(versions)
        .unwrap();
    let b = match client_ca {
        Some(pem) => {
            let mut roots = rustls::RootCertStore::empty();
            for c in CertificateDer::pem_slice_iter(pem.as_bytes()) {
                roots.add(c.unwrap()).unwrap();
            }
            let v = rustls::server::WebPkiClientVerifier::builder_with_provider(
                Arc::new(roots),
                provider(),
            )
            .build()
            .unwrap();
            b.with_client_cert_verifier(v)
        }
        None => b.with_no_client_auth(),
    };
    let mut cfg = b.with_single_cert(leaf.chain.clone(), leaf.key()).unwrap();
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    Arc::new(cfg)
}

const BOTH: &[&rustls::SupportedProtocolVersion] =
    &[&rustls::version::TLS13, &rustls::version::TLS12];

// ============================================================== probing

/// The targets of these tests listen on loopback.
fn prober() -> Prober {
    test_dns(Prober::new(
        Some("probe-test"),
        AddressPolicy::with_loopback(),
        64 * 1024,
    ))
}

fn deny(cidrs: &[&str]) -> Prober {
    test_dns(Prober::new(
        Some("probe-test"),
        AddressPolicy {
            deny: cidrs.iter().map(|c| c.parse().unwrap()).collect(),
            ..AddressPolicy::with_loopback()
        },
        64 * 1024,
    ))
}

/// Names resolve through the test kit's name server, never the machine's.
fn test_dns(mut p: Prober) -> Prober {
    p.resolver = Arc::new(Dns::shared().resolver());
    p
}

fn spec(yaml: &str) -> WebCheckerSpec {
    serde_yaml::from_str(yaml).unwrap_or_else(|e| panic!("{yaml}: {e}"))
}

fn plan_with(yaml: &str, values: &[(ValueRef, Vec<u8>)]) -> ProbePlan {
    let m: HashMap<ValueRef, Vec<u8>> = values.iter().cloned().collect();
    plan(&spec(yaml), &|r| {
        m.get(r)
            .cloned()
            .ok_or_else(|| format!("{} {:?} not found", r.kind(), r.name()))
    })
    .unwrap_or_else(|e| panic!("{yaml}: {e}"))
}

fn mk(yaml: &str) -> ProbePlan {
    plan_with(yaml, &[])
}

/// Probes and checks the probe ended within its deadline plus 100 ms, both
/// by the outcome's own clock and by the wall clock.
async fn probe_timed(p: &Prober, plan: &ProbePlan) -> Outcome {
    let t = Instant::now();
    let o = p
        .probe(plan, "probe-test", &|| true)
        .await
        .expect("an open gate always gives an outcome");
    let wall = t.elapsed();
    let limit = plan.timeout + Duration::from_millis(100);
    assert!(
        wall <= limit && o.duration <= limit,
        "probe took {wall:?} (outcome {:?}), limit {limit:?}: {o:?}",
        o.duration
    );
    o
}

async fn run(yaml: &str) -> Outcome {
    probe_timed(&prober(), &mk(yaml)).await
}

fn expect(o: &Outcome, reason: Reason, message_part: &str) {
    assert_eq!(o.reason, reason, "{o:?}");
    assert!(
        o.message.contains(message_part),
        "expected {message_part:?} in {:?}",
        o.message
    );
}

/// A listening-then-closed port: connections are refused.
fn closed_port() -> u16 {
    free_port()
}

// ============================================================== request

#[tokio::test]
async fn method_headers_and_body_reach_the_target() {
    let t = Server::http("127.0.0.1:0", |_| Reply::ok("fine")).await;
    let o = run(&format!("host: {}\npath: /p?q=1", t.url())).await;
    expect(&o, Reason::ProbeSucceeded, "HTTP 200");
    let s = t.seen();
    assert_eq!((s[0].method.as_str(), s[0].uri.as_str()), ("GET", "/p?q=1"));
    assert!(s[0].body.is_empty());
    assert!(s[0].headers["user-agent"].starts_with("webchecker-operator/"));
    assert_eq!(s[0].headers["x-webchecker-replica"], "probe-test");

    let o = run(&format!(
        "host: {}\nmethod: PUT\nbody: '{{\"a\": 1}}'\nheaders: [{{name: X-Plain, value: plain-1}}, {{name: Content-Type, value: application/json}}]",
        t.url()
    ))
    .await;
    expect(&o, Reason::ProbeSucceeded, "HTTP 200");
    let s = &t.seen()[1];
    assert_eq!(s.method, "PUT");
    assert_eq!(s.body, b"{\"a\": 1}");
    assert_eq!(s.headers["x-plain"], "plain-1");
    assert_eq!(s.headers["content-type"], "application/json");
    assert_eq!(s.headers["content-length"], "8");
}

#[tokio::test]
async fn secret_header_basic_and_bearer_auth_are_sent() {
    let t = Server::http("127.0.0.1:0", |_| Reply::ok("")).await;
    let p = plan_with(
        &format!(
            "host: {}\nheaders: [{{name: X-Api-Key, valueFrom: {{secretKeyRef: {{name: api, key: token}}}}}}]\nauth: {{basic: {{secretName: creds}}}}",
            t.url()
        ),
        &[
            (ValueRef::secret("api", "token"), b"k-123\n".to_vec()),
            (ValueRef::secret("creds", "username"), b"alice".to_vec()),
            (
                ValueRef::secret("creds", "password"),
                b"pa:ss word".to_vec(),
            ),
        ],
    );
    expect(
        &probe_timed(&prober(), &p).await,
        Reason::ProbeSucceeded,
        "",
    );
    let p = plan_with(
        &format!(
            "host: {}\nauth: {{bearer: {{secretKeyRef: {{name: tok, key: t}}}}}}",
            t.url()
        ),
        &[(ValueRef::secret("tok", "t"), b"eyJhbGciOi.x.y".to_vec())],
    );
    expect(
        &probe_timed(&prober(), &p).await,
        Reason::ProbeSucceeded,
        "",
    );
    let s = t.seen();
    assert_eq!(s[0].headers["x-api-key"], "k-123");
    assert_eq!(
        s[0].headers["authorization"],
        format!("Basic {}", base64(b"alice:pa:ss word"))
    );
    assert_eq!(s[1].headers["authorization"], "Bearer eyJhbGciOi.x.y");
}

// ============================================================== response checks

#[tokio::test]
async fn expected_status_codes() {
    let t = Server::http("127.0.0.1:0", |_| Reply::status(404)).await;
    let o = run(&format!("host: {}", t.url())).await;
    expect(&o, Reason::UnexpectedStatus, "HTTP 404");
    assert_eq!(o.status_code, Some(404));
    let o = run(&format!(
        "host: {}\nexpectedStatusCodes: ['200', 400-404]",
        t.url()
    ))
    .await;
    expect(&o, Reason::ProbeSucceeded, "HTTP 404");
}

#[tokio::test]
async fn body_match_and_invert() {
    let t = Server::http("127.0.0.1:0", |_| Reply::ok("status: all good\n")).await;
    let base = format!("host: {}", t.url());
    expect(
        &run(&format!("{base}\nbodyMatch: {{regex: 'all go+d'}}")).await,
        Reason::ProbeSucceeded,
        "",
    );
    expect(
        &run(&format!("{base}\nbodyMatch: {{regex: 'degraded'}}")).await,
        Reason::BodyMismatch,
        "does not match bodyMatch.regex",
    );
    expect(
        &run(&format!(
            "{base}\nbodyMatch: {{regex: 'good', invert: true}}"
        ))
        .await,
        Reason::BodyMismatch,
        "which it must not",
    );
    expect(
        &run(&format!(
            "{base}\nbodyMatch: {{regex: 'error', invert: true}}"
        ))
        .await,
        Reason::ProbeSucceeded,
        "",
    );
}

#[tokio::test]
async fn json_checks() {
    let t = Server::http("127.0.0.1:0", |s| {
        if s.uri == "/text" {
            Reply::ok("<html>ok</html>")
        } else {
            Reply::ok(
                r#"{"status":"ok","version":{"major":2},"ready":true,"items":[{"name":"a"}]}"#,
            )
            .header("content-type", "application/json")
        }
    })
    .await;
    let base = format!("host: {}", t.url());
    let o = run(&format!(
        "{base}\njsonChecks: [{{pointer: /status, equals: ok}}, {{pointer: /version/major, equals: '2'}}, {{pointer: /ready, equals: 'true'}}, {{pointer: /items/0/name}}]"
    ))
    .await;
    expect(&o, Reason::ProbeSucceeded, "");
    let o = run(&format!(
        "{base}\njsonChecks: [{{pointer: /status, equals: degraded}}]"
    ))
    .await;
    expect(&o, Reason::BodyMismatch, "does not equal \"degraded\"");
    assert!(
        !o.message.contains("\"ok\""),
        "no body content in messages: {}",
        o.message
    );
    let o = run(&format!("{base}\njsonChecks: [{{pointer: /missing}}]")).await;
    expect(&o, Reason::BodyMismatch, "no value at \"/missing\"");
    let o = run(&format!(
        "{base}\npath: /text\njsonChecks: [{{pointer: /status}}]"
    ))
    .await;
    expect(&o, Reason::BodyMismatch, "not JSON");
}

#[tokio::test]
async fn header_checks() {
    let t = Server::http("127.0.0.1:0", |_| {
        Reply::ok("")
            .header("x-version", "v2.4.1")
            .header("etag", "\"abc\"")
    })
    .await;
    let base = format!("host: {}", t.url());
    expect(
        &run(&format!(
            "{base}\nheaderChecks: [{{name: X-Version, regex: '^v2\\.'}}, {{name: etag}}]"
        ))
        .await,
        Reason::ProbeSucceeded,
        "",
    );
    let o = run(&format!(
        "{base}\nheaderChecks: [{{name: X-Version, regex: '^v3'}}]"
    ))
    .await;
    expect(&o, Reason::BodyMismatch, "x-version header does not match");
    assert!(!o.message.contains("v2.4.1"), "{}", o.message);
    expect(
        &run(&format!("{base}\nheaderChecks: [{{name: X-Missing}}]")).await,
        Reason::BodyMismatch,
        "no x-missing header",
    );
}

#[tokio::test]
async fn max_response_time_gives_slow_response() {
    let t = Server::http("127.0.0.1:0", |_| Reply {
        delay: Duration::from_millis(300),
        ..Reply::ok("")
    })
    .await;
    let o = run(&format!("host: {}\nmaxResponseTimeMillis: 100", t.url())).await;
    expect(
        &o,
        Reason::SlowResponse,
        "slower than maxResponseTimeMillis 100",
    );
    assert_eq!(o.status_code, Some(200));
    expect(
        &run(&format!("host: {}\nmaxResponseTimeMillis: 2000", t.url())).await,
        Reason::ProbeSucceeded,
        "",
    );
}

// ============================================================== redirects

#[tokio::test]
async fn redirects_are_followed_counted_and_bounded() {
    let t = Server::http("127.0.0.1:0", |s| match s.uri.as_str() {
        "/start" => Reply::redirect(302, "/middle"),
        "/middle" => Reply::redirect(301, "/end"),
        "/end" => Reply::ok("landed"),
        "/loop" => Reply::redirect(302, "/loop"),
        "/post" => Reply::redirect(303, "/end"),
        _ => Reply::status(404),
    })
    .await;
    let base = format!("host: {}", t.url());
    // Without followRedirects a 3xx is judged by expectedStatusCodes (seed behaviour).
    let o = run(&format!("{base}\npath: /start")).await;
    assert_eq!(
        (o.reason, o.status_code, o.redirects),
        (Reason::ProbeSucceeded, Some(302), 0)
    );
    let o = run(&format!(
        "{base}\npath: /start\nexpectedStatusCodes: ['200']"
    ))
    .await;
    expect(&o, Reason::UnexpectedStatus, "HTTP 302");
    let before = t.accepts();
    let o = run(&format!(
        "{base}\npath: /start\nfollowRedirects: true\nbodyMatch: {{regex: landed}}"
    ))
    .await;
    assert_eq!(
        (o.reason, o.status_code, o.redirects),
        (Reason::ProbeSucceeded, Some(200), 2)
    );
    assert_eq!(t.accepts() - before, 3, "a fresh connection per hop");
    // Timings are summed over the hops: three connects, three exchanges.
    assert!(o.phases.connect > Duration::ZERO && o.phases.processing > Duration::ZERO);
    let o = run(&format!(
        "{base}\npath: /start\nfollowRedirects: true\nmaxRedirects: 1"
    ))
    .await;
    expect(
        &o,
        Reason::UnexpectedStatus,
        "more than 1 redirects (maxRedirects)",
    );
    let o = run(&format!("{base}\npath: /loop\nfollowRedirects: true")).await;
    expect(&o, Reason::UnexpectedStatus, "more than 5 redirects");
    assert_eq!(o.redirects, 5);
    // 303 turns a POST into a GET without body.
    let o = run(&format!(
        "{base}\npath: /post\nmethod: POST\nbody: x\nfollowRedirects: true"
    ))
    .await;
    expect(&o, Reason::ProbeSucceeded, "");
    let s = t.seen();
    let last = s.last().unwrap();
    assert_eq!((last.method.as_str(), last.body.len()), ("GET", 0));
}

#[tokio::test]
async fn credentials_do_not_follow_a_redirect_to_another_origin() {
    let other = Server::http("127.0.0.1:0", |_| Reply::ok("")).await;
    let to = format!("{}/elsewhere", other.url());
    let t = Server::http("127.0.0.1:0", move |s| match s.uri.as_str() {
        "/same" => Reply::redirect(302, "/end"),
        "/cross" => Reply::redirect(302, &to),
        _ => Reply::ok(""),
    })
    .await;
    for path in ["/same", "/cross"] {
        let p = plan_with(
            &format!(
                "host: {}\npath: {path}\nfollowRedirects: true\nheaders: [{{name: X-Plain, value: p}}, {{name: X-Key, valueFrom: {{secretKeyRef: {{name: s, key: k}}}}}}]\nauth: {{bearer: {{secretKeyRef: {{name: s, key: k}}}}}}",
                t.url()
            ),
            &[(ValueRef::secret("s", "k"), b"s3cr3t".to_vec())],
        );
        expect(
            &probe_timed(&prober(), &p).await,
            Reason::ProbeSucceeded,
            "",
        );
    }
    let same = &t.seen()[1];
    assert_eq!(same.uri, "/end");
    assert_eq!(same.headers["x-key"], "s3cr3t");
    assert_eq!(same.headers["authorization"], "Bearer s3cr3t");
    let cross = &other.seen()[0];
    assert_eq!(cross.headers["x-plain"], "p", "plain headers still go");
    assert!(!cross.headers.contains_key("x-key"), "{:?}", cross.headers);
    assert!(!cross.headers.contains_key("authorization"));
}

// ============================================================== forgery guard

#[tokio::test]
async fn a_redirect_to_a_denied_address_is_forbidden_and_nothing_is_sent() {
    let denied = Server::raw("127.0.0.2:0", |_s| async {}).await;
    let to = format!("http://{}/meta-data", denied.addr);
    let t = Server::http("127.0.0.1:0", move |_| Reply::redirect(302, &to)).await;
    let p = deny(&["127.0.0.2/32"]);
    let o = probe_timed(
        &p,
        &mk(&format!("host: {}\nfollowRedirects: true", t.url())),
    )
    .await;
    expect(
        &o,
        Reason::Forbidden,
        "after a redirect (HTTP 302) to another origin: the new host is an address the operator may not probe",
    );
    assert!(!o.message.contains("127.0.0.2"), "{}", o.message);
    assert_eq!(o.redirects, 1);
    assert_eq!(t.accepts(), 1);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        denied.accepts(),
        0,
        "no connection reached the denied address"
    );
    // Control: without the deny list the same redirect is followed.
    let o = probe_timed(
        &prober(),
        &mk(&format!("host: {}\nfollowRedirects: true", t.url())),
    )
    .await;
    assert_eq!(o.redirects, 1);
    assert_eq!(denied.accepts(), 1);
}

#[tokio::test]
async fn a_name_resolving_to_a_denied_address_is_forbidden() {
    let name = format!("guard-{}.probe.test", rand_suffix());
    Dns::shared().add(&name, &["127.0.0.1".parse().unwrap()]);
    let t = Server::http("127.0.0.1:0", |_| Reply::ok("")).await;
    let url = format!("http://{name}:{}", t.addr.port());
    let o = probe_timed(&deny(&["127.0.0.1/32"]), &mk(&format!("host: {url}"))).await;
    expect(
        &o,
        Reason::Forbidden,
        &format!("{name} resolves only to addresses the operator may not probe"),
    );
    assert_eq!(t.accepts(), 0);
    assert!(Dns::shared().queries(&name) > 0, "resolved through DNS");
    // allow-list form of the guard.
    let only_ten = test_dns(Prober::new(
        None,
        AddressPolicy {
            allow: vec!["10.0.0.0/8".parse().unwrap()],
            ..AddressPolicy::with_loopback()
        },
        65536,
    ));
    expect(
        &probe_timed(&only_ten, &mk(&format!("host: {url}"))).await,
        Reason::Forbidden,
        "",
    );
    assert_eq!(t.accepts(), 0);
    expect(
        &run(&format!("host: {url}")).await,
        Reason::ProbeSucceeded,
        "",
    );
    assert_eq!(t.accepts(), 1);
}

// ============================================================== transport

#[tokio::test]
async fn ip_family_filters_resolved_addresses_and_auto_falls_back() {
    let v4 = Server::http("127.0.0.1:0", |_| Reply::ok("v4")).await;
    let v6 = Server::http("[::1]:0", |_| Reply::ok("v6")).await;
    let mut p = prober();
    // dual.test: the IPv6 address first (as getaddrinfo sorts it), nothing
    // listens there on v4's port; v6only.test the other way round.
    p.static_hosts.insert(
        "dual.test".into(),
        vec!["::1".parse().unwrap(), "127.0.0.1".parse().unwrap()],
    );
    p.static_hosts.insert(
        "v6only.test".into(),
        vec!["127.0.0.1".parse().unwrap(), "::1".parse().unwrap()],
    );
    let dual = format!("host: http://dual.test:{}", v4.addr.port());
    let o = probe_timed(&p, &mk(&dual)).await;
    expect(&o, Reason::ProbeSucceeded, "");
    let o = probe_timed(&p, &mk(&format!("{dual}\nipFamily: IPv4"))).await;
    expect(&o, Reason::ProbeSucceeded, "");
    let o = probe_timed(&p, &mk(&format!("{dual}\nipFamily: IPv6"))).await;
    expect(&o, Reason::ConnectError, "connection refused");
    assert_eq!(v4.accepts(), 2);

    let six = format!("host: http://v6only.test:{}", v6.addr.port());
    expect(
        &probe_timed(&p, &mk(&six)).await,
        Reason::ProbeSucceeded,
        "",
    );
    expect(
        &probe_timed(&p, &mk(&format!("{six}\nipFamily: IPv6"))).await,
        Reason::ProbeSucceeded,
        "",
    );
    expect(
        &probe_timed(&p, &mk(&format!("{six}\nipFamily: IPv4"))).await,
        Reason::ConnectError,
        "",
    );
    assert_eq!(v6.accepts(), 2);
    // A literal address of the other family: nothing to connect to.
    let o = run(&format!(
        "host: http://[::1]:{}\nipFamily: IPv4",
        v6.addr.port()
    ))
    .await;
    expect(
        &o,
        Reason::DnsError,
        "has no IPv4 address (spec.ipFamily IPv4)",
    );
    let o = run(&format!(
        "host: http://127.0.0.1:{}\nipFamily: IPv6",
        v4.addr.port()
    ))
    .await;
    expect(&o, Reason::DnsError, "has no IPv6 address");
}

// ============================================================== resolution

/// Names go to the configured name server (here the test kit's): an answer,
/// NXDOMAIN, a name without an address of the family asked for, and a name
/// of the hosts file (answered without asking DNS). The resolve phase is timed.
#[tokio::test]
async fn names_resolve_through_the_configured_name_server() {
    let dns = Dns::shared();
    let zone = format!("r{}.resolve.test", rand_suffix());
    let t = Server::http("127.0.0.1:0", |_| Reply::ok("")).await;
    let v6 = Server::http("[::1]:0", |_| Reply::ok("")).await;
    dns.add(&format!("www.{zone}"), &["127.0.0.1".parse().unwrap()]);
    dns.add(&format!("six.{zone}"), &["::1".parse().unwrap()]);
    let port = t.addr.port();

    let o = run(&format!("host: http://www.{zone}:{port}")).await;
    expect(&o, Reason::ProbeSucceeded, "");
    assert!(o.phases.resolve > Duration::ZERO, "{:?}", o.phases);
    assert_eq!(dns.queries(&format!("www.{zone}")), 2, "A and AAAA");
    // Upper case and a trailing dot are the same name.
    let o = run(&format!("host: http://WWW.{}.:{port}", zone.to_uppercase())).await;
    expect(&o, Reason::ProbeSucceeded, "");

    let o = run(&format!("host: http://nope.{zone}:{port}")).await;
    expect(
        &o,
        Reason::DnsError,
        &format!("cannot resolve nope.{zone}: no such host"),
    );

    let six = format!("host: http://six.{zone}:{}", v6.addr.port());
    expect(&run(&six).await, Reason::ProbeSucceeded, "");
    expect(
        &run(&format!("{six}\nipFamily: IPv4")).await,
        Reason::DnsError,
        &format!("six.{zone} has no IPv4 address (spec.ipFamily IPv4)"),
    );
    assert_eq!(v6.accepts(), 1);

    let o = run(&format!("host: http://{HOSTS_FILE_NAME}:{port}")).await;
    expect(&o, Reason::ProbeSucceeded, "");
    assert_eq!(dns.queries(HOSTS_FILE_NAME), 0, "the hosts file answered");
    assert_eq!(t.accepts(), 3);
}

/// A zone whose name server never answers: the probe ends at its deadline
/// with DNSError, and the lookup ends with it (no query is sent after the
/// probe returned). A zone that answers A but drops AAAA queries costs the
/// resolution delay (50 ms), not the probe.
#[tokio::test]
async fn a_black_holed_lookup_ends_with_the_probe() {
    let dns = Dns::shared();
    let zone = format!("b{}.blackhole.test", rand_suffix());
    dns.black_hole(&zone);
    let name = format!("www.{zone}");
    // Queries time out after 2 s and are tried 5 times: a lookup that went on
    // after the probe would ask again at 2 s and 4 s.
    let mut p = prober();
    p.resolver = Arc::new(dns.resolver_with("timeout:2 attempts:5"));
    let o = probe_timed(&p, &mk(&format!("host: http://{name}"))).await;
    expect(
        &o,
        Reason::DnsError,
        "timed out after 1s during name resolution",
    );
    let sent = dns.queries(&name);
    assert!(sent >= 2, "A and AAAA were asked: {sent}");
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(dns.queries(&name), sent, "no query after the probe ended");

    let half = format!("h{}.noaaaa.test", rand_suffix());
    let t = Server::http("127.0.0.1:0", |_| Reply::ok("")).await;
    dns.add(&half, &["127.0.0.1".parse().unwrap()]);
    dns.black_hole_type(&half, hickory_resolver::proto::rr::RecordType::AAAA);
    let url = format!("host: http://{half}:{}", t.addr.port());
    let o = run(&url).await;
    expect(&o, Reason::ProbeSucceeded, "");
    assert!(
        o.phases.resolve >= webchecker::probe::RESOLUTION_DELAY
            && o.phases.resolve < Duration::from_millis(500),
        "resolve took {:?}",
        o.phases.resolve
    );
    expect(
        &run(&format!("{url}\nipFamily: IPv6")).await,
        Reason::DnsError,
        "timed out after 1s during name resolution",
    );
}

/// Resolution never takes a thread of the blocking pool: with a pool of one
/// thread and 50 probes stuck in black-holed lookups, a probe of a name that
/// answers still succeeds at once (getaddrinfo on the blocking pool, as
/// before, would wait for a thread).
#[test]
fn lookups_do_not_use_the_blocking_pool() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .max_blocking_threads(1)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let dns = Dns::shared();
        let zone = format!("p{}.pool.test", rand_suffix());
        dns.black_hole(&format!("stuck.{zone}"));
        dns.add(&format!("ok.{zone}"), &["127.0.0.1".parse().unwrap()]);
        let t = Server::http("127.0.0.1:0", |_| Reply::ok("")).await;
        // Hold the only blocking thread for the whole test.
        let (hold_tx, hold_rx) = std::sync::mpsc::channel::<()>();
        let held = tokio::task::spawn_blocking(move || hold_rx.recv());
        let p = Arc::new(prober());
        let stuck: Vec<_> = (0..50)
            .map(|i| {
                let p = p.clone();
                let plan = mk(&format!(
                    "host: http://c{i}.stuck.{zone}\nintervalSeconds: 5\ntimeoutSeconds: 3"
                ));
                tokio::spawn(async move { p.probe(&plan, "probe-test", &|| true).await })
            })
            .collect();
        // Every stuck probe has sent its queries.
        eventually(
            Duration::from_secs(2),
            "stuck lookups under way",
            || async { (dns.queries_under(&format!("stuck.{zone}")) >= 100).then_some(()) },
        )
        .await;
        let o = probe_timed(
            &p,
            &mk(&format!("host: http://ok.{zone}:{}", t.addr.port())),
        )
        .await;
        expect(&o, Reason::ProbeSucceeded, "");
        for s in stuck {
            let o = s.await.unwrap().unwrap();
            expect(&o, Reason::DnsError, "during name resolution");
        }
        hold_tx.send(()).unwrap();
        held.await.unwrap().unwrap();
    });
}

#[tokio::test]
async fn proxy_url_connect_for_https_and_absolute_form_for_http() {
    let proxy = Proxy::start(false).await;
    let plain = Server::http("127.0.0.1:0", |_| Reply::ok("")).await;
    let leaf = self_signed(&["127.0.0.1"]);
    let tls = Server::https("127.0.0.1:0", server_tls(&leaf, BOTH, None), |_| {
        Reply::ok("")
    })
    .await;
    // Default: no proxy at all.
    expect(
        &run(&format!("host: {}", plain.url())).await,
        Reason::ProbeSucceeded,
        "",
    );
    assert!(proxy.lines().is_empty());
    let via = format!("proxy: {{url: '{}'}}", proxy.url());
    let o = run(&format!("host: {}\npath: /x?y=1\n{via}", plain.url())).await;
    expect(&o, Reason::ProbeSucceeded, "");
    assert_eq!(
        proxy.lines(),
        vec![format!("GET {}/x?y=1 HTTP/1.1", plain.url())]
    );
    assert_eq!(
        plain.seen()[1].uri,
        format!("{}/x?y=1", plain.url()),
        "absolute form"
    );
    let o = run(&format!(
        "host: {}\ntls: {{insecureSkipVerify: true}}\n{via}",
        tls.https_url()
    ))
    .await;
    expect(&o, Reason::ProbeSucceeded, "");
    assert!(o.phases.tls > Duration::ZERO);
    assert_eq!(proxy.lines()[1], format!("CONNECT {} HTTP/1.1", tls.addr));
    assert_eq!(tls.seen()[0].uri, "/", "origin form inside the tunnel");
    // A proxy that refuses the tunnel.
    let refusing = Proxy::start(true).await;
    let o = run(&format!(
        "host: {}\ntls: {{insecureSkipVerify: true}}\nproxy: {{url: '{}'}}",
        tls.https_url(),
        refusing.url()
    ))
    .await;
    expect(&o, Reason::ConnectError, "refused CONNECT");
    // A proxy at a denied address: the guard applies to the proxy.
    let o = probe_timed(
        &deny(&["127.0.0.1/32"]),
        &mk(&format!("host: http://192.0.2.10\n{via}")),
    )
    .await;
    expect(
        &o,
        Reason::Forbidden,
        "the proxy 127.0.0.1 is an address the operator may not probe",
    );
    // A literal target address is checked even behind a proxy.
    let o = probe_timed(
        &deny(&["192.0.2.0/24"]),
        &mk(&format!("host: http://192.0.2.10\n{via}")),
    )
    .await;
    expect(
        &o,
        Reason::Forbidden,
        "192.0.2.10 is an address the operator may not probe",
    );
    assert_eq!(proxy.lines().len(), 2, "nothing reached the proxy");
    // A proxy that is down.
    let o = run(&format!(
        "host: {}\nproxy: {{url: 'http://127.0.0.1:{}'}}",
        plain.url(),
        closed_port()
    ))
    .await;
    expect(&o, Reason::ConnectError, "cannot connect to proxy");
}

#[tokio::test]
async fn proxy_from_environment_honours_no_proxy() {
    let proxy = Proxy::start(false).await;
    let t = Server::http("127.0.0.1:0", |_| Reply::ok("")).await;
    let mut p = prober();
    p.env_proxy = EnvProxy::parse(Some(&proxy.url()), Some(&proxy.url()), None);
    let yaml = format!("host: {}\nproxy: {{fromEnvironment: true}}", t.url());
    // Without spec.proxy the environment is ignored.
    expect(
        &probe_timed(&p, &mk(&format!("host: {}", t.url()))).await,
        Reason::ProbeSucceeded,
        "",
    );
    assert!(proxy.lines().is_empty());
    expect(
        &probe_timed(&p, &mk(&yaml)).await,
        Reason::ProbeSucceeded,
        "",
    );
    assert_eq!(proxy.lines().len(), 1);
    p.env_proxy = EnvProxy::parse(Some(&proxy.url()), None, Some("localhost,127.0.0.0/8"));
    expect(
        &probe_timed(&p, &mk(&yaml)).await,
        Reason::ProbeSucceeded,
        "",
    );
    assert_eq!(proxy.lines().len(), 1, "NO_PROXY bypassed the proxy");
    assert_eq!(t.accepts(), 3);
    p.env_proxy = EnvProxy::parse(Some("socks5://127.0.0.1:1080"), None, None);
    expect(
        &probe_timed(&p, &mk(&yaml)).await,
        Reason::InvalidSpec,
        "proxy environment is not usable",
    );
}

// ============================================================== the gate

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
    let first = Server::http("127.0.0.1:0", move |_| Reply::redirect(302, &to)).await;
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
    let leaf = self_signed(&["127.0.0.1"]);
    let tls = Server::https("127.0.0.1:0", server_tls(&leaf, BOTH, None), |_| {
        Reply::ok("")
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
    let leaf = self_signed(&["127.0.0.1"]);
    let t = Server::https("127.0.0.1:0", server_tls(&leaf, BOTH, None), |_| {
        Reply::ok("")
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
    let pki = Pki::new();
    let leaf = pki.leaf(&["svc.internal.test"], 90);
    let t = Server::https("127.0.0.1:0", server_tls(&leaf, BOTH, None), |_| {
        Reply::ok("")
    })
    .await;
    let ca = |kind: &str| {
        let r = if kind == "cm" {
            ValueRef::config_map("ca", "ca.crt")
        } else {
            ValueRef::secret("ca", "ca.crt")
        };
        vec![(r, pki.ca_pem.as_bytes().to_vec())]
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
    let pki = Pki::new();
    let server = pki.leaf(&["127.0.0.1"], 90);
    let client = pki.leaf(&["probe-client"], 90);
    let ca = (
        ValueRef::config_map("ca", "ca.crt"),
        pki.ca_pem.as_bytes().to_vec(),
    );
    for (name, versions) in [
        ("TLS 1.3", &[&rustls::version::TLS13][..]),
        ("TLS 1.2", &[&rustls::version::TLS12][..]),
    ] {
        let t = Server::https(
            "127.0.0.1:0",
            server_tls(&server, versions, Some(&pki.ca_pem)),
            |_| Reply::ok(""),
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
    let leaf = self_signed(&["127.0.0.1"]);
    let t = Server::https(
        "127.0.0.1:0",
        server_tls(&leaf, &[&rustls::version::TLS12], None),
        |_| Reply::ok(""),
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
        |_| Reply::ok(""),
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
    let ok = Server::http("127.0.0.1:0", |s| match s.uri.as_str() {
        "/500" => Reply::status(500),
        "/slow" => Reply {
            delay: Duration::from_millis(200),
            ..Reply::ok("")
        },
        "/hang" => Reply {
            delay: Duration::from_secs(30),
            ..Reply::ok("")
        },
        _ => Reply::ok("hello"),
    })
    .await;
    let pki = Pki::new();
    let other_name = pki.leaf(&["another.example"], 30);
    let tls = Server::https("127.0.0.1:0", server_tls(&other_name, BOTH, None), |_| {
        Reply::ok("")
    })
    .await;
    let garbage = Server::raw("127.0.0.1:0", |mut s| async move {
        let _ = s.write_all(b"SSH-2.0-OpenSSH_9.6\r\n").await;
        tokio::time::sleep(Duration::from_secs(5)).await;
    })
    .await;
    let ca = vec![(
        ValueRef::secret("ca", "pem"),
        pki.ca_pem.as_bytes().to_vec(),
    )];
    type Values = Vec<(ValueRef, Vec<u8>)>;
    let cases: Vec<(Reason, String, Values, &str)> = vec![
        (
            Reason::ProbeSucceeded,
            format!("host: {}", ok.url()),
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
            format!("host: https://{}", ok.addr),
            vec![],
            "TLS handshake failed",
        ),
        (
            Reason::CertificateInvalid,
            format!(
                "host: {}\ntls: {{caBundle: {{secretKeyRef: {{name: ca, key: pem}}}}}}",
                tls.https_url()
            ),
            ca,
            "not valid for the server name",
        ),
        (
            Reason::Timeout,
            format!("host: {}\npath: /hang", ok.url()),
            vec![],
            "timed out after 1s during response headers",
        ),
        (
            Reason::UnexpectedStatus,
            format!("host: {}\npath: /500", ok.url()),
            vec![],
            "HTTP 500, not an expected status",
        ),
        (
            Reason::BodyMismatch,
            format!("host: {}\nbodyMatch: {{regex: goodbye}}", ok.url()),
            vec![],
            "does not match",
        ),
        (
            Reason::SlowResponse,
            format!("host: {}\npath: /slow\nmaxResponseTimeMillis: 50", ok.url()),
            vec![],
            "slower than maxResponseTimeMillis 50",
        ),
        (
            Reason::ProtocolError,
            format!("host: {}", garbage.url()),
            vec![],
            "no valid HTTP response",
        ),
    ];
    for (want, yaml, values, msg) in cases {
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
    let o = probe_timed(&deny(&["127.0.0.0/8"]), &mk(&format!("host: {}", ok.url()))).await;
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

// ============================================================== hostile targets

/// Hostile targets: each probe ends within timeout + 100 ms with a precise reason.
#[tokio::test]
async fn hostile_targets_end_within_the_deadline_with_a_precise_reason() {
    let targets = Hostile::start().await;
    for (kind, want, msg) in Hostile::EXPECTED {
        let o = probe_timed(
            &prober(),
            &plan_with(&targets.yaml(kind, 1), &targets.values()),
        )
        .await;
        println!(
            "{kind:<18} {:<18} {:>5} ms  {}",
            o.reason.as_str(),
            o.duration.as_millis(),
            o.message
        );
        expect(&o, *want, msg);
    }
    // The endless body with checks: judged on the first maxBodyBytes.
    let o = probe_timed(
        &prober(),
        &mk(&format!(
            "{}\njsonChecks: [{{pointer: /x}}]",
            targets.yaml("endless-body", 1)
        )),
    )
    .await;
    expect(
        &o,
        Reason::BodyMismatch,
        "only the first 65536 bytes are read",
    );
    let o = probe_timed(
        &prober(),
        &mk(&format!(
            "{}\nbodyMatch: {{regex: '^x+$'}}",
            targets.yaml("endless-body", 1)
        )),
    )
    .await;
    expect(&o, Reason::ProbeSucceeded, "");
}

/// One local target of each hostile kind (shared by the direct test and the
/// 200-target end-to-end test).
struct Hostile {
    servers: HashMap<&'static str, Server>,
    ca_pem: String,
}

impl Hostile {
    const KINDS: [&'static str; 12] = [
        "slow-headers",
        "fat-headers",
        "fat-body",
        "endless-body",
        "trickle-body",
        "huge-headers",
        "redirect-loop",
        "tls-stall",
        "reset",
        "non-http",
        "wrong-name",
        "silent",
    ];

    const EXPECTED: &'static [(&'static str, Reason, &'static str)] = &[
        ("slow-headers", Reason::Timeout, "during response headers"),
        ("fat-headers", Reason::Timeout, "during response headers"),
        ("fat-body", Reason::Timeout, "during response body"),
        ("endless-body", Reason::ProbeSucceeded, "HTTP 200"),
        ("trickle-body", Reason::Timeout, "during response body"),
        (
            "huge-headers",
            Reason::ProtocolError,
            "message head is too large",
        ),
        (
            "redirect-loop",
            Reason::UnexpectedStatus,
            "more than 5 redirects",
        ),
        ("tls-stall", Reason::Timeout, "during TLS handshake"),
        ("reset", Reason::ProtocolError, "response body broken"),
        ("non-http", Reason::ProtocolError, "no valid HTTP response"),
        (
            "wrong-name",
            Reason::CertificateInvalid,
            "not valid for the server name",
        ),
        ("silent", Reason::Timeout, "during response headers"),
    ];

    async fn start() -> Hostile {
        let mut servers = HashMap::new();
        // Answers one byte a second, never finishing the head.
        servers.insert(
            "slow-headers",
            Server::raw("127.0.0.1:0", |mut s| async move {
                read_head(&mut s).await;
                for b in b"HTTP/1.1 200 OK\r\nX-Slow: 1111111111111111111111111111111111".iter() {
                    if s.write_all(&[*b]).await.is_err() {
                        return;
                    }
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            })
            .await,
        );
        // 60 KiB of headers at once (just under the 64 KiB head limit), then a
        // byte a second: the prober holds a nearly full buffer until the deadline.
        servers.insert(
            "fat-headers",
            Server::raw("127.0.0.1:0", |mut s| async move {
                read_head(&mut s).await;
                let mut head = b"HTTP/1.1 200 OK\r\n".to_vec();
                for i in 0..60 {
                    head.extend_from_slice(
                        format!("X-Fat-{i:02}: {}\r\n", "f".repeat(1000)).as_bytes(),
                    );
                }
                if s.write_all(&head).await.is_err() {
                    return;
                }
                for _ in 0..30 {
                    if s.write_all(b"X").await.is_err() {
                        return;
                    }
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            })
            .await,
        );
        // 60 KiB of body at once, then a byte every 100 ms (the checker keeps
        // the body for bodyMatch).
        servers.insert(
            "fat-body",
            Server::raw("127.0.0.1:0", |mut s| async move {
                read_head(&mut s).await;
                let _ = s
                    .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 10000000\r\n\r\n")
                    .await;
                if s.write_all(&vec![b'z'; 60 * 1024]).await.is_err() {
                    return;
                }
                while s.write_all(b"z").await.is_ok() {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            })
            .await,
        );
        // A fast body that never ends.
        servers.insert(
            "endless-body",
            Server::raw("127.0.0.1:0", |mut s| async move {
                read_head(&mut s).await;
                let _ = s
                    .write_all(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\n")
                    .await;
                let chunk = vec![b'x'; 16 * 1024];
                while s.write_all(&chunk).await.is_ok() {}
            })
            .await,
        );
        // A body that never ends, 10 bytes every 100 ms.
        servers.insert(
            "trickle-body",
            Server::raw("127.0.0.1:0", |mut s| async move {
                read_head(&mut s).await;
                let _ = s
                    .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 100000000\r\n\r\n")
                    .await;
                while s.write_all(b"0123456789").await.is_ok() {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            })
            .await,
        );
        // 1 MiB of headers.
        servers.insert(
            "huge-headers",
            Server::raw("127.0.0.1:0", |mut s| async move {
                read_head(&mut s).await;
                let mut head = b"HTTP/1.1 200 OK\r\n".to_vec();
                let mut i = 0;
                while head.len() < 1024 * 1024 {
                    head.extend_from_slice(
                        format!("X-Pad-{i}: {}\r\n", "a".repeat(1000)).as_bytes(),
                    );
                    i += 1;
                }
                head.extend_from_slice(b"\r\n");
                let _ = s.write_all(&head).await;
                tokio::time::sleep(Duration::from_secs(3)).await;
            })
            .await,
        );
        servers.insert(
            "redirect-loop",
            Server::http("127.0.0.1:0", |_| Reply::redirect(302, "/again")).await,
        );
        // Accepts TCP, never speaks TLS.
        servers.insert(
            "tls-stall",
            Server::raw("127.0.0.1:0", |s| async move {
                tokio::time::sleep(Duration::from_secs(30)).await;
                drop(s);
            })
            .await,
        );
        // Promises 100 kB, sends 1 kB, then resets the connection.
        servers.insert(
            "reset",
            Server::raw("127.0.0.1:0", |mut s| async move {
                read_head(&mut s).await;
                let _ = s
                    .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n")
                    .await;
                let _ = s.write_all(&[b'y'; 1000]).await;
                tokio::time::sleep(Duration::from_millis(20)).await;
                let _ = s.set_zero_linger();
                drop(s);
            })
            .await,
        );
        servers.insert(
            "non-http",
            Server::raw("127.0.0.1:0", |mut s| async move {
                let _ = s.write_all(b"SSH-2.0-OpenSSH_9.6\r\n").await;
                read_head(&mut s).await;
                tokio::time::sleep(Duration::from_secs(3)).await;
            })
            .await,
        );
        // Valid for another name, from a CA the checker trusts (caBundle).
        let pki = Pki::new();
        let leaf = pki.leaf(&["another.example"], 30);
        servers.insert(
            "wrong-name",
            Server::https("127.0.0.1:0", server_tls(&leaf, BOTH, None), |_| {
                Reply::ok("")
            })
            .await,
        );
        // Reads the request, never answers.
        servers.insert(
            "silent",
            Server::raw("127.0.0.1:0", |mut s| async move {
                read_head(&mut s).await;
                tokio::time::sleep(Duration::from_secs(30)).await;
            })
            .await,
        );
        Hostile {
            servers,
            ca_pem: pki.ca_pem,
        }
    }

    /// The referenced values (the CA of "wrong-name", ConfigMap hostile-ca).
    fn values(&self) -> Vec<(ValueRef, Vec<u8>)> {
        vec![(
            ValueRef::config_map("hostile-ca", "ca.crt"),
            self.ca_pem.as_bytes().to_vec(),
        )]
    }

    /// The spec lines of a checker of `kind` (timeout in seconds).
    fn yaml(&self, kind: &str, timeout: u32) -> String {
        let s = &self.servers[kind];
        let t = format!("timeoutSeconds: {timeout}");
        match kind {
            "redirect-loop" => format!("host: {}\n{t}\nfollowRedirects: true", s.url()),
            "fat-body" => format!(
                "host: {}\n{t}\nbodyMatch: {{regex: 'never-there'}}",
                s.url()
            ),
            "tls-stall" => format!(
                "host: {}\n{t}\ntls: {{insecureSkipVerify: true}}",
                s.https_url()
            ),
            "wrong-name" => format!(
                "host: {}\n{t}\ntls: {{caBundle: {{configMapKeyRef: {{name: hostile-ca, key: ca.crt}}}}}}",
                s.https_url()
            ),
            _ => format!("host: {}\n{t}", s.url()),
        }
    }
}

// ============================================================== end to end

fn cluster() -> &'static Cluster {
    Cluster::shared("probe")
}

/// An operator process with a log level and environment of the test's choice
/// (support::Operator fixes RUST_LOG and inherits the proxy variables).
struct Op {
    identity: String,
    port: u16,
    child: Child,
    log: PathBuf,
}

impl Op {
    fn spawn(
        c: &Cluster,
        identity: &str,
        ns: &str,
        extra: &[&str],
        env: &[(&str, &str)],
        rust_log: &str,
    ) -> Op {
        let port = free_port();
        let log = c.dir.join(format!("operator-{identity}.log"));
        let f = std::fs::File::create(&log).unwrap();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_webchecker-operator"));
        cmd.env("KUBECONFIG", &c.kubeconfig)
            .env("RUST_LOG", rust_log)
            .env_remove("POD_NAME")
            .env_remove("POD_NAMESPACE")
            .envs(Dns::shared().operator_env());
        for v in [
            "http_proxy",
            "HTTP_PROXY",
            "https_proxy",
            "HTTPS_PROXY",
            "no_proxy",
            "NO_PROXY",
        ] {
            cmd.env_remove(v);
        }
        // Test targets listen on loopback (denied by default).
        cmd.env("WEBCHECKER_ALLOW_LOOPBACK", "true");
        for (k, v) in env {
            cmd.env(k, v);
        }
        let child = cmd
            .arg(format!("--identity={identity}"))
            .arg(format!("--namespace={ns}"))
            .arg(format!("--watch-namespace={ns}"))
            .args(FAST_LEASES)
            .args(extra)
            .arg(format!("--listen=127.0.0.1:{port}"))
            .stdout(f.try_clone().unwrap())
            .stderr(f)
            .spawn()
            .expect("start the operator");
        Op {
            identity: identity.to_string(),
            port,
            child,
            log,
        }
    }

    async fn metrics(&self) -> String {
        eventually(Duration::from_secs(10), "metrics", || async {
            http_get(&format!("127.0.0.1:{}", self.port), "/metrics")
                .await
                .map(|(_, b)| b)
        })
        .await
    }

    async fn wait_ready(&self) {
        eventually(
            Duration::from_secs(60),
            &format!("{} ready", self.identity),
            || async {
                match http_get(&format!("127.0.0.1:{}", self.port), "/readyz").await {
                    Some((200, _)) => Some(()),
                    _ => None,
                }
            },
        )
        .await
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// process_resident_memory_bytes, in MiB.
    async fn rss_mib(&self) -> f64 {
        metric(&self.metrics().await, "process_resident_memory_bytes", &[]).unwrap_or(0.0)
            / (1024.0 * 1024.0)
    }
}

impl Drop for Op {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).to_string()
}

async fn kubectl(args: &[&str]) -> std::process::Output {
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    tokio::task::spawn_blocking(move || {
        let a: Vec<&str> = args.iter().map(String::as_str).collect();
        cluster().kubectl(&a)
    })
    .await
    .unwrap()
}

async fn apply(ns: &str, yaml: &str) -> std::process::Output {
    let (ns, yaml) = (ns.to_string(), yaml.to_string());
    tokio::task::spawn_blocking(move || {
        cluster().kubectl_stdin(&["apply", "-n", &ns, "-f", "-"], &yaml)
    })
    .await
    .unwrap()
}

async fn apply_ok(ns: &str, yaml: &str) {
    let out = apply(ns, yaml).await;
    assert!(out.status.success(), "{}\n{yaml}", text(&out.stderr));
}

fn checker(name: &str, spec: &str) -> String {
    let spec: String = spec.lines().map(|l| format!("  {l}\n")).collect();
    format!(
        "apiVersion: test.network.io/v1alpha1\nkind: WebChecker\nmetadata:\n  name: {name}\nspec:\n{spec}"
    )
}

fn checkers(client: &kube::Client, ns: &str) -> kube::Api<WebChecker> {
    kube::Api::namespaced(client.clone(), ns)
}

async fn condition(
    api: &kube::Api<WebChecker>,
    name: &str,
    type_: &str,
) -> Option<webchecker::api::Condition> {
    api.get_opt(name)
        .await
        .ok()
        .flatten()?
        .status?
        .condition(type_)
        .cloned()
}

async fn wait_condition(
    api: &kube::Api<WebChecker>,
    name: &str,
    type_: &str,
    status: &str,
    reason: &str,
    within: Duration,
) -> webchecker::api::Condition {
    eventually(
        within,
        &format!("{name} {type_}={status} ({reason})"),
        || async {
            condition(api, name, type_)
                .await
                .filter(|c| c.status == status && c.reason == reason)
        },
    )
    .await
}

async fn secret(client: &kube::Client, ns: &str, name: &str, type_: &str, data: &[(&str, &str)]) {
    use k8s_openapi::api::core::v1::Secret;
    let api: kube::Api<Secret> = kube::Api::namespaced(client.clone(), ns);
    let s = Secret {
        metadata: kube::api::ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        type_: Some(type_.into()),
        string_data: Some(
            data.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        ),
        ..Default::default()
    };
    api.create(&Default::default(), &s).await.unwrap();
}

async fn config_map(client: &kube::Client, ns: &str, name: &str, data: &[(&str, &str)]) {
    use k8s_openapi::api::core::v1::ConfigMap;
    let api: kube::Api<ConfigMap> = kube::Api::namespaced(client.clone(), ns);
    let cm = ConfigMap {
        metadata: kube::api::ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        data: Some(
            data.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        ),
        ..Default::default()
    };
    api.create(&Default::default(), &cm).await.unwrap();
}

/// `(type, reason, note)` of the Events about one checker.
async fn events_of(client: &kube::Client, ns: &str, name: &str) -> Vec<(String, String, String)> {
    use k8s_openapi::api::events::v1::Event;
    let api: kube::Api<Event> = kube::Api::namespaced(client.clone(), ns);
    api.list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
        .map(|e| {
            (
                e.type_.unwrap_or_default(),
                e.reason.unwrap_or_default(),
                e.note.unwrap_or_default(),
            )
        })
        .collect()
}

/// Each new admission rule rejects its example, with its message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn new_admission_rules_reject_bad_specs() {
    let c = cluster();
    let ns = c.namespace("probe-admission");
    let h = "host: https://example.com\n";
    let cases: &[(&str, String, &str)] = &[
        (
            "auth-both",
            format!(
                "{h}auth: {{basic: {{secretName: a}}, bearer: {{secretKeyRef: {{name: b, key: c}}}}}}"
            ),
            "spec.auth needs exactly one of basic or bearer",
        ),
        (
            "auth-none",
            format!("{h}auth: {{}}"),
            "spec.auth needs exactly one of basic or bearer",
        ),
        (
            "auth-and-header",
            format!(
                "{h}headers: [{{name: AUTHORIZATION, value: x}}]\nauth: {{bearer: {{secretKeyRef: {{name: b, key: c}}}}}}"
            ),
            "spec.auth and a header named Authorization cannot be combined",
        ),
        (
            "basic-no-secret",
            format!("{h}auth: {{basic: {{}}}}"),
            "spec.auth.basic.secretName: Required value",
        ),
        (
            "json-pointer",
            format!("{h}jsonChecks: [{{pointer: status, equals: ok}}]"),
            "a jsonChecks pointer must be empty or start with '/'",
        ),
        (
            "header-check-name",
            format!("{h}headerChecks: [{{name: 'not a header'}}]"),
            "spec.headerChecks[0].name in body should match",
        ),
        (
            "ca-both",
            format!(
                "{h}tls: {{caBundle: {{secretKeyRef: {{name: a, key: b}}, configMapKeyRef: {{name: a, key: b}}}}}}"
            ),
            "spec.tls.caBundle needs exactly one of secretKeyRef or configMapKeyRef",
        ),
        (
            "ca-none",
            format!("{h}tls: {{caBundle: {{}}}}"),
            "spec.tls.caBundle needs exactly one of secretKeyRef or configMapKeyRef",
        ),
        (
            "ca-insecure",
            format!(
                "{h}tls: {{insecureSkipVerify: true, caBundle: {{configMapKeyRef: {{name: a, key: b}}}}}}"
            ),
            "spec.tls.caBundle has no effect with insecureSkipVerify: true",
        ),
        (
            "client-cert-no-secret",
            format!("{h}tls: {{clientCertificate: {{}}}}"),
            "spec.tls.clientCertificate.secretName: Required value",
        ),
        (
            "min-version",
            format!("{h}tls: {{minVersion: TLS11}}"),
            "Unsupported value: \"TLS11\"",
        ),
        (
            "expiry-days",
            format!("{h}tls: {{certificateExpiryWarningDays: 0}}"),
            "should be greater than or equal to 1",
        ),
        (
            "ip-family",
            format!("{h}ipFamily: IPv5"),
            "Unsupported value: \"IPv5\"",
        ),
        (
            "proxy-both",
            format!("{h}proxy: {{url: 'http://proxy:3128', fromEnvironment: true}}"),
            "spec.proxy needs exactly one of url or fromEnvironment: true",
        ),
        (
            "proxy-none",
            format!("{h}proxy: {{fromEnvironment: false}}"),
            "spec.proxy needs exactly one of url or fromEnvironment: true",
        ),
        (
            "proxy-https",
            format!("{h}proxy: {{url: 'https://proxy:3128'}}"),
            "spec.proxy.url must be an http:// URL with a host",
        ),
        (
            "proxy-credentials",
            format!("{h}proxy: {{url: 'http://user:pw@proxy:3128'}}"),
            "spec.proxy.url must not carry credentials",
        ),
    ];
    for (name, spec, want) in cases {
        let out = apply(&ns, &checker(name, spec)).await;
        let err = text(&out.stderr);
        println!("{name}: {}", err.trim());
        assert!(
            !out.status.success(),
            "{name} was accepted: {}",
            text(&out.stdout)
        );
        assert!(err.contains(want), "{name}: expected {want:?} in {err}");
    }
    let out = kubectl(&["get", "wc", "-n", &ns, "-o", "name"]).await;
    assert_eq!(text(&out.stdout).trim(), "", "nothing was created");
    // The control: every new field at once, valid.
    apply_ok(
        &ns,
        &checker(
            "everything",
            "host: https://example.com
method: POST
body: '{}'
headers: [{name: X-Key, valueFrom: {secretKeyRef: {name: s, key: k}}}]
auth: {basic: {secretName: creds, usernameKey: u, passwordKey: p}}
jsonChecks: [{pointer: /status, equals: ok}, {pointer: ''}]
headerChecks: [{name: X-Version, regex: '^v2'}, {name: ETag}]
maxResponseTimeMillis: 500
failureThreshold: 3
successThreshold: 2
followRedirects: true
maxRedirects: 3
ipFamily: IPv4
proxy: {url: 'http://proxy.example:3128'}
tls: {serverName: example.com, caBundle: {configMapKeyRef: {name: ca, key: ca.crt}}, clientCertificate: {secretName: mtls}, minVersion: TLS13, certificateExpiryWarningDays: 21}",
        ),
    )
    .await;
    apply_ok(
        &ns,
        &checker(
            "bearer-env-proxy",
            "host: https://example.com\nauth: {bearer: {secretKeyRef: {name: t, key: token}}}\nproxy: {fromEnvironment: true}\ntls: {caBundle: {secretKeyRef: {name: ca, key: ca.crt}}}",
        ),
    )
    .await;
}

/// A header and basic auth from Secrets reach the target; a missing Secret or
/// key is InvalidSpec naming it and is picked up once created; a rotation is
/// picked up; and no value appears in the trace log, status, events or metrics.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_reach_the_target_and_never_leak() {
    let c = cluster();
    let ns = c.namespace("probe-secrets");
    let client = c.client().await;
    let api = checkers(&client, &ns);
    let sfx = rand_suffix();
    let (token_a, token_b) = (format!("tokA-{sfx}-7f3e"), format!("tokB-{sfx}-91c2"));
    let password = format!("pw-{sfx}-e4d1");
    let later = format!("later-{sfx}-0b6a");
    secret(
        &client,
        &ns,
        "api",
        "Opaque",
        &[("token", &token_a), ("unrelated", "x")],
    )
    .await;
    secret(
        &client,
        &ns,
        "creds",
        "kubernetes.io/basic-auth",
        &[("username", "probe-user"), ("password", &password)],
    )
    .await;
    let t = Server::http("127.0.0.1:0", |_| Reply::ok("")).await;
    let op = Op::spawn(c, &format!("op-{ns}"), &ns, &[], &[], "trace");
    op.wait_ready().await;
    let hdr = |key: &str| {
        format!(
            "host: {}\npath: /{key}\nintervalSeconds: 2\nheaders: [{{name: X-Api-Key, valueFrom: {{secretKeyRef: {{name: api, key: {key}}}}}}}]",
            t.url()
        )
    };
    apply_ok(&ns, &checker("hdr", &hdr("token"))).await;
    apply_ok(
        &ns,
        &checker(
            "basic",
            &format!("host: {}\npath: /basic\nintervalSeconds: 2\nauth: {{basic: {{secretName: creds}}}}", t.url()),
        ),
    )
    .await;
    apply_ok(&ns, &checker("nokey", &hdr("absent"))).await;
    apply_ok(
        &ns,
        &checker(
            "missing",
            &format!("host: {}\npath: /missing\nintervalSeconds: 2\nheaders: [{{name: X-Later, valueFrom: {{secretKeyRef: {{name: later, key: v}}}}}}]", t.url()),
        ),
    )
    .await;

    let basic = format!(
        "Basic {}",
        base64(format!("probe-user:{password}").as_bytes())
    );
    let header_seen = |path: &'static str, header: &'static str, want: String| {
        let t = &t;
        async move {
            eventually(
                Duration::from_secs(90),
                &format!("{path} with {header}"),
                || {
                    let want = want.clone();
                    async move {
                        t.seen()
                            .iter()
                            .any(|s| s.uri == path && s.headers.get(header) == Some(&want))
                            .then_some(())
                    }
                },
            )
            .await
        }
    };
    header_seen("/token", "x-api-key", token_a.clone()).await;
    header_seen("/basic", "authorization", basic.clone()).await;
    wait_condition(
        &api,
        "hdr",
        "Ready",
        "True",
        "ProbeSucceeded",
        Duration::from_secs(20),
    )
    .await;
    wait_condition(
        &api,
        "basic",
        "Ready",
        "True",
        "ProbeSucceeded",
        Duration::from_secs(20),
    )
    .await;
    let m = wait_condition(
        &api,
        "missing",
        "Ready",
        "False",
        "InvalidSpec",
        Duration::from_secs(20),
    )
    .await;
    println!("missing: {}", m.message);
    assert!(
        m.message.contains("Secret \"later\" not found"),
        "{}",
        m.message
    );
    let k = wait_condition(
        &api,
        "nokey",
        "Ready",
        "False",
        "InvalidSpec",
        Duration::from_secs(20),
    )
    .await;
    println!("nokey: {}", k.message);
    assert!(
        k.message.contains("Secret \"api\"") && k.message.contains("has no key \"absent\""),
        "{}",
        k.message
    );
    assert!(
        t.seen()
            .iter()
            .all(|s| s.uri != "/absent" && s.uri != "/missing")
    );

    // Created later: picked up without touching the checker.
    let created = Instant::now();
    secret(&client, &ns, "later", "Opaque", &[("v", &later)]).await;
    header_seen("/missing", "x-later", later.clone()).await;
    println!(
        "a Secret created later was in use after {:?}",
        created.elapsed()
    );
    wait_condition(
        &api,
        "missing",
        "Ready",
        "True",
        "ProbeSucceeded",
        Duration::from_secs(20),
    )
    .await;

    // Rotation: within the cache TTL (60 s) plus a refresh period (15 s).
    let rotated = Instant::now();
    {
        use k8s_openapi::api::core::v1::Secret;
        let sapi: kube::Api<Secret> = kube::Api::namespaced(client.clone(), &ns);
        sapi.patch(
            "api",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(serde_json::json!({"stringData": {"token": token_b}})),
        )
        .await
        .unwrap();
    }
    header_seen("/token", "x-api-key", token_b.clone()).await;
    let took = rotated.elapsed();
    println!("rotation in use after {took:?}");
    assert!(took <= Duration::from_secs(80), "{took:?}");
    tokio::time::sleep(Duration::from_secs(3)).await;

    // Nowhere: the trace log, status, events, metrics.
    let log = op.log_text();
    let status = text(
        &kubectl(&["get", "wc", "-n", &ns, "-o", "yaml"])
            .await
            .stdout,
    );
    let events = text(
        &kubectl(&["get", "events.events.k8s.io", "-n", &ns, "-o", "yaml"])
            .await
            .stdout,
    );
    let metrics = op.metrics().await;
    assert!(
        log.lines().count() > 1000 && log.contains("TRACE"),
        "a trace log"
    );
    assert!(status.contains("InvalidSpec") || status.contains("ProbeSucceeded"));
    assert!(events.contains("WebChecker"), "{events}");
    assert!(metrics.contains("webchecker_probes_total"));
    let mut needles = vec![
        token_a.clone(),
        token_b.clone(),
        password.clone(),
        later.clone(),
        basic.clone(),
    ];
    for v in [&token_a, &token_b, &password, &later] {
        needles.push(base64(v.as_bytes()));
    }
    needles.push(base64(format!("probe-user:{password}").as_bytes()));
    for (what, hay) in [
        ("log", &log),
        ("status", &status),
        ("events", &events),
        ("metrics", &metrics),
    ] {
        for n in &needles {
            assert!(
                !hay.contains(n.as_str()),
                "a secret value ({n}) appears in the {what}"
            );
        }
    }
    println!(
        "searched {} log lines ({} KiB), status, events and metrics: no value found",
        log.lines().count(),
        log.len() / 1024
    );
}

/// A target failing every other probe never flips a checker with failureThreshold 3.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flapping_target_never_flips_failure_threshold_3() {
    let c = cluster();
    let ns = c.namespace("probe-flap");
    let client = c.client().await;
    let api = checkers(&client, &ns);
    // Every other request of each path fails.
    let n = Arc::new(AtomicUsize::new(0));
    let per_path: Arc<Mutex<HashMap<String, usize>>> = Default::default();
    let n2 = n.clone();
    let t = Server::http("127.0.0.1:0", move |s| {
        n2.fetch_add(1, Ordering::SeqCst);
        let mut m = per_path.lock().unwrap();
        let k = m.entry(s.uri.clone()).or_default();
        *k += 1;
        if *k % 2 == 1 {
            Reply::ok("")
        } else {
            Reply::status(503)
        }
    })
    .await;
    let op = Op::spawn(
        c,
        &format!("op-{ns}"),
        &ns,
        &[],
        &[],
        "info,webchecker=debug",
    );
    op.wait_ready().await;
    apply_ok(
        &ns,
        &checker(
            "flap",
            &format!(
                "host: {}\npath: /flap\nintervalSeconds: 2\nfailureThreshold: 3",
                t.url()
            ),
        ),
    )
    .await;
    apply_ok(
        &ns,
        &checker(
            "flap-t1",
            &format!("host: {}\npath: /t1\nintervalSeconds: 2", t.url()),
        ),
    )
    .await;
    let first = wait_condition(
        &api,
        "flap",
        "Ready",
        "True",
        "ProbeSucceeded",
        Duration::from_secs(20),
    )
    .await;
    let since = n.load(Ordering::SeqCst);
    for i in 0..10 {
        tokio::time::sleep(Duration::from_secs(2)).await;
        let c = condition(&api, "flap", "Ready").await.unwrap();
        assert_eq!(
            (c.status.as_str(), c.last_transition_time.as_deref()),
            ("True", first.last_transition_time.as_deref()),
            "sample {i}: flipped"
        );
    }
    let m = op.metrics().await;
    let failures = metric(
        &m,
        "webchecker_probes_total",
        &[("name", "flap"), ("result", "failure")],
    )
    .unwrap_or(0.0);
    let successes = metric(
        &m,
        "webchecker_probes_total",
        &[("name", "flap"), ("result", "success")],
    )
    .unwrap_or(0.0);
    println!(
        "flap: {successes} successes, {failures} failures, target answered {} requests",
        n.load(Ordering::SeqCst) - since
    );
    assert!(failures >= 4.0 && successes >= 4.0, "the target did flap");
    assert!(
        events_of(&client, &ns, "flap")
            .await
            .iter()
            .all(|(t, _, _)| t != "Warning"),
        "no Warning event"
    );
    // The control: with the default threshold (1) the same target flips.
    let ev = eventually(Duration::from_secs(20), "flap-t1 Warning event", || async {
        let e = events_of(&client, &ns, "flap-t1").await;
        e.iter()
            .any(|(t, r, _)| t == "Warning" && r == "UnexpectedStatus")
            .then_some(e)
    })
    .await;
    println!("flap-t1 events: {ev:?}");
}

/// CertificateExpiring (second condition, Warning event), caBundle from a
/// ConfigMap, client certificate from a kubernetes.io/tls Secret.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certificate_expiring_and_mutual_tls_through_the_operator() {
    let c = cluster();
    let ns = c.namespace("probe-tls");
    let client = c.client().await;
    let api = checkers(&client, &ns);
    let pki = Pki::new();
    let leaf = pki.leaf(&["127.0.0.1"], 5);
    let client_leaf = pki.leaf(&["webchecker-client"], 90);
    let t = Server::https(
        "127.0.0.1:0",
        server_tls(&leaf, BOTH, Some(&pki.ca_pem)),
        |_| Reply::ok(""),
    )
    .await;
    config_map(&client, &ns, "ca", &[("ca.crt", &pki.ca_pem)]).await;
    secret(
        &client,
        &ns,
        "client-tls",
        "kubernetes.io/tls",
        &[
            ("tls.crt", &client_leaf.cert_pem),
            ("tls.key", &client_leaf.key_pem),
        ],
    )
    .await;
    let op = Op::spawn(
        c,
        &format!("op-{ns}"),
        &ns,
        &[],
        &[],
        "info,webchecker=debug",
    );
    op.wait_ready().await;
    let spec = |days: u32, client: bool| {
        format!(
            "host: {}\nintervalSeconds: 2\ntls: {{caBundle: {{configMapKeyRef: {{name: ca, key: ca.crt}}}}, certificateExpiryWarningDays: {days}{}}}",
            t.https_url(),
            if client {
                ", clientCertificate: {secretName: client-tls}"
            } else {
                ""
            }
        )
    };
    apply_ok(&ns, &checker("expiring", &spec(30, true))).await;
    apply_ok(&ns, &checker("fine", &spec(3, true))).await;
    apply_ok(&ns, &checker("no-client-cert", &spec(30, false))).await;
    wait_condition(
        &api,
        "expiring",
        "Ready",
        "True",
        "ProbeSucceeded",
        Duration::from_secs(20),
    )
    .await;
    let ce = wait_condition(
        &api,
        "expiring",
        "CertificateExpiring",
        "True",
        "ExpiresSoon",
        Duration::from_secs(20),
    )
    .await;
    println!("expiring: {}", ce.message);
    assert!(ce.message.contains("warning at 30 days"), "{}", ce.message);
    wait_condition(
        &api,
        "fine",
        "Ready",
        "True",
        "ProbeSucceeded",
        Duration::from_secs(20),
    )
    .await;
    wait_condition(
        &api,
        "fine",
        "CertificateExpiring",
        "False",
        "CertificateValid",
        Duration::from_secs(20),
    )
    .await;
    let nc = wait_condition(
        &api,
        "no-client-cert",
        "Ready",
        "False",
        "TLSError",
        Duration::from_secs(20),
    )
    .await;
    println!("no-client-cert: {}", nc.message);
    let ev = eventually(
        Duration::from_secs(20),
        "CertificateExpiring event",
        || async {
            let e = events_of(&client, &ns, "expiring").await;
            e.iter()
                .any(|(t, r, _)| t == "Warning" && r == "CertificateExpiring")
                .then_some(e)
        },
    )
    .await;
    println!("expiring events: {ev:?}");
    tokio::time::sleep(Duration::from_secs(5)).await;
    let warnings: Vec<_> = events_of(&client, &ns, "expiring")
        .await
        .into_iter()
        .filter(|(_, r, _)| r == "CertificateExpiring")
        .collect();
    assert_eq!(
        warnings.len(),
        1,
        "one event when it turns True: {warnings:?}"
    );
    assert!(
        events_of(&client, &ns, "fine")
            .await
            .iter()
            .all(|(_, r, _)| r != "CertificateExpiring")
    );
    let m = op.metrics().await;
    assert_eq!(
        metric(
            &m,
            "webchecker_certificate_expiry_timestamp_seconds",
            &[("name", "expiring")]
        ),
        Some(leaf.not_after as f64)
    );
    // kubectl shows both conditions.
    let out = kubectl(&[
        "get",
        "wc",
        "expiring",
        "-n",
        &ns,
        "-o",
        "jsonpath={.status.conditions[*].type}",
    ])
    .await;
    assert_eq!(text(&out.stdout), "Ready CertificateExpiring");
}

/// The forgery guard in the operator: a redirect to a denied address, a
/// denied address, and a DNS name resolving to a denied address.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forgery_guard_through_the_operator() {
    let c = cluster();
    let client = c.client().await;
    let denied = Server::raw("127.0.0.2:0", |_s| async {}).await;
    let to = format!("http://{}/latest/meta-data", denied.addr);
    let t = Server::http("127.0.0.1:0", move |s| {
        if s.uri == "/ok" {
            Reply::ok("")
        } else {
            Reply::redirect(302, &to)
        }
    })
    .await;
    let ns1 = c.namespace("probe-guard");
    let api1 = checkers(&client, &ns1);
    let op1 = Op::spawn(
        c,
        &format!("op-{ns1}"),
        &ns1,
        &["--deny-cidrs=169.254.0.0/16,fe80::/10,127.0.0.2/32"],
        &[],
        "info,webchecker=debug",
    );
    let ns2 = c.namespace("probe-guard-dns");
    let api2 = checkers(&client, &ns2);
    let op2 = Op::spawn(
        c,
        &format!("op-{ns2}"),
        &ns2,
        &["--deny-cidrs=127.0.0.1/32"],
        &[],
        "info,webchecker=debug",
    );
    op1.wait_ready().await;
    op2.wait_ready().await;
    apply_ok(
        &ns1,
        &checker(
            "ok",
            &format!("host: {}\npath: /ok\nintervalSeconds: 2", t.url()),
        ),
    )
    .await;
    apply_ok(
        &ns1,
        &checker(
            "redirect",
            &format!(
                "host: {}\npath: /r\nintervalSeconds: 2\nfollowRedirects: true",
                t.url()
            ),
        ),
    )
    .await;
    apply_ok(
        &ns1,
        &checker(
            "direct",
            &format!("host: http://{}\nintervalSeconds: 2", denied.addr),
        ),
    )
    .await;
    let local = Server::http("127.0.0.1:0", |_| Reply::ok("")).await;
    let by_name = format!("guard-{ns2}.probe.test");
    Dns::shared().add(&by_name, &["127.0.0.1".parse().unwrap()]);
    apply_ok(
        &ns2,
        &checker(
            "by-name",
            &format!(
                "host: http://{by_name}:{}\nintervalSeconds: 2",
                local.addr.port()
            ),
        ),
    )
    .await;
    wait_condition(
        &api1,
        "ok",
        "Ready",
        "True",
        "ProbeSucceeded",
        Duration::from_secs(20),
    )
    .await;
    let r = wait_condition(
        &api1,
        "redirect",
        "Ready",
        "False",
        "Forbidden",
        Duration::from_secs(20),
    )
    .await;
    let d = wait_condition(
        &api1,
        "direct",
        "Ready",
        "False",
        "Forbidden",
        Duration::from_secs(20),
    )
    .await;
    let n = wait_condition(
        &api2,
        "by-name",
        "Ready",
        "False",
        "Forbidden",
        Duration::from_secs(20),
    )
    .await;
    println!(
        "redirect: {}\ndirect: {}\nby-name: {}",
        r.message, d.message, n.message
    );
    assert!(
        n.message.contains(&format!(
            "{by_name} resolves only to addresses the operator may not probe"
        )),
        "{}",
        n.message
    );
    assert!(Dns::shared().queries(&by_name) > 0, "resolved through DNS");
    // The status never quotes the Location (a header value).
    assert_eq!(
        r.message,
        "after a redirect (HTTP 302) to another origin: the new host is an address the operator may not probe (in --deny-cidrs)"
    );
    assert!(
        d.message
            .contains("127.0.0.2 is an address the operator may not probe")
    );
    // A few more rounds: still nothing reached the denied addresses.
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert!(
        t.seen().iter().filter(|s| s.uri == "/r").count() >= 2,
        "the redirecting hop was probed"
    );
    assert_eq!(denied.accepts(), 0, "no connection to 127.0.0.2");
    assert_eq!(local.accepts(), 0, "no connection to {by_name}");
    let m = op1.metrics().await;
    assert!(
        metric(
            &m,
            "webchecker_probes_total",
            &[("name", "redirect"), ("reason", "Forbidden")]
        )
        .unwrap_or(0.0)
            >= 2.0
    );
}

/// `proxy.fromEnvironment` uses the operator's HTTP_PROXY; without it the
/// same operator connects directly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_from_the_operator_environment() {
    let c = cluster();
    let ns = c.namespace("probe-proxy");
    let client = c.client().await;
    let api = checkers(&client, &ns);
    let proxy = Proxy::start(false).await;
    let t = Server::http("127.0.0.1:0", |_| Reply::ok("")).await;
    let op = Op::spawn(
        c,
        &format!("op-{ns}"),
        &ns,
        &[],
        &[("HTTP_PROXY", &proxy.url()), ("NO_PROXY", "")],
        "info,webchecker=debug",
    );
    op.wait_ready().await;
    apply_ok(
        &ns,
        &checker(
            "via-env",
            &format!(
                "host: {}\npath: /env\nintervalSeconds: 2\nproxy: {{fromEnvironment: true}}",
                t.url()
            ),
        ),
    )
    .await;
    apply_ok(
        &ns,
        &checker(
            "direct",
            &format!("host: {}\npath: /direct\nintervalSeconds: 2", t.url()),
        ),
    )
    .await;
    wait_condition(
        &api,
        "via-env",
        "Ready",
        "True",
        "ProbeSucceeded",
        Duration::from_secs(20),
    )
    .await;
    wait_condition(
        &api,
        "direct",
        "Ready",
        "True",
        "ProbeSucceeded",
        Duration::from_secs(20),
    )
    .await;
    let lines = proxy.lines();
    println!("proxy saw: {lines:?}");
    assert!(
        lines
            .iter()
            .any(|l| *l == format!("GET {}/env HTTP/1.1", t.url()))
    );
    assert!(lines.iter().all(|l| !l.contains("/direct")));
    assert!(t.seen().iter().any(|s| s.uri == "/direct"));
}

/// 200 hostile targets probed at once: the operator's memory stays bounded,
/// and each checker ends with the precise reason within timeout + 100 ms.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_hostile_targets_at_once() {
    let c = cluster();
    let ns = c.namespace("probe-hostile");
    let client = c.client().await;
    let api = checkers(&client, &ns);
    let targets = Hostile::start().await;
    config_map(&client, &ns, "hostile-ca", &[("ca.crt", &targets.ca_pem)]).await;
    let op = Op::spawn(c, &format!("op-{ns}"), &ns, &[], &[], "info");
    op.wait_ready().await;
    let baseline = op.rss_mib().await;
    let names: Vec<(String, &str)> = (0..200)
        .map(|i| {
            let kind = Hostile::KINDS[i % Hostile::KINDS.len()];
            (format!("{kind}-{i}"), kind)
        })
        .collect();
    let docs: Vec<String> = names
        .iter()
        .map(|(n, k)| checker(n, &format!("{}\nintervalSeconds: 4", targets.yaml(k, 3))))
        .collect();
    apply_ok(&ns, &docs.join("---\n")).await;
    // Every checker has a verdict.
    eventually(Duration::from_secs(60), "200 verdicts", || async {
        let list = api.list(&Default::default()).await.ok()?;
        let done = list
            .items
            .iter()
            .filter(|w| {
                w.status
                    .as_ref()
                    .and_then(|s| s.condition("Ready"))
                    .is_some_and(|c| c.reason != "Pending")
            })
            .count();
        (done == 200).then_some(())
    })
    .await;
    let mut peak: f64 = 0.0;
    let mut inflight_peak: f64 = 0.0;
    let watch = Instant::now();
    while watch.elapsed() < Duration::from_secs(24) {
        let m = op.metrics().await;
        peak =
            peak.max(metric(&m, "process_resident_memory_bytes", &[]).unwrap_or(0.0) / 1048576.0);
        inflight_peak =
            inflight_peak.max(metric(&m, "webchecker_inflight_probes", &[]).unwrap_or(0.0));
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let m = op.metrics().await;
    let probes = metric(&m, "webchecker_probes_total", &[]).unwrap_or(0.0);
    println!(
        "200 hostile checkers: RSS baseline {baseline:.1} MiB, peak {peak:.1} MiB over 24 s; {probes} probes; up to {inflight_peak} in flight"
    );
    assert!(probes >= 200.0 * 5.0, "probes ran: {probes}");
    assert!(peak < 256.0, "RSS peak {peak:.1} MiB");
    assert!(
        peak - baseline < 128.0,
        "RSS grew by {:.1} MiB",
        peak - baseline
    );
    // The verdicts: the precise reason, and within timeout + 100 ms.
    let list = api.list(&Default::default()).await.unwrap();
    for w in &list.items {
        let name = w.metadata.name.clone().unwrap();
        let kind = names.iter().find(|(n, _)| *n == name).unwrap().1;
        let (_, want, msg) = Hostile::EXPECTED
            .iter()
            .find(|(k, _, _)| *k == kind)
            .unwrap();
        let st = w.status.as_ref().unwrap();
        let cond = st.condition("Ready").unwrap();
        let want_reason = want.as_str();
        assert_eq!(cond.reason, want_reason, "{name}: {cond:?}");
        if *want != Reason::ProbeSucceeded {
            assert!(cond.message.contains(msg), "{name}: {}", cond.message);
        }
        let ms = st.last_latency_millis.unwrap();
        assert!(ms <= 3100, "{name}: {ms} ms");
    }
    for (kind, want, _) in Hostile::EXPECTED {
        let n = metric(&m, "webchecker_probes_total", &[("reason", want.as_str())]).unwrap_or(0.0);
        println!(
            "{kind:<14} {:<18} probes with this reason: {n}",
            want.as_str()
        );
    }
}
