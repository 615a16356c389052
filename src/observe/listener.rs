//! Serving one listener under limits, whatever its clients send or withhold:
//! connections at most in all and per peer address (more are closed at
//! once), a deadline on each request head (also while a kept-alive
//! connection waits for its next request), hyper's smallest read buffer,
//! and a lifetime per connection. A connection then costs the replica a few
//! KiB for a bounded time, and a pod that opens hundreds of them takes only
//! its own share of one listener.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use tower::ServiceExt;

/// The address of the peer a request came from (a request extension).
#[derive(Clone, Copy, Debug)]
pub struct Peer(pub SocketAddr);

const CONNECTIONS_REFUSED: crate::observe::metrics::Family = (
    "webchecker_http_connections_refused_total",
    "Connections closed at once because their listener (main: /metrics /healthz /readyz; confirm: asks of other replicas) had its connections in all or from that peer address open",
);

/// Connections closed at once for a listener's limits, by listener (main,
/// confirm): what each listener's `refused` counts.
pub fn refused_connections(r: &prometheus::Registry) -> prometheus::IntCounterVec {
    crate::observe::metrics::family::counter_vec(
        r,
        CONNECTIONS_REFUSED,
        &["listener"],
        &["main", "confirm"],
    )
}

impl Peer {
    /// Its IP, IPv4-mapped IPv6 addresses as IPv4.
    pub fn ip(&self) -> IpAddr {
        self.0.ip().to_canonical()
    }
}

/// The limits of one listener.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Connections open at once, at most.
    pub connections: usize,
    /// Connections open at once from one peer address, at most.
    pub per_peer: usize,
    /// A request head must arrive within this (from the first read, or
    /// from the end of the previous response on a kept-alive connection).
    pub head: Duration,
    /// A connection is closed after this, whatever it is doing.
    pub lifetime: Duration,
}

/// hyper's smallest read buffer (it refuses less): a request head larger
/// than this is refused.
const READ_BUFFER: usize = 8192;

#[derive(Default)]
struct Open {
    total: usize,
    by_peer: HashMap<IpAddr, usize>,
}

/// One open connection, counted until dropped.
struct Slot {
    open: Arc<Mutex<Open>>,
    ip: IpAddr,
}

impl Slot {
    fn take(open: &Arc<Mutex<Open>>, ip: IpAddr, limits: &Limits) -> Option<Slot> {
        let mut o = open.lock().unwrap_or_else(|p| p.into_inner());
        let mine = o.by_peer.get(&ip).copied().unwrap_or(0);
        if o.total >= limits.connections || mine >= limits.per_peer {
            return None;
        }
        o.total += 1;
        *o.by_peer.entry(ip).or_default() += 1;
        Some(Slot {
            open: open.clone(),
            ip,
        })
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut o = self.open.lock().unwrap_or_else(|p| p.into_inner());
        o.total -= 1;
        if let Some(n) = o.by_peer.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                o.by_peer.remove(&self.ip);
            }
        }
    }
}

/// Serves `router` on `listener` under `limits` until the listener fails
/// for good; `refused` is called for each connection closed at once for
/// the limits.
pub async fn serve(
    listener: tokio::net::TcpListener,
    router: Router,
    limits: Limits,
    refused: impl Fn() + Send + 'static,
) {
    let open = Arc::new(Mutex::new(Open::default()));
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            // Out of descriptors or a connection reset before it was
            // taken: the next one may do.
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
        };
        let Some(slot) = Slot::take(&open, peer.ip().to_canonical(), &limits) else {
            refused();
            continue;
        };
        let _ = stream.set_nodelay(true);
        let router = router.clone();
        tokio::spawn(async move {
            let _slot = slot;
            let service = hyper::service::service_fn(move |mut req: http::Request<Incoming>| {
                req.extensions_mut().insert(Peer(peer));
                router.clone().oneshot(req.map(axum::body::Body::new))
            });
            let mut builder = http1::Builder::new();
            builder
                .timer(TokioTimer::new())
                .header_read_timeout(limits.head)
                .max_buf_size(READ_BUFFER);
            let conn = builder.serve_connection(TokioIo::new(stream), service);
            let _ = tokio::time::timeout(limits.lifetime, conn).await;
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::routing::get;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    async fn started(limits: Limits) -> (SocketAddr, Arc<std::sync::atomic::AtomicUsize>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let refused = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = refused.clone();
        let router = Router::new().route("/", get(|| async { "ok" }));
        tokio::spawn(serve(listener, router, limits, move || {
            counted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }));
        (addr, refused)
    }

    async fn answered(addr: SocketAddr) -> bool {
        let Ok(mut s) = tokio::net::TcpStream::connect(addr).await else {
            return false;
        };
        if s.write_all(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n")
            .await
            .is_err()
        {
            return false;
        }
        let mut buf = [0u8; 64];
        matches!(s.read(&mut buf).await, Ok(n) if n > 0 && buf.starts_with(b"HTTP/1.1 200"))
    }

    #[tokio::test]
    async fn one_peer_takes_its_share_and_a_silent_one_is_closed_at_the_deadline() {
        let limits = Limits {
            connections: 8,
            per_peer: 3,
            head: Duration::from_millis(300),
            lifetime: Duration::from_secs(60),
        };
        let (addr, refused) = started(limits).await;
        // Three connections that send nothing hold the peer's share.
        let mut silent = Vec::new();
        for _ in 0..3 {
            silent.push(tokio::net::TcpStream::connect(addr).await.unwrap());
        }
        assert!(
            !answered(addr).await,
            "a fourth connection of the peer is closed"
        );
        assert_eq!(refused.load(std::sync::atomic::Ordering::Relaxed), 1);
        // The head deadline closes them; the peer is served again.
        for s in &mut silent {
            let mut buf = [0u8; 16];
            let n = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf))
                .await
                .expect("closed by the head deadline")
                .unwrap_or(0);
            assert!(n == 0 || buf.starts_with(b"HTTP/1.1 408"), "{n}");
        }
        drop(silent);
        // Closed by the server already: its slots are free by now, or
        // within the few polls the connection tasks take to end.
        let mut served = false;
        for _ in 0..50 {
            if answered(addr).await {
                served = true;
                break;
            }
            tokio::task::yield_now().await;
        }
        assert!(served, "the peer is served again");
    }
}
