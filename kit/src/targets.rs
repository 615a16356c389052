//! Recording probe targets: HTTP and HTTPS servers on loopback that answer
//! from a closure and record what reached them (requests, and for HTTPS the
//! SNI of each ClientHello and whether a client certificate came), plus a
//! test certificate authority. Two targets on two ports are two origins.
//! `serve_recorded` is their HTTP side, for targets of a test's own making.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

/// A request as the target saw it. Header names are lower case; repeated
/// headers are joined with ", ".
#[derive(Clone, Debug)]
pub struct Request {
    pub method: String,
    pub uri: String,
    pub headers: HashMap<String, String>,
    pub body: Vec<u8>,
}

/// How a target answers.
#[derive(Clone, Debug)]
pub struct Answer {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// How long the target waits before it answers.
    pub delay: Duration,
}

impl Answer {
    pub fn status(status: u16) -> Answer {
        Answer {
            status,
            headers: vec![],
            body: vec![],
            delay: Duration::ZERO,
        }
    }

    pub fn ok() -> Answer {
        Answer::status(200)
    }

    /// 200 with this body.
    pub fn text(body: &str) -> Answer {
        Answer {
            body: body.as_bytes().to_vec(),
            ..Answer::ok()
        }
    }

    pub fn redirect(status: u16, location: &str) -> Answer {
        Answer::status(status).header("location", location)
    }

    pub fn header(mut self, name: &str, value: &str) -> Answer {
        self.headers.push((name.into(), value.into()));
        self
    }
}

/// What an HTTPS target saw of the TLS handshakes.
#[derive(Clone, Debug, Default)]
pub struct Handshakes {
    /// The SNI of every ClientHello (`None`: no SNI).
    pub sni: Vec<Option<String>>,
    /// For every completed handshake: whether the client sent a certificate.
    pub client_certificate: Vec<bool>,
}

/// What a target answers to a request.
pub type Handler = Arc<dyn Fn(&Request) -> Answer + Send + Sync>;

/// Serves HTTP/1.1 on one connection: each request is read whole, appended
/// to `log`, and answered as `handler` says.
pub async fn serve_recorded<IO>(io: IO, handler: Handler, log: Arc<Mutex<Vec<Request>>>)
where
    IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let svc = service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
        let (handler, log) = (handler.clone(), log.clone());
        async move {
            let mut headers: HashMap<String, String> = HashMap::new();
            for (k, v) in req.headers() {
                let v = String::from_utf8_lossy(v.as_bytes()).to_string();
                headers
                    .entry(k.as_str().to_string())
                    .and_modify(|e| *e = format!("{e}, {v}"))
                    .or_insert(v);
            }
            let (method, uri) = (req.method().to_string(), req.uri().to_string());
            let body = req
                .into_body()
                .collect()
                .await
                .map(|b| b.to_bytes().to_vec())
                .unwrap_or_default();
            let r = Request {
                method,
                uri,
                headers,
                body,
            };
            let answer = handler(&r);
            log.lock().unwrap().push(r);
            tokio::time::sleep(answer.delay).await;
            let mut b = hyper::Response::builder().status(answer.status);
            for (k, v) in &answer.headers {
                b = b.header(k, v);
            }
            Ok::<_, std::convert::Infallible>(b.body(Full::new(Bytes::from(answer.body))).unwrap())
        }
    });
    let _ = hyper::server::conn::http1::Builder::new()
        .serve_connection(TokioIo::new(io), svc)
        .await;
}

pub struct RecordingTarget {
    pub addr: SocketAddr,
    requests: Arc<Mutex<Vec<Request>>>,
    handshakes: Arc<Mutex<Handshakes>>,
    accepts: Arc<AtomicUsize>,
    task: tokio::task::AbortHandle,
}

impl Drop for RecordingTarget {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl RecordingTarget {
    /// Plain HTTP on 127.0.0.1.
    pub async fn http(h: impl Fn(&Request) -> Answer + Send + Sync + 'static) -> Self {
        Self::start(None, Arc::new(h)).await
    }

    /// HTTPS on 127.0.0.1 with `leaf`; with `client_ca`, a client certificate
    /// signed by it is asked for (`required`: the handshake fails without one).
    pub async fn https(
        leaf: &Leaf,
        client_ca: Option<(&TestCa, bool)>,
        h: impl Fn(&Request) -> Answer + Send + Sync + 'static,
    ) -> Self {
        Self::start(Some((leaf, client_ca)), Arc::new(h)).await
    }

