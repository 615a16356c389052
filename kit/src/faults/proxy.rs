//! The fault proxy: a TLS-terminating HTTP proxy in front of the API server,
//! one per replica, whose behaviour can be switched at run time (see the
//! fault kit's docs, faults.rs).

use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

use super::Prng;
use crate::Cluster;

/// What a [`FaultProxy`] does with the traffic of its replica.
#[derive(Clone, Debug, PartialEq)]
pub enum ProxyMode {
    /// Forward everything.
    Pass,
    /// No byte moves on any connection, old or new; connections stay open
    /// (TCP handshakes complete, TLS handshakes do not). Everything resumes
    /// where it stopped when the mode changes: a network partition that heals.
    BlackHole,
    /// Connections open at the switch stall (no byte moves, nothing is
    /// closed) while new ones pass, except those carrying a watch: half-open
    /// pooled connections (after a load balancer failover, say). A request
    /// sent on one hangs; a client with deadlines drops it and opens a new
    /// one, a client without hangs. They resume when the mode changes.
    /// (Watches are spared: a watch that goes silent without an error cannot
    /// be told from a quiet one sooner than the server's bookmark interval, so
    /// no bound of the campaign could be met.)
    StallOpen,
    /// Every connection, existing and new, is reset (RST).
    Reset,
    /// Each request waits this long before it is forwarded.
    Latency(Duration),
    /// This share of requests (0..=1) is answered by the proxy itself with one
    /// of these codes, as an API server would (a `Status` body; 429 and 503
    /// carry `Retry-After: 1`). Watches are requests too.
    Errors { share: f64, codes: Vec<u16> },
    /// New requests are read and never answered, and stay unanswered after the
    /// mode changes back (until the client closes the connection): a half-open
    /// connection. Streams already flowing (watches) go on.
    Hang,
}

impl ProxyMode {
    /// The replica behind it cannot get an answer to its Lease renewals.
    pub fn cuts_off(&self) -> bool {
        match self {
            ProxyMode::BlackHole | ProxyMode::Reset | ProxyMode::Hang => true,
            ProxyMode::Errors { share, .. } => *share >= 1.0,
            _ => false,
        }
    }

    /// The replica behind it may lose its Lease without hearing so for a while:
    /// the cut-off exception (docs/invariants.md) to exclusivity may apply to it.
    pub fn isolates(&self) -> bool {
        match self {
            ProxyMode::Errors { share, .. } => *share >= 0.5,
            ProxyMode::StallOpen => true,
            m => m.cuts_off(),
        }
    }
}

impl fmt::Display for ProxyMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProxyMode::Pass => write!(f, "pass"),
            ProxyMode::BlackHole => write!(f, "black-hole"),
            ProxyMode::StallOpen => write!(f, "stall open connections"),
            ProxyMode::Reset => write!(f, "reset every connection"),
            ProxyMode::Latency(d) => write!(f, "latency {}ms", d.as_millis()),
            ProxyMode::Errors { share, codes } => write!(
                f,
                "errors {:.0}% {}",
                share * 100.0,
                codes
                    .iter()
                    .map(|c| c.to_string())
                    .collect::<Vec<_>>()
                    .join("/")
            ),
            ProxyMode::Hang => write!(f, "accept and never answer"),
        }
    }
}

/// Counters of one proxy.
#[derive(Default, Debug)]
pub struct ProxyStats {
    pub connections: AtomicU64,
    pub requests: AtomicU64,
    pub forwarded: AtomicU64,
    pub injected_errors: AtomicU64,
    pub resets: AtomicU64,
    pub hung: AtomicU64,
    pub upstream_failures: AtomicU64,
}

impl fmt::Display for ProxyStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        write!(
            f,
            "connections {}, requests {}, forwarded {}, injected errors {}, resets {}, hung {}, upstream failures {}",
            g(&self.connections),
            g(&self.requests),
            g(&self.forwarded),
            g(&self.injected_errors),
            g(&self.resets),
            g(&self.hung),
            g(&self.upstream_failures)
        )
    }
}

