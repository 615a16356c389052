//! The HTTP side: /metrics, /healthz, /readyz.
//!
//! It runs on its own thread with its own small runtime, like a sidecar, so a
//! saturated probe engine never makes /healthz time out and get the pod
//! restarted in the middle of an overload. Connections are limited in all
//! and per peer (crate::observe::listener), and at most [`RENDERS`]
//! expositions are rendered or sent at once: each is tens of megabytes for
//! a large fleet, and a scraper that never reads must not make the replica
//! hold one per connection. Asks to confirm a failure have a listener of
//! their own (crate::confirm::endpoint).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use futures::StreamExt as _;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::observe::listener::{self, Limits};
use crate::observe::metrics::{Metrics, negotiate};

/// Health flags shared between the engine and the server.
#[derive(Default)]
pub struct HealthFlags {
    /// Vital tasks are running.
    pub alive: AtomicBool,
    /// The checker watch has synced and the membership Lease is held.
    pub synced: AtomicBool,
    /// Shutdown has begun.
    pub shutting_down: AtomicBool,
    /// This process's incarnation, returned by /healthz so that peers can tell
    /// it from another process at the same address.
    pub incarnation: String,
}

impl HealthFlags {
    pub fn ready(&self) -> bool {
        self.alive.load(Ordering::Relaxed)
            && self.synced.load(Ordering::Relaxed)
            && !self.shutting_down.load(Ordering::Relaxed)
    }
}

#[derive(Clone)]
struct AppState {
    metrics: Arc<Metrics>,
    health: Arc<HealthFlags>,
    /// Expositions rendered or being sent.
    renders: Arc<Semaphore>,
}

/// Expositions rendered or sent at once, at most (Prometheus pairs scrape
/// one replica at a time each).
const RENDERS: usize = 2;
/// An exposition is handed to the connection in pieces of this size, so
/// its render's permit is held until all but the last few pieces are sent.
const PIECE: usize = 64 * 1024;

/// The main listener's limits: the kubelet's probes, peers' /healthz and a
/// few scrapers; a scrape may take a while to send on a slow link.
const LIMITS: Limits = Limits {
    connections: 128,
    per_peer: 16,
    head: std::time::Duration::from_secs(10),
    lifetime: std::time::Duration::from_secs(120),
};

/// Does this Accept-Encoding admit gzip (RFC 9110 12.5.3: `gzip` or `*`
/// with a non-zero weight, an explicit `gzip` weighing over `*`)?
fn accepts_gzip(accept_encoding: &str) -> bool {
    let mut star = None;
    for item in accept_encoding.split(',') {
        let mut parts = item.split(';');
        let coding = parts.next().unwrap_or("").trim().to_ascii_lowercase();
        let weight = parts
            .filter_map(|p| p.trim().strip_prefix("q=").or(p.trim().strip_prefix("Q=")))
            .find_map(|q| q.trim().parse::<f32>().ok())
            .unwrap_or(1.0);
        match coding.as_str() {
            "gzip" | "x-gzip" => return weight > 0.0,
            "*" => star = Some(weight > 0.0),
            _ => {}
        }
    }
    star.unwrap_or(false)
}

/// The exposition of a large fleet is tens of megabytes of text: compressed
/// for scrapers that ask (Prometheus does), rendered and compressed off this
/// thread's runtime so /healthz answers meanwhile.
async fn metrics(State(s): State<AppState>, headers: HeaderMap) -> axum::response::Response {
    let Ok(permit) = s.renders.clone().try_acquire_owned() else {
        return (StatusCode::SERVICE_UNAVAILABLE, "busy rendering\n").into_response();
    };
    let gzip = headers
        .get_all(header::ACCEPT_ENCODING)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(accepts_gzip);
    // Protobuf for scrapers that ask for it first (Prometheus 3 with
    // scrape_native_histograms), text for all others.
    let format = negotiate(
        headers
            .get_all(header::ACCEPT)
            .iter()
            .filter_map(|v| v.to_str().ok()),
    );
    let body = tokio::task::spawn_blocking(move || {
        let plain = s.metrics.encode(format);
        if !gzip {
            return Ok::<_, std::io::Error>(plain);
        }
        use std::io::Write;
        let mut enc = flate2::write::GzEncoder::new(
            Vec::with_capacity(plain.len() / 8),
            flate2::Compression::fast(),
        );
        enc.write_all(&plain)?;
        enc.finish()
    })
    .await;
    let Ok(Ok(body)) = body else {
        return (StatusCode::INTERNAL_SERVER_ERROR, "rendering failed\n").into_response();
    };
    let mut response = (
        [
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static(format.content_type()),
            ),
            (
                header::VARY,
                HeaderValue::from_static("accept, accept-encoding"),
            ),
        ],
        held(body, permit),
    )
        .into_response();
    if gzip {
        response
            .headers_mut()
            .insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
    }
    response
}