    async fn start(tls: Option<(&Leaf, Option<(&TestCa, bool)>)>, handler: Handler) -> Self {
        let listener = crate::listener().await;
        let addr = listener.local_addr().unwrap();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let handshakes = Arc::new(Mutex::new(Handshakes::default()));
        let accepts = Arc::new(AtomicUsize::new(0));
        let acceptor = tls.map(|(leaf, ca)| {
            tokio_rustls::TlsAcceptor::from(server_config(leaf, ca, handshakes.clone()))
        });
        let (reqs, hs, acc) = (requests.clone(), handshakes.clone(), accepts.clone());
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                acc.fetch_add(1, Ordering::SeqCst);
                let (handler, reqs, hs, acceptor) =
                    (handler.clone(), reqs.clone(), hs.clone(), acceptor.clone());
                tokio::spawn(async move {
                    match acceptor {
                        Some(a) => {
                            let Ok(s) = a.accept(stream).await else {
                                return;
                            };
                            let cert = s.get_ref().1.peer_certificates().is_some();
                            hs.lock().unwrap().client_certificate.push(cert);
                            serve_recorded(s, handler, reqs).await;
                        }
                        None => serve_recorded(stream, handler, reqs).await,
                    }
                });
            }
        });
        RecordingTarget {
            addr,
            requests,
            handshakes,
            accepts,
            task: task.abort_handle(),
        }
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn requests(&self) -> Vec<Request> {
        self.requests.lock().unwrap().clone()
    }

    pub fn handshakes(&self) -> Handshakes {
        self.handshakes.lock().unwrap().clone()
    }

    /// TCP connections accepted.
    pub fn accepts(&self) -> usize {
        self.accepts.load(Ordering::SeqCst)
    }
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::aws_lc_rs::default_provider())
}

/// Serves one certificate whatever the SNI, and records the SNI.
#[derive(Debug)]
struct RecordSni {
    key: Arc<CertifiedKey>,
    seen: Arc<Mutex<Handshakes>>,
}

impl ResolvesServerCert for RecordSni {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let sni = hello.server_name().map(str::to_string);
        self.seen.lock().unwrap().sni.push(sni);
        Some(self.key.clone())
    }
}

fn server_config(
    leaf: &Leaf,
    client_ca: Option<(&TestCa, bool)>,
    seen: Arc<Mutex<Handshakes>>,
) -> Arc<rustls::ServerConfig> {
    let b = rustls::ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .unwrap();
    let b = match client_ca {
        Some((ca, required)) => {
            let mut roots = rustls::RootCertStore::empty();
            for c in CertificateDer::pem_slice_iter(ca.pem.as_bytes()) {
                roots.add(c.unwrap()).unwrap();
            }
            let v = rustls::server::WebPkiClientVerifier::builder_with_provider(
                Arc::new(roots),
                provider(),
            );
            let v = if required {
                v
            } else {
                v.allow_unauthenticated()
            };
            b.with_client_cert_verifier(v.build().unwrap())
        }
        None => b.with_no_client_auth(),
    };
    let key = provider()
        .key_provider
        .load_private_key(leaf.key())
        .unwrap();
    let resolver = RecordSni {
        key: Arc::new(CertifiedKey::new(leaf.chain.clone(), key)),
        seen,
    };
    let mut cfg = b.with_cert_resolver(Arc::new(resolver));
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    Arc::new(cfg)
}

/// A test certificate authority.
pub struct TestCa {
    issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
    pub pem: String,
}

/// A certificate and its key.
pub struct Leaf {
    pub chain: Vec<CertificateDer<'static>>,
    pub cert_pem: String,
    pub key_pem: String,
    /// The end of its validity, unix seconds.
    pub not_after: i64,
}

impl Leaf {
    /// A self-signed certificate for `names` (no CA a client knows).
    pub fn self_signed(names: &[&str]) -> Leaf {
        let key = rcgen::KeyPair::generate().unwrap();
        let params =
            rcgen::CertificateParams::new(names.iter().map(|s| s.to_string()).collect::<Vec<_>>())
                .unwrap();
        let not_after = params.not_after.unix_timestamp();
        let cert = params.self_signed(&key).unwrap();
        Leaf {
            chain: vec![cert.der().clone()],
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            not_after,
        }
    }

    pub fn key(&self) -> PrivateKeyDer<'static> {
        PrivateKeyDer::from_pem_slice(self.key_pem.as_bytes()).unwrap()
    }
}

impl Default for TestCa {
    fn default() -> TestCa {
        TestCa::new()
    }
}

impl TestCa {
    pub fn new() -> TestCa {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "webchecker targets test CA");
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let cert = params.self_signed(&key).unwrap();
        TestCa {
            pem: cert.pem(),
            issuer: rcgen::Issuer::new(params, key),
        }
    }

    /// A certificate for `names` (DNS names or IP addresses) signed by this CA.
    pub fn leaf(&self, names: &[&str]) -> Leaf {
        let params =
            rcgen::CertificateParams::new(names.iter().map(|s| s.to_string()).collect::<Vec<_>>())
                .unwrap();
        self.sign(params)
    }

    /// Like [`TestCa::leaf`], valid from `from` to `until` days from today
    /// (negative: in the past).
    pub fn leaf_valid(&self, names: &[&str], from: i64, until: i64) -> Leaf {
        let mut params =
            rcgen::CertificateParams::new(names.iter().map(|s| s.to_string()).collect::<Vec<_>>())
                .unwrap();
        let day = |d: i64| {
            use chrono::Datelike;
            let t = chrono::Utc::now().date_naive() + chrono::Duration::days(d);
            rcgen::date_time_ymd(t.year(), t.month() as u8, t.day() as u8)
        };
        params.not_before = day(from);
        params.not_after = day(until);
        self.sign(params)
    }

    fn sign(&self, params: rcgen::CertificateParams) -> Leaf {
        let key = rcgen::KeyPair::generate().unwrap();
        let not_after = params.not_after.unix_timestamp();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        Leaf {
            chain: vec![cert.der().clone()],
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            not_after,
        }
    }
}
