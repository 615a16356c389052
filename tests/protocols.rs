//! What a probe sees of the layers under HTTP (docs/probes.md), against real
//! servers on loopback (rustls and hyper): a full, verified TLS handshake on
//! every probe, the certificate chain, HTTP/2 and compression.

mod support;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use webchecker::probe::{AddressPolicy, Outcome, ProbePlan, Prober, Reason, ValueRef, plan};

use support::targets::{Answer, Leaf, TestCa};

// ============================================================== the target

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The certificate a target serves; [`SwapCert::set`] replaces it for the
/// handshakes that follow, and nothing else changes (the ticket keys stay).
#[derive(Debug)]
struct SwapCert(Mutex<Arc<CertifiedKey>>);

impl SwapCert {
    fn new(leaf: &Leaf) -> Arc<SwapCert> {
        Arc::new(SwapCert(Mutex::new(certified(leaf))))
    }

    fn set(&self, leaf: &Leaf) {
        *self.0.lock().unwrap() = certified(leaf);
    }
}

fn certified(leaf: &Leaf) -> Arc<CertifiedKey> {
    let key = provider()
        .key_provider
        .load_private_key(PrivateKeyDer::from_pem_slice(leaf.key_pem.as_bytes()).unwrap())
        .unwrap();
    Arc::new(CertifiedKey::new(leaf.chain.clone(), key))
}

impl ResolvesServerCert for SwapCert {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.lock().unwrap().clone())
    }
}

/// How a target speaks.
#[derive(Clone)]
enum Speaks {
    /// HTTP/1.1 over TCP.
    Http1,
    /// HTTP/2 with prior knowledge over TCP (h2c), nothing else.
    H2c,
    /// TLS (TLS 1.2 and 1.3, session tickets on) with these ALPN protocols;
    /// HTTP/2 when `h2` was negotiated, else HTTP/1.1.
    Tls(Arc<SwapCert>, Vec<&'static [u8]>),
}

type Handler = Arc<dyn Fn(&http::request::Parts) -> Answer + Send + Sync>;

/// A target on 127.0.0.1 that records the HTTP version and the headers of
/// every request.
struct Target {
    addr: SocketAddr,
    seen: Arc<Mutex<Vec<(http::Version, http::HeaderMap)>>>,
    task: tokio::task::AbortHandle,
}

impl Drop for Target {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Target {
    async fn start(speaks: Speaks, h: impl Fn(&http::request::Parts) -> Answer + Send + Sync + 'static) -> Target {
        let handler: Handler = Arc::new(h);
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let acceptor = match &speaks {
            Speaks::Tls(cert, alpn) => {
                let mut cfg = rustls::ServerConfig::builder_with_provider(provider())
                    .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
                    .unwrap()
                    .with_no_client_auth()
                    .with_cert_resolver(cert.clone());
                cfg.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
                cfg.ticketer = rustls::crypto::ring::Ticketer::new().unwrap();
                Some(tokio_rustls::TlsAcceptor::from(Arc::new(cfg)))
            }
            _ => None,
        };
        let s2 = seen.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let (handler, seen, acceptor, speaks) =
                    (handler.clone(), s2.clone(), acceptor.clone(), speaks.clone());
                tokio::spawn(async move {
                    let svc = service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                        let (handler, seen) = (handler.clone(), seen.clone());
                        async move {
                            let (parts, _) = req.into_parts();
                            seen.lock()
                                .unwrap()
                                .push((parts.version, parts.headers.clone()));
                            let a = handler(&parts);
                            let mut b = hyper::Response::builder().status(a.status);
                            for (k, v) in &a.headers {
                                b = b.header(k, v);
                            }
                            Ok::<_, std::convert::Infallible>(
                                b.body(Full::new(Bytes::from(a.body))).unwrap(),
                            )
                        }
                    });
                    let h1 = hyper::server::conn::http1::Builder::new();
                    let h2 = hyper::server::conn::http2::Builder::new(TokioExecutor::new());
                    match (speaks, acceptor) {
                        (Speaks::Tls(..), Some(a)) => {
                            let Ok(s) = a.accept(stream).await else { return };
                            let alpn_h2 = s.get_ref().1.alpn_protocol() == Some(b"h2");
                            let io = TokioIo::new(s);
                            if alpn_h2 {
                                let _ = h2.serve_connection(io, svc).await;
                            } else {
                                let _ = h1.serve_connection(io, svc).await;
                            }
                        }
                        (Speaks::H2c, _) => {
                            let _ = h2.serve_connection(TokioIo::new(stream), svc).await;
                        }
                        _ => {
                            let _ = h1.serve_connection(TokioIo::new(stream), svc).await;
                        }
                    }
                });
            }
        });
        Target {
            addr,
            seen,
            task: task.abort_handle(),
        }
    }

    fn seen(&self) -> Vec<(http::Version, http::HeaderMap)> {
        self.seen.lock().unwrap().clone()
    }
}

// ============================================================== probing

fn prober() -> Prober {
    Prober::new(Some("protocols-test"), AddressPolicy::with_loopback(), 64 * 1024)
}

/// A plan from YAML; `ca` is served as ConfigMap ca/ca.crt.
fn mk(yaml: &str, ca: Option<&TestCa>) -> ProbePlan {
    let spec = serde_yaml::from_str(yaml).unwrap_or_else(|e| panic!("{yaml}: {e}"));
    let values: HashMap<ValueRef, Vec<u8>> = ca
        .map(|ca| (ValueRef::config_map("ca", "ca.crt"), ca.pem.as_bytes().to_vec()))
        .into_iter()
        .collect();
    plan(&spec, &|r| values.get(r).cloned().ok_or_else(|| "not found".to_string()))
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
    assert!(o.message.contains(part), "expected {part:?} in {:?}", o.message);
}

// ============================================================== TLS

/// A client with rustls's default session resumption: one HTTP/1.1 request,
/// read to the end (so it has taken the server's tickets). Its handshake kind.
async fn resuming_request(client: &Arc<rustls::ClientConfig>, addr: SocketAddr) -> rustls::HandshakeKind {
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
    assert!(out.starts_with(b"HTTP/1.1 200"), "{}", String::from_utf8_lossy(&out));
    tls.get_ref().1.handshake_kind().unwrap()
}

#[tokio::test]
async fn a_certificate_swapped_behind_valid_tickets_fails_the_next_probe() {
    let ca = TestCa::new();
    let good = ca.leaf(&["127.0.0.1"]);
    let expired = ca.leaf_valid(&["127.0.0.1"], -30, -2);
    let cert = SwapCert::new(&good);
    let t = Target::start(Speaks::Tls(cert.clone(), vec![b"http/1.1"]), |_| Answer::ok()).await;
    let plan = mk(&format!("host: https://{}\n{CA_BUNDLE}", t.addr), Some(&ca));
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
    assert_eq!(resuming_request(&resuming, t.addr).await, rustls::HandshakeKind::Full);

    expect(&probe(&p, &plan).await, Reason::ProbeSucceeded, "HTTP 200");
    cert.set(&expired);

    // The server still honours its tickets: the resuming client sees no change.
    assert_eq!(resuming_request(&resuming, t.addr).await, rustls::HandshakeKind::Resumed);
    // A probe makes a full handshake and sees the expired certificate.
    let o = probe(&p, &plan).await;
    expect(&o, Reason::CertificateInvalid, "it has expired");
    // And every probe after it.
    expect(&probe(&p, &plan).await, Reason::CertificateInvalid, "it has expired");
    cert.set(&good);
    expect(&probe(&p, &plan).await, Reason::ProbeSucceeded, "HTTP 200");
}
