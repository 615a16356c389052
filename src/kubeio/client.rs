//! Clients for the Kubernetes API with deadlines and TCP keepalive.
//!
//! kube's default client has no read timeout (so that watches can idle) and no
//! TCP keepalive: a request on a half-open connection can then hang for
//! minutes, and with it a Lease renewal, a proof of death or a drain ack. We
//! build three clients from one config: `requests`, whose reads time out, for
//! every ordinary call (each also wrapped in its own deadline by the caller);
//! `leases`, the same without connection reuse; and `watches`, whose response
//! head must come within a call deadline and whose body may idle a little
//! longer than the server-side watch timeout. All send TCP keepalives, so a
//! dead peer breaks the connection within about half a minute even when
//! nothing is being read; the read timeouts catch a peer that still
//! acknowledges packets but never answers (a stalled proxy).

use std::time::Duration;

use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use kube::client::ConfigExt;
use kube::{Client, Config};
use tower::{BoxError, ServiceBuilder};

use crate::error::Error;

/// Deadline of one ordinary API call (get, create, replace, patch, delete).
pub const CALL_DEADLINE: Duration = Duration::from_secs(10);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
const KEEPALIVE_IDLE: Duration = Duration::from_secs(15);
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(5);
const KEEPALIVE_PROBES: u32 = 3;

#[derive(Clone)]
pub struct Clients {
    pub requests: Client,
    pub watches: Client,
    /// Lease renewals: a fresh connection per request, so a renewal never
    /// waits on a pooled connection that went silent (a half-open path).
    pub leases: Client,
}

/// What the API server's audit log and `managedFields` (for requests without
/// a field manager of their own) call this operator.
pub const USER_AGENT: &str = concat!("webchecker-operator/", env!("CARGO_PKG_VERSION"));

/// The field managers of the operator's writes, one per component, so that
/// `managedFields` and audit logs say which part of the operator wrote what.
pub mod managers {
    /// Status writes and the owners' drain acknowledgements.
    pub const STATUS: &str = "webchecker-operator/status";
    /// The sharder's assignments and drains.
    pub const SHARDER: &str = "webchecker-operator/sharder";
    /// Member Leases.
    pub const MEMBERSHIP: &str = "webchecker-operator/membership";
    /// The leader Lease.
    pub const ELECTOR: &str = "webchecker-operator/elector";
}

/// Merge-patch parameters under field manager `manager`.
pub fn patch_params(manager: &str) -> kube::api::PatchParams {
    kube::api::PatchParams {
        field_manager: Some(manager.to_string()),
        ..Default::default()
    }
}

/// Create and replace parameters under field manager `manager`.
pub fn post_params(manager: &str) -> kube::api::PostParams {
    kube::api::PostParams {
        field_manager: Some(manager.to_string()),
        ..Default::default()
    }
}

impl Clients {
    pub fn new(mut config: Config) -> Result<Self, Error> {
        let ua = http::header::USER_AGENT;
        if !config.headers.iter().any(|(k, _)| k == ua) {
            config
                .headers
                .push((ua, http::HeaderValue::from_static(USER_AGENT)));
        }
        let requests = Shape {
            read_timeout: CALL_DEADLINE,
            head_timeout: None,
            pooled: true,
        };
        Ok(Clients {
            requests: build(&config, requests)?,
            watches: build(
                &config,
                Shape {
                    read_timeout: WATCH_IDLE_LIMIT,
                    head_timeout: Some(CALL_DEADLINE),
                    pooled: true,
                },
            )?,
            leases: build(
                &config,
                Shape {
                    pooled: false,
                    ..requests
                },
            )?,
        })
    }
}

#[derive(Clone, Copy)]
struct Shape {
    /// Longest silence while reading an answer.
    read_timeout: Duration,
    /// Deadline of the response head (status and headers), the body aside.
    head_timeout: Option<Duration>,
    /// Reuse connections.
    pooled: bool,
}