struct Ctl {
    mode: Mutex<ProxyMode>,
    /// Connections are numbered as accepted; StallOpen stalls those below this.
    next_conn: AtomicU64,
    stall_below: AtomicU64,
    /// Tasks stalled by BlackHole, woken when the mode changes.
    wakers: Mutex<Vec<Waker>>,
    /// Bumped to reset every open connection.
    reset: tokio::sync::watch::Sender<u64>,
    rng: Mutex<Prng>,
    stats: ProxyStats,
    /// Requests of one kind answered with an error whatever the mode.
    refusal: Mutex<Option<Refusal>>,
}

/// Requests of one kind (a method and path the predicate accepts) answered
/// by the proxy with `code` instead of being forwarded: a fault aimed at one
/// API call (the status writes, the sharder's assignment writes), while the
/// rest of the replica's traffic, its Lease renewals included, passes.
#[derive(Clone)]
struct Refusal {
    code: u16,
    matches: Arc<RequestMatch>,
}

/// Whether a request (its method and path) is one a [`Refusal`] answers.
type RequestMatch = dyn Fn(&hyper::Method, &str) -> bool + Send + Sync;

impl Ctl {
    fn mode(&self) -> ProxyMode {
        self.mode.lock().unwrap().clone()
    }

    /// True (and the waker registered) while connection `id` must not move.
    fn stalled(&self, id: u64, watching: bool, cx: &mut Context<'_>) -> bool {
        let m = self.mode.lock().unwrap();
        let stall = match *m {
            ProxyMode::BlackHole => true,
            ProxyMode::StallOpen => !watching && id < self.stall_below.load(Ordering::SeqCst),
            _ => false,
        };
        if !stall {
            return false;
        }
        // Registered under the mode lock, so a mode change cannot slip between
        // the check and the registration.
        let mut ws = self.wakers.lock().unwrap();
        if !ws.iter().any(|w| w.will_wake(cx.waker())) {
            ws.push(cx.waker().clone());
        }
        true
    }
}

/// The client side of a proxied connection; its I/O stops while black-holed.
struct Gated {
    io: TcpStream,
    id: u64,
    /// The last request on this connection was a watch.
    watching: Arc<AtomicBool>,
    ctl: Arc<Ctl>,
}

impl AsyncRead for Gated {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this
            .ctl
            .stalled(this.id, this.watching.load(Ordering::SeqCst), cx)
        {
            return Poll::Pending;
        }
        Pin::new(&mut this.io).poll_read(cx, buf)
    }
}

impl AsyncWrite for Gated {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if this
            .ctl
            .stalled(this.id, this.watching.load(Ordering::SeqCst), cx)
        {
            return Poll::Pending;
        }
        Pin::new(&mut this.io).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this
            .ctl
            .stalled(this.id, this.watching.load(Ordering::SeqCst), cx)
        {
            return Poll::Pending;
        }
        Pin::new(&mut this.io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

/// Makes the next close of `fd` send RST instead of FIN.
fn linger_zero(fd: i32) {
    let l = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            &l as *const libc::linger as *const libc::c_void,
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        );
    }
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;
type ProxyBody = BoxBody<Bytes, BoxError>;

struct Upstream {
    addr: SocketAddr,
    tls: tokio_rustls::TlsConnector,
}

/// Aborts a task when dropped (the upstream connection of a client connection).
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

type Link = Arc<
    tokio::sync::Mutex<
        Option<(
            hyper::client::conn::http1::SendRequest<Incoming>,
            AbortOnDrop,
        )>,
    >,
>;

async fn connect_upstream(
    up: &Upstream,
) -> io::Result<(
    hyper::client::conn::http1::SendRequest<Incoming>,
    AbortOnDrop,
)> {
    let limit = Duration::from_secs(5);
    let tcp = tokio::time::timeout(limit, TcpStream::connect(up.addr))
        .await
        .map_err(|_| io::Error::other("upstream connect timed out"))??;
    let _ = tcp.set_nodelay(true);
    let name = ServerName::IpAddress(up.addr.ip().into());
    let tls = tokio::time::timeout(limit, up.tls.connect(name, tcp))
        .await
        .map_err(|_| io::Error::other("upstream TLS handshake timed out"))??;
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
        .await
        .map_err(io::Error::other)?;
    let task = tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok((sender, AbortOnDrop(task)))
}

fn injected(code: u16) -> hyper::Response<ProxyBody> {
    let reason = match code {
        429 => "TooManyRequests",
        503 => "ServiceUnavailable",
        504 => "Timeout",
        _ => "InternalError",
    };
    let body = serde_json::json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": format!("{reason} (injected by the fault proxy)"),
        "reason": reason,
        "code": code,
    })
    .to_string();
    let mut b = hyper::Response::builder()
        .status(code)
        .header("content-type", "application/json");
    if code == 429 || code == 503 {
        b = b.header("retry-after", "1");
    }
    b.body(
        Full::new(Bytes::from(body))
            .map_err(|never| match never {})
            .boxed(),
    )
    .unwrap()
}

