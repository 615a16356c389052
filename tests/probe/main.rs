//! The full HTTP check (docs/probes.md), against real local targets.
//!
//! Part 1 calls the public `Prober::probe()` directly: every option, every
//! reason and the hostile targets, with precise timings and no cluster.
//! Part 2 runs operator processes against the real control plane
//! (hack/cluster.sh): admission rules, Secrets (and that their values never
//! leak), thresholds, CertificateExpiring, the cluster's CA (`--ca-bundle`),
//! the forgery guard, the proxy from the environment, 200 hostile
//! targets at once (memory), and checkers generated for Ingresses,
//! HTTPRoutes, GRPCRoutes and Services (`--discover-routes`), with their
//! Events on the route, through the forgery guard, with and without the
//! Gateway API.

mod ca_bundle;
mod discovery;
mod discovery_gateway_api;
mod discovery_gateway_checker;
mod discovery_grpcroutes;
mod discovery_guard;
mod discovery_names;
mod discovery_route_events;
mod discovery_scale;
mod discovery_services;
mod e2e_kinds;
mod e2e_specs;
mod e2e_targets;
mod gate_tls;
mod hostile;
mod network;
mod ops;
mod request;
use webchecker_kit as support;

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use webchecker::api::{WebChecker, WebCheckerSpec};
use webchecker::probe::{
    AddressPolicy, EnvProxy, Outcome, ProbePlan, Prober, Reason, ValueRef, base64, plan,
};

use support::dns::{Dns, HOSTS_FILE_NAME};
use support::targets::{Answer, Handler, Leaf, Request, TestCa, serve_recorded};
use support::*;

// ============================================================== targets

type RawHandler = Arc<dyn Fn(TcpStream) -> Pin<Box<dyn Future<Output = ()> + Send>> + Send + Sync>;

/// A local target on an address of the test's choice: HTTP, HTTPS with a
/// rustls configuration of the test's choice, or raw TCP. Counts accepted
/// connections and records requests (kit: `serve_recorded`).
struct Server {
    addr: SocketAddr,
    seen: Arc<Mutex<Vec<Request>>>,
    accepts: Arc<AtomicUsize>,
    task: tokio::task::AbortHandle,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Server {
    async fn http(bind: &str, h: impl Fn(&Request) -> Answer + Send + Sync + 'static) -> Server {
        Self::start(bind, None, Some(Arc::new(h)), None).await
    }

    async fn https(
        bind: &str,
        tls: Arc<rustls::ServerConfig>,
        h: impl Fn(&Request) -> Answer + Send + Sync + 'static,
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
        let listener = support::bind(bind).await.unwrap();
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
                    match tls {
                        Some(cfg) => {
                            let Ok(s) = tokio_rustls::TlsAcceptor::from(cfg).accept(stream).await
                            else {
                                return;
                            };
                            serve_recorded(s, handler, seen).await;
                        }
                        None => serve_recorded(stream, handler, seen).await,
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

    fn seen(&self) -> Vec<Request> {
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

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::aws_lc_rs::default_provider())
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