async fn healthz(State(s): State<AppState>) -> impl IntoResponse {
    let who = [(crate::api::INCARNATION_HEADER, s.health.incarnation.clone())];
    if s.health.alive.load(Ordering::Relaxed) {
        (StatusCode::OK, who, "ok\n")
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            who,
            "a vital task stopped\n",
        )
    }
}

async fn readyz(State(s): State<AppState>) -> impl IntoResponse {
    if s.health.ready() {
        (StatusCode::OK, "ready\n")
    } else if s.health.shutting_down.load(Ordering::Relaxed) {
        (StatusCode::SERVICE_UNAVAILABLE, "shutting down\n")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not synced yet\n")
    }
}

/// `body` in pieces, holding `permit` until the connection took the last.
fn held(body: Vec<u8>, permit: OwnedSemaphorePermit) -> axum::body::Body {
    let body = bytes::Bytes::from(body);
    let pieces: Vec<bytes::Bytes> = (0..body.len())
        .step_by(PIECE)
        .map(|at| body.slice(at..(at + PIECE).min(body.len())))
        .collect();
    let stream = futures::stream::iter(pieces).map(move |piece| {
        let _held = &permit;
        Ok::<_, std::convert::Infallible>(piece)
    });
    axum::body::Body::from_stream(stream)
}

pub fn router(metrics: Arc<Metrics>, health: Arc<HealthFlags>) -> Router {
    Router::new()
        .route("/metrics", get(self::metrics))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(AppState {
            metrics,
            health,
            renders: Arc::new(Semaphore::new(RENDERS)),
        })
}

/// glibc keeps memory freed by other threads' arenas (a shard that shrank
/// after a failover, the text of the last scrape) and rarely gives it back, so
/// RSS would stay at its high-water mark. Trimming every 10 s costs well under
/// a millisecond here and keeps RSS close to what is in use.
async fn return_free_memory() {
    let mut tick = tokio::time::interval(std::time::Duration::from_secs(10));
    loop {
        tick.tick().await;
        #[cfg(all(target_os = "linux", target_env = "gnu"))]
        // SAFETY: malloc_trim only releases free pages; it is thread-safe.
        unsafe {
            libc::malloc_trim(0);
        }
    }
}