fn build(config: &Config, shape: Shape) -> Result<Client, Error> {
    let Shape {
        read_timeout,
        head_timeout,
        pooled,
    } = shape;
    let read_timeout = Some(read_timeout);
    if config.proxy_url.is_some() {
        // kube's own stack knows HTTP and SOCKS proxies; ours does not. Callers'
        // deadlines still hold, only keepalive is lost.
        let mut c = config.clone();
        c.read_timeout = read_timeout;
        c.connect_timeout = Some(CONNECT_TIMEOUT);
        return Client::try_from(c).map_err(Error::KubeClient);
    }
    let mut tcp = HttpConnector::new();
    tcp.enforce_http(false);
    tcp.set_nodelay(true);
    tcp.set_connect_timeout(Some(CONNECT_TIMEOUT));
    tcp.set_keepalive(Some(KEEPALIVE_IDLE));
    tcp.set_keepalive_interval(Some(KEEPALIVE_INTERVAL));
    tcp.set_keepalive_retries(Some(KEEPALIVE_PROBES));
    let https = config
        .rustls_https_connector_with_connector(tcp)
        .map_err(Error::KubeClient)?;
    let mut timed = hyper_timeout::TimeoutConnector::new(https);
    timed.set_connect_timeout(Some(CONNECT_TIMEOUT));
    timed.set_read_timeout(read_timeout);
    timed.set_write_timeout(Some(CALL_DEADLINE));
    // A pooled connection's idle time must not count against the next answer.
    timed.set_reset_reader_on_write(true);
    let http: hyper_util::client::legacy::Client<_, kube::client::Body> =
        hyper_util::client::legacy::Client::builder(TokioExecutor::new())
            .pool_max_idle_per_host(if pooled { usize::MAX } else { 0 })
            .build(timed);
    let service = ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(config.auth_layer().map_err(Error::KubeClient)?)
        .layer(config.extra_headers_layer().map_err(Error::KubeClient)?)
        .option_layer(head_timeout.map(tower::timeout::TimeoutLayer::new))
        .map_err(BoxError::from)
        .service(http);
    Ok(Client::new(service, config.default_namespace.clone()))
}

/// Server-side timeout of every watch: the server ends each watch after this
/// and the watcher resumes it from the last resourceVersion (no re-list).
pub const WATCH_TIMEOUT_SECS: u32 = 20;

/// A watch body silent for this long is dead (the server would have ended it):
/// a stalled connection is replaced within this bound.
pub const WATCH_IDLE_LIMIT: Duration = Duration::from_secs(WATCH_TIMEOUT_SECS as u64 + 10);

/// Backoff of every watch after an error: from 200 ms doubling to 2 s, with
/// jitter, reset by the first event. kube's default grows to 30 s, which
/// after an API server restart leaves a replica blind to its new checkers
/// (or the sharder to new members) for half a minute.
pub struct WatchBackoff {
    next: Duration,
}

const WATCH_BACKOFF_MIN: Duration = Duration::from_millis(200);
const WATCH_BACKOFF_MAX: Duration = Duration::from_secs(2);

impl Default for WatchBackoff {
    fn default() -> Self {
        WatchBackoff {
            next: WATCH_BACKOFF_MIN,
        }
    }
}

impl Iterator for WatchBackoff {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        let base = self.next;
        self.next = (self.next * 2).min(WATCH_BACKOFF_MAX);
        // Up to +50%, so that replicas do not reconnect in lockstep.
        let jitter = base.mul_f64(rand::random::<f64>() * 0.5);
        Some(base + jitter)
    }
}

impl kube::runtime::utils::Backoff for WatchBackoff {
    fn reset(&mut self) {
        self.next = WATCH_BACKOFF_MIN;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::utils::Backoff;

    #[test]
    fn watch_backoff_is_capped_and_resets() {
        let mut b = WatchBackoff::default();
        let first = b.next().unwrap();
        assert!(first >= WATCH_BACKOFF_MIN && first <= WATCH_BACKOFF_MIN * 3 / 2);
        for _ in 0..20 {
            assert!(b.next().unwrap() <= WATCH_BACKOFF_MAX * 3 / 2);
        }
        b.reset();
        assert!(b.next().unwrap() <= WATCH_BACKOFF_MIN * 3 / 2);
    }

    /// Every client names the operator to the API server (audit logs).
    #[tokio::test]
    async fn every_client_sends_the_operators_user_agent() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url: http::Uri = format!("http://{}", listener.local_addr().unwrap())
            .parse()
            .unwrap();
        let clients = Clients::new(Config::new(url)).unwrap();
        let server = tokio::spawn(async move {
            let mut heads = Vec::new();
            for _ in 0..3 {
                let (mut conn, _) = listener.accept().await.unwrap();
                let mut buf = vec![0u8; 4096];
                let n = conn.read(&mut buf).await.unwrap();
                heads.push(String::from_utf8_lossy(&buf[..n]).to_lowercase());
                let _ = conn
                    .write_all(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\nconnection: close\r\n\r\n{}")
                    .await;
            }
            heads
        });
        for client in [&clients.requests, &clients.watches, &clients.leases] {
            let req = http::Request::get("/version").body(Vec::new()).unwrap();
            let _ = client.request_text(req).await;
        }
        let want = format!("user-agent: {}", USER_AGENT.to_lowercase());
        for head in server.await.unwrap() {
            assert!(head.contains(&want), "{head}");
        }
    }
}