fn is_watch(uri: &hyper::Uri) -> bool {
    uri.query()
        .is_some_and(|q| q.split('&').any(|kv| kv == "watch=true" || kv == "watch=1"))
}

async fn handle_request(
    req: hyper::Request<Incoming>,
    ctl: Arc<Ctl>,
    up: Arc<Upstream>,
    link: Link,
    watching: Arc<AtomicBool>,
) -> Result<hyper::Response<ProxyBody>, io::Error> {
    ctl.stats.requests.fetch_add(1, Ordering::Relaxed);
    watching.store(is_watch(req.uri()), Ordering::SeqCst);
    let refused = ctl
        .refusal
        .lock()
        .unwrap()
        .as_ref()
        .filter(|r| (r.matches)(req.method(), req.uri().path()))
        .map(|r| r.code);
    if let Some(code) = refused {
        ctl.stats.injected_errors.fetch_add(1, Ordering::Relaxed);
        return Ok(injected(code));
    }
    match ctl.mode() {
        ProxyMode::Hang => {
            ctl.stats.hung.fetch_add(1, Ordering::Relaxed);
            std::future::pending::<()>().await;
        }
        ProxyMode::Errors { share, codes } if !codes.is_empty() => {
            let code = {
                let mut rng = ctl.rng.lock().unwrap();
                rng.chance(share).then(|| *rng.pick(&codes))
            };
            if let Some(code) = code {
                ctl.stats.injected_errors.fetch_add(1, Ordering::Relaxed);
                return Ok(injected(code));
            }
        }
        ProxyMode::Latency(d) => tokio::time::sleep(d).await,
        _ => {}
    }
    let mut guard = link.lock().await;
    if guard.as_ref().is_none_or(|(s, _)| s.is_closed()) {
        match connect_upstream(&up).await {
            Ok(c) => *guard = Some(c),
            Err(e) => {
                // Like a direct connection to a server that is not there: the
                // client sees its connection fail, not an answer.
                ctl.stats.upstream_failures.fetch_add(1, Ordering::Relaxed);
                return Err(e);
            }
        }
    }
    let (sender, _) = guard.as_mut().expect("connected above");
    sender.ready().await.map_err(io::Error::other)?;
    let answer = sender.send_request(req);
    drop(guard);
    let resp = answer.await.map_err(|e| {
        ctl.stats.upstream_failures.fetch_add(1, Ordering::Relaxed);
        io::Error::other(e)
    })?;
    ctl.stats.forwarded.fetch_add(1, Ordering::Relaxed);
    Ok(resp.map(|b| b.map_err(|e| Box::new(e) as BoxError).boxed()))
}