/// Binds now (so a bad address fails start-up) and serves on a dedicated
/// thread. The receiver completes when the server stops for any reason
/// (including a panic): peers take a refused connection at our address as
/// proof that this process is gone, so the process must not outlive it.
pub fn spawn(
    addr: SocketAddr,
    metrics: Arc<Metrics>,
    health: Arc<HealthFlags>,
    refused: prometheus::IntCounter,
) -> std::io::Result<(SocketAddr, tokio::sync::oneshot::Receiver<()>)> {
    let listener = std::net::TcpListener::bind(addr)?;
    listener.set_nonblocking(true)?;
    let local = listener.local_addr()?;
    let (stopped_tx, stopped) = tokio::sync::oneshot::channel::<()>();
    std::thread::Builder::new()
        .name("http-server".into())
        .spawn(move || {
            // Dropped when the thread ends, by return or by unwinding.
            let _stopped = stopped_tx;
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("server runtime");
            rt.block_on(async move {
                tokio::spawn(return_free_memory());
                let listener = tokio::net::TcpListener::from_std(listener).expect("listener");
                let app = router(metrics, health);
                listener::serve(listener, app, LIMITS, move || refused.inc()).await;
            });
        })?;
    Ok((local, stopped))
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use axum::http::Request;
    use std::io::Read;
    use tower::ServiceExt;

    #[test]
    fn gzip_is_chosen_only_when_accepted() {
        for (header, gzip) in [
            ("gzip", true),
            ("identity, gzip;q=0.5", true),
            ("br, GZIP", true),
            ("*", true),
            ("gzip;q=0", false),
            ("*;q=0.1, gzip;q=0", false),
            ("identity", false),
            ("", false),
            ("deflate, br", false),
            ("gzip;q=zero", true),
        ] {
            assert_eq!(accepts_gzip(header), gzip, "{header:?}");
        }
    }

    async fn scrape(accept: Option<&str>) -> (Option<String>, Vec<u8>) {
        let (encoding, _, body) = scrape_as(accept, None).await;
        (encoding, body)
    }

    /// Content-Encoding, Content-Type and body of a scrape with these
    /// Accept-Encoding and Accept headers.
    async fn scrape_as(
        accept_encoding: Option<&str>,
        accept: Option<&str>,
    ) -> (Option<String>, String, Vec<u8>) {
        let metrics = Arc::new(Metrics::new("r0", false));
        crate::observe::metrics::family::counter_vec(
            metrics.registry(),
            ("webchecker_status_writes_total", "Status writes by result"),
            &["result"],
            &["ok"],
        )
        .with_label_values(&["ok"])
        .inc();
        let mut req = Request::get("/metrics");
        if let Some(a) = accept_encoding {
            req = req.header(header::ACCEPT_ENCODING, a);
        }
        if let Some(a) = accept {
            req = req.header(header::ACCEPT, a);
        }
        let resp = router(metrics, Arc::new(HealthFlags::default()))
            .oneshot(req.body(Body::empty()).unwrap())
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        let encoding = resp
            .headers()
            .get(header::CONTENT_ENCODING)
            .map(|v| v.to_str().unwrap().to_string());
        let content_type = resp.headers()[header::CONTENT_TYPE]
            .to_str()
            .unwrap()
            .to_string();
        let body = axum::body::to_bytes(resp.into_body(), usize::MAX)
            .await
            .unwrap();
        (encoding, content_type, body.to_vec())
    }

    /// What Prometheus 3.16 asks with `scrape_native_histograms: true`:
    /// delimited protobuf, gzip-compressed; text for everyone else.
    #[tokio::test]
    async fn protobuf_is_served_to_scrapers_that_ask_for_it_compressed_too() {
        let proto = "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited;q=0.7,text/plain;version=0.0.4;q=0.3,*/*;q=0.2";
        let (enc, content_type, gz) = scrape_as(Some("zstd,gzip"), Some(proto)).await;
        assert_eq!(enc.as_deref(), Some("gzip"));
        assert_eq!(
            content_type,
            "application/vnd.google.protobuf; proto=io.prometheus.client.MetricFamily; encoding=delimited"
        );
        let mut body = Vec::new();
        flate2::read::GzDecoder::new(gz.as_slice())
            .read_to_end(&mut body)
            .unwrap();
        // Length-delimited messages, back to back to the last byte.
        let mut rest = body.as_slice();
        let mut messages = 0;
        while !rest.is_empty() {
            let (mut len, mut shift) = (0usize, 0);
            loop {
                let b = rest[0];
                rest = &rest[1..];
                len |= usize::from(b & 0x7f) << shift;
                shift += 7;
                if b & 0x80 == 0 {
                    break;
                }
            }
            assert!(len <= rest.len(), "message {messages} is cut short");
            rest = &rest[len..];
            messages += 1;
        }
        // The registry's families (build info, process, status writes) and
        // the per-checker ones.
        assert!(messages >= 5, "{messages}");
        let find = |needle: &[u8]| body.windows(needle.len()).any(|w| w == needle);
        assert!(find(b"webchecker_status_writes_total"));
        assert!(!find(b"# TYPE"), "not the text format");

        let (_, content_type, text) = scrape_as(None, Some("text/plain;q=0.9,*/*;q=0.1")).await;
        assert_eq!(content_type, "text/plain; version=0.0.4; charset=utf-8");
        assert!(
            String::from_utf8(text)
                .unwrap()
                .contains("# TYPE webchecker_status_writes_total counter")
        );
    }

    #[tokio::test]
    async fn metrics_are_compressed_for_scrapers_that_ask_and_say_the_same() {
        let (plain_enc, plain) = scrape(None).await;
        assert_eq!(plain_enc, None);
        let text = String::from_utf8(plain).unwrap();
        assert!(text.contains("webchecker_status_writes_total{result=\"ok\"} 1"));
        let (enc, gz) = scrape(Some("gzip")).await;
        assert_eq!(enc.as_deref(), Some("gzip"));
        let mut unzipped = String::new();
        flate2::read::GzDecoder::new(gz.as_slice())
            .read_to_string(&mut unzipped)
            .unwrap();
        let types = |t: &str| -> Vec<String> {
            t.lines()
                .filter(|l| l.starts_with("# TYPE"))
                .map(str::to_string)
                .collect()
        };
        assert!(unzipped.contains("webchecker_status_writes_total{result=\"ok\"} 1"));
        assert_eq!(types(&unzipped), types(&text));
    }
}
