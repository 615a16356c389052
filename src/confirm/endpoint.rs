//! The confirmer's HTTP side: `POST /confirm` on a listener of its own
//! (`--confirm-listen`), so a NetworkPolicy can admit the release's pods to
//! it and scrapers to /metrics only, and a flood of asks never touches
//! /healthz. An ask is a few hundred bytes: its size is judged from
//! `Content-Length` before anything is read and again while reading, never
//! more than [`ASK_LIMIT`] is held, and a body that does not arrive within
//! [`BODY_WAIT`] is refused. The ask then goes to the service on the
//! engine's runtime ([`super::service`]), which checks who asks; this
//! thread only waits for the reply, as long as the owner waits.

use std::net::SocketAddr;
use std::time::Duration;

use axum::Router;
use axum::extract::{Extension, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use http_body_util::{BodyExt, Limited};

use super::service::{Desk, Request};
use crate::ask::{ASK_WAIT, Ask, PATH};
use crate::observe::listener::{self, Limits, Peer};

/// Bytes of an ask read at most.
pub const ASK_LIMIT: usize = 4096;
/// How long the body of an ask may take to arrive.
const BODY_WAIT: Duration = Duration::from_secs(5);
/// The confirm listener's limits: every member may have as many asks out
/// to this replica at once as the asker allows itself
/// ([`crate::ask::asker::PER_CONFIRMER`]), with room for a rollout's second
/// process at one address.
pub const LIMITS: Limits = Limits {
    connections: 512,
    per_peer: 2 * crate::ask::asker::PER_CONFIRMER,
    head: Duration::from_secs(5),
    // An ask waits for its probe; the connection no longer than the ask.
    lifetime: Duration::from_secs(ASK_WAIT.as_secs() + 30),
};

/// A refusal that closes the connection (the rest of the body is not read).
fn closing(status: StatusCode, text: &'static str) -> Response {
    (
        status,
        [(header::CONNECTION, HeaderValue::from_static("close"))],
        text,
    )
        .into_response()
}

fn content_length(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(header::CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()
}

async fn confirm(
    State(desk): State<Desk>,
    Extension(peer): Extension<Peer>,
    headers: HeaderMap,
    body: axum::body::Body,
) -> Response {
    if content_length(&headers).is_some_and(|n| n > ASK_LIMIT as u64) {
        return closing(StatusCode::PAYLOAD_TOO_LARGE, "ask too large\n");
    }
    let body = match tokio::time::timeout(BODY_WAIT, Limited::new(body, ASK_LIMIT).collect()).await
    {
        Err(_) => return closing(StatusCode::REQUEST_TIMEOUT, "ask too slow\n"),
        Ok(Err(_)) => return closing(StatusCode::PAYLOAD_TOO_LARGE, "ask too large\n"),
        Ok(Ok(collected)) => collected.to_bytes(),
    };
    let Ok(ask) = serde_json::from_slice::<Ask>(&body) else {
        return (StatusCode::BAD_REQUEST, "not an ask\n").into_response();
    };
    let token = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::to_string);
    let wait = ask.wait().min(ASK_WAIT);
    let (reply, answered) = tokio::sync::oneshot::channel();
    let request = Request {
        token,
        ask,
        peer: peer.ip(),
        reply,
    };
    if !desk.leave(request) {
        return (StatusCode::SERVICE_UNAVAILABLE, "busy\n").into_response();
    }
    // Dropping the receiver (the wait ended, or the asker went away and
    // this future with it) tells the service that nobody waits.
    match tokio::time::timeout(wait, answered).await {
        Ok(Ok(reply)) => (
            [(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            )],
            serde_json::to_vec(&reply).unwrap_or_default(),
        )
            .into_response(),
        _ => (StatusCode::SERVICE_UNAVAILABLE, "no reply\n").into_response(),
    }
}

pub fn router(desk: Desk) -> Router {
    Router::new().route(PATH, post(confirm)).with_state(desk)
}

/// Binds now (a bad address fails start-up) and serves asks on a thread of
/// its own; `refused` counts connections closed for the limits.
pub fn spawn(
    addr: SocketAddr,
    desk: Desk,
    refused: impl Fn() + Send + 'static,
) -> std::io::Result<SocketAddr> {
    let listener = std::net::TcpListener::bind(addr)?;
    listener.set_nonblocking(true)?;
    let local = listener.local_addr()?;
    std::thread::Builder::new()
        .name("confirm-server".into())
        .spawn(move || {
            let rt = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    tracing::error!(error = %e, "cannot start the confirm server's runtime: asks go unanswered");
                    return;
                }
            };
            rt.block_on(async move {
                match tokio::net::TcpListener::from_std(listener) {
                    Ok(l) => listener::serve(l, router(desk), LIMITS, refused).await,
                    Err(e) => {
                        tracing::error!(error = %e, "cannot serve asks: they go unanswered")
                    }
                }
            });
        })?;
    Ok(local)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    async fn started() -> (SocketAddr, tokio::sync::mpsc::Receiver<Request>) {
        let (desk, asks) = Desk::new();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(listener::serve(listener, router(desk), LIMITS, || {}));
        (addr, asks)
    }

    async fn status_of(addr: SocketAddr, head: &str, body: &[u8]) -> String {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.write_all(head.as_bytes()).await.unwrap();
        let _ = s.write_all(body).await;
        let mut out = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut out)).await;
        String::from_utf8_lossy(&out)
            .lines()
            .next()
            .unwrap_or("")
            .to_string()
    }

    #[tokio::test]
    async fn a_large_ask_is_refused_from_its_length_before_its_body_is_read() {
        let (addr, _asks) = started().await;
        let head = "POST /confirm HTTP/1.1\r\nhost: x\r\ncontent-length: 2000000\r\n\r\n";
        // Nothing of the body is sent: the answer comes from the head.
        assert_eq!(
            status_of(addr, head, b"").await,
            "HTTP/1.1 413 Payload Too Large"
        );
        // Chunked, without a length: refused once 4 KiB were read.
        let chunked = "POST /confirm HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n";
        let mut body = Vec::new();
        for _ in 0..8 {
            body.extend_from_slice(b"400\r\n");
            body.extend_from_slice(&[b'a'; 1024]);
            body.extend_from_slice(b"\r\n");
        }
        assert_eq!(
            status_of(addr, chunked, &body).await,
            "HTTP/1.1 413 Payload Too Large"
        );
    }

    #[tokio::test]
    async fn an_ask_whose_body_never_ends_is_refused_in_time() {
        let (addr, _asks) = started().await;
        let head = "POST /confirm HTTP/1.1\r\nhost: x\r\ncontent-length: 100\r\n\r\n";
        let started = std::time::Instant::now();
        assert_eq!(
            status_of(addr, head, b"{\"from\":").await,
            "HTTP/1.1 408 Request Timeout"
        );
        assert!(started.elapsed() < BODY_WAIT + Duration::from_secs(2));
    }

    #[tokio::test]
    async fn an_ask_reaches_the_service_with_its_peer_and_token() {
        let (addr, mut asks) = started().await;
        let ask = serde_json::to_vec(&Ask {
            from: "r1".into(),
            namespace: "ns".into(),
            name: "c".into(),
            uid: "u".into(),
            generation: Some(1),
            purpose: Default::default(),
            wait_millis: Some(5000),
        })
        .unwrap();
        let head = format!(
            "POST /confirm HTTP/1.1\r\nhost: x\r\nconnection: close\r\nauthorization: Bearer t0k\r\ncontent-length: {}\r\n\r\n",
            ask.len()
        );
        let served = tokio::spawn(async move {
            let r = asks.recv().await.unwrap();
            assert_eq!(r.token.as_deref(), Some("t0k"));
            assert!(r.peer.is_loopback());
            assert_eq!(r.ask.name, "c");
            let _ = r
                .reply
                .send(crate::ask::Reply::Refused { why: "no".into() });
        });
        assert_eq!(status_of(addr, &head, &ask).await, "HTTP/1.1 200 OK");
        served.await.unwrap();
    }
}