async fn handle_connection(
    tcp: TcpStream,
    ctl: Arc<Ctl>,
    acceptor: tokio_rustls::TlsAcceptor,
    up: Arc<Upstream>,
) {
    ctl.stats.connections.fetch_add(1, Ordering::Relaxed);
    let _ = tcp.set_nodelay(true);
    let fd = tcp.as_raw_fd();
    if ctl.mode() == ProxyMode::Reset {
        ctl.stats.resets.fetch_add(1, Ordering::Relaxed);
        linger_zero(fd);
        return;
    }
    let mut reset = ctl.reset.subscribe();
    reset.borrow_and_update();
    let watching = Arc::new(AtomicBool::new(false));
    let gated = Gated {
        io: tcp,
        id: ctl.next_conn.fetch_add(1, Ordering::SeqCst),
        watching: watching.clone(),
        ctl: ctl.clone(),
    };
    let c2 = ctl.clone();
    // The socket lives inside `serve` until this function returns, so `fd`
    // stays valid for linger_zero below.
    let serve = async move {
        let Ok(tls) = acceptor.accept(gated).await else {
            return;
        };
        let link: Link = Arc::new(tokio::sync::Mutex::new(None));
        let svc = service_fn(move |req| {
            handle_request(req, c2.clone(), up.clone(), link.clone(), watching.clone())
        });
        let _ = hyper::server::conn::http1::Builder::new()
            .serve_connection(TokioIo::new(tls), svc)
            .await;
    };
    tokio::pin!(serve);
    tokio::select! {
        _ = &mut serve => {}
        _ = reset.changed() => {
            ctl.stats.resets.fetch_add(1, Ordering::Relaxed);
            linger_zero(fd);
        }
    }
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::aws_lc_rs::default_provider())
}

/// A TLS-terminating proxy in front of an API server, for one replica. It
/// presents a certificate of its own CA (written next to the kubeconfig it
/// writes), forwards HTTP/1.1 over TLS to the real server, one upstream
/// connection per client connection, and streams bodies both ways (watches
/// are long responses). Authentication (the bearer token) passes through.
pub struct FaultProxy {
    pub addr: SocketAddr,
    /// PEM of the CA that signed the proxy's certificate.
    pub ca_pem: String,
    /// A copy of the cluster's kubeconfig pointing at this proxy (set by `for_cluster`).
    pub kubeconfig: PathBuf,
    ctl: Arc<Ctl>,
    accept: tokio::task::JoinHandle<()>,
}

impl FaultProxy {
    /// A proxy in front of `upstream` (an HTTPS server whose certificate
    /// `upstream_ca_pem` signed, for 127.0.0.1). `seed` drives the choice of
    /// requests that `Errors` answers.
    pub async fn start(upstream: SocketAddr, upstream_ca_pem: &[u8], seed: u64) -> FaultProxy {
        assert!(
            upstream.ip().is_loopback(),
            "the fault proxy only forwards to loopback"
        );
        // Upstream trust: the cluster's CA.
        let mut roots = rustls::RootCertStore::empty();
        for c in CertificateDer::pem_slice_iter(upstream_ca_pem) {
            roots.add(c.expect("upstream CA PEM")).unwrap();
        }
        let mut client = rustls::ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        client.alpn_protocols = vec![b"http/1.1".to_vec()];
        let up = Arc::new(Upstream {
            addr: upstream,
            tls: tokio_rustls::TlsConnector::from(Arc::new(client)),
        });
        // Our own CA and serving certificate for 127.0.0.1.
        let ca = crate::targets::TestCa::new();
        let leaf = ca.leaf(&["127.0.0.1", "localhost"]);
        let mut server = rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(leaf.chain.clone(), leaf.key())
            .unwrap();
        server.alpn_protocols = vec![b"http/1.1".to_vec()];
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(server));

