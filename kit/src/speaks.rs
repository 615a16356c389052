//! Targets for the protocol tests (tests/protocols/main.rs): HTTP/1.1, h2c, or
//! TLS with chosen ALPN protocols and a certificate that can be swapped while
//! the session ticket keys stay.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::Full;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::PrivateKeyDer;
use rustls::pki_types::pem::PemObject;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

use super::targets::{Answer, Leaf};

pub fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::aws_lc_rs::default_provider())
}

/// The certificate a target serves; [`SwapCert::set`] replaces it for the
/// handshakes that follow, and nothing else changes (the ticket keys stay).
#[derive(Debug)]
pub struct SwapCert(Mutex<Arc<CertifiedKey>>);

impl SwapCert {
    pub fn new(leaf: &Leaf) -> Arc<SwapCert> {
        Arc::new(SwapCert(Mutex::new(certified(leaf))))
    }

    pub fn set(&self, leaf: &Leaf) {
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
pub enum Speaks {
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
pub struct Target {
    pub addr: SocketAddr,
    seen: Arc<Mutex<Vec<(http::Version, http::HeaderMap)>>>,
    task: tokio::task::AbortHandle,
}

impl Drop for Target {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Target {
    pub async fn start(
        speaks: Speaks,
        h: impl Fn(&http::request::Parts) -> Answer + Send + Sync + 'static,
    ) -> Target {
        let handler: Handler = Arc::new(h);
        let listener = crate::listener().await;
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
                cfg.ticketer = rustls::crypto::aws_lc_rs::Ticketer::new().unwrap();
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
                // HTTP/2 writes HEADERS and DATA apart: without this, Nagle's
                // algorithm holds DATA until the client's delayed ACK.
                let _ = stream.set_nodelay(true);
                let (handler, seen, acceptor, speaks) = (
                    handler.clone(),
                    s2.clone(),
                    acceptor.clone(),
                    speaks.clone(),
                );
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
                            let Ok(s) = a.accept(stream).await else {
                                return;
                            };
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

    pub fn seen(&self) -> Vec<(http::Version, http::HeaderMap)> {
        self.seen.lock().unwrap().clone()
    }
}
