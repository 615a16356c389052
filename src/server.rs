//! The HTTP side: /metrics, /healthz, /readyz.
//!
//! It runs on its own thread with its own small runtime, like a sidecar, so a
//! saturated probe engine never makes /healthz time out and get the pod
//! restarted in the middle of an overload.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;

use crate::metrics::Metrics;

/// Health flags shared between the engine and the server.
#[derive(Default)]
pub struct Health {
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

impl Health {
    pub fn ready(&self) -> bool {
        self.alive.load(Ordering::Relaxed)
            && self.synced.load(Ordering::Relaxed)
            && !self.shutting_down.load(Ordering::Relaxed)
    }
}

#[derive(Clone)]
struct AppState {
    metrics: Arc<Metrics>,
    health: Arc<Health>,
}

async fn metrics(State(s): State<AppState>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        s.metrics.render(),
    )
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

pub fn router(metrics: Arc<Metrics>, health: Arc<Health>) -> Router {
    Router::new()
        .route("/metrics", get(self::metrics))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(AppState { metrics, health })
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
    health: Arc<Health>,
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
                let _ = axum::serve(listener, router(metrics, health)).await;
            });
        })?;
    Ok((local, stopped))
}