        let listener = crate::listener().await;
        let addr = listener.local_addr().unwrap();
        let (reset, _) = tokio::sync::watch::channel(0u64);
        let ctl = Arc::new(Ctl {
            mode: Mutex::new(ProxyMode::Pass),
            next_conn: AtomicU64::new(0),
            stall_below: AtomicU64::new(0),
            wakers: Mutex::new(Vec::new()),
            reset,
            rng: Mutex::new(Prng::new(seed)),
            stats: ProxyStats::default(),
            refusal: Mutex::new(None),
        });
        let c2 = ctl.clone();
        let accept = tokio::spawn(async move {
            loop {
                match listener.accept().await {
                    Ok((tcp, _)) => {
                        tokio::spawn(handle_connection(
                            tcp,
                            c2.clone(),
                            acceptor.clone(),
                            up.clone(),
                        ));
                    }
                    // Out of descriptors or similar: try again shortly.
                    Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
                }
            }
        });
        FaultProxy {
            addr,
            ca_pem: ca.pem,
            kubeconfig: PathBuf::new(),
            ctl,
            accept,
        }
    }

    /// A proxy in front of `cluster`'s API server, and a kubeconfig for it
    /// (`<cluster dir>/kubeconfig-proxy-<name>`, with the proxy's CA in
    /// `<cluster dir>/proxy-<name>-ca.crt`).
    pub async fn for_cluster(cluster: &Cluster, name: &str, seed: u64) -> FaultProxy {
        let text = std::fs::read_to_string(&cluster.kubeconfig).unwrap();
        let upstream: SocketAddr = crate::kubeconfig_server(&text)
            .trim_start_matches("https://")
            .trim_end_matches('/')
            .parse()
            .expect("the cluster's server is https://127.0.0.1:<port>");
        let ca = std::fs::read(cluster.dir.join("pki/ca.crt")).expect("cluster CA");
        let mut p = FaultProxy::start(upstream, &ca, seed).await;
        let ca_file = cluster.dir.join(format!("proxy-{name}-ca.crt"));
        std::fs::write(&ca_file, &p.ca_pem).unwrap();
        let kubeconfig = cluster.dir.join(format!("kubeconfig-proxy-{name}"));
        let rewritten: Vec<String> = text
            .lines()
            .map(|l| {
                let indent = &l[..l.len() - l.trim_start().len()];
                if l.trim().starts_with("server: ") {
                    format!("{indent}server: https://{}", p.addr)
                } else if l.trim().starts_with("certificate-authority-data: ") {
                    format!("{indent}certificate-authority: {}", ca_file.display())
                } else {
                    l.to_string()
                }
            })
            .collect();
        std::fs::write(&kubeconfig, rewritten.join("\n") + "\n").unwrap();
        p.kubeconfig = kubeconfig;
        p
    }

    pub fn mode(&self) -> ProxyMode {
        self.ctl.mode()
    }

    /// Switches the mode; `Reset` also resets every open connection.
    pub fn set_mode(&self, mode: ProxyMode) {
        let reset = mode == ProxyMode::Reset;
        let stalled = {
            let mut m = self.ctl.mode.lock().unwrap();
            if mode == ProxyMode::StallOpen {
                self.ctl
                    .stall_below
                    .store(self.ctl.next_conn.load(Ordering::SeqCst), Ordering::SeqCst);
            }
            *m = mode;
            std::mem::take(&mut *self.ctl.wakers.lock().unwrap())
        };
        for w in stalled {
            w.wake();
        }
        if reset {
            self.reset_connections();
        }
    }

    /// From now on answers every request whose method and path `matches`
    /// accepts with `code` (a `Status` body, as an API server would), in any
    /// mode that lets the request reach the proxy; replaces an earlier refusal.
    pub fn refuse(
        &self,
        code: u16,
        matches: impl Fn(&hyper::Method, &str) -> bool + Send + Sync + 'static,
    ) {
        *self.ctl.refusal.lock().unwrap() = Some(Refusal {
            code,
            matches: Arc::new(matches),
        });
    }

    /// Forwards the requests `refuse` answered again.
    pub fn stop_refusing(&self) {
        *self.ctl.refusal.lock().unwrap() = None;
    }

    /// Resets every open connection once (a network blip); the mode stays.
    pub fn reset_connections(&self) {
        self.ctl.reset.send_modify(|g| *g += 1);
    }

    pub fn stats(&self) -> &ProxyStats {
        &self.ctl.stats
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.accept.abort();
        self.set_mode(ProxyMode::Pass);
        self.reset_connections();
    }
}

#[cfg(test)]
mod tests;
