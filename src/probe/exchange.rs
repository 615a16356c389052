//! The HTTP/1.1 exchange of one hop: the request, then the response head and
//! its body, read up to `max_body_bytes`.

use std::time::Instant;

use bytes::Bytes;
use http::{HeaderMap, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};

use super::error::{HopError, Reason, Stop, hyper_failure};
use super::hop::Hop;
use super::outcome::Phase;
use super::prober::Probe;
use super::redirect::hop_headers;

/// What one hop brought back.
pub(super) struct Response {
    pub status: StatusCode,
    pub location: Option<String>,
    pub headers: HeaderMap,
    /// Kept only when a check reads it, and at most `max_body_bytes`.
    pub body: Vec<u8>,
    /// The body was longer than `max_body_bytes`.
    pub truncated: bool,
}

impl Probe<'_> {
    /// Sends the hop's request over `io` (connected, and for https past the
    /// TLS handshake) and reads the response. `absolute_form`: `io` leads to
    /// an HTTP proxy, which needs the full URL.
    pub(super) async fn exchange<S>(
        &mut self,
        hop: &Hop,
        io: S,
        absolute_form: bool,
    ) -> Result<Response, Stop>
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        self.phase = Phase::Processing;
        let t = Instant::now();
        let (mut sender, conn) = hyper::client::conn::http1::Builder::new()
            .max_buf_size(64 * 1024)
            .handshake::<_, Full<Bytes>>(TokioIo::new(io))
            .await
            .map_err(|e| hyper_failure("HTTP handshake failed", &e))?;
        let req = self.request(hop, absolute_form)?;
        // hyper writes nothing before `send_request`: this is the last moment
        // to hold the probe back without a request byte reaching the target.
        self.pass_gate()?;
        let max_body = self.prober.max_body_bytes;
        let want_body = self.plan.body_match.is_some() || !self.plan.json_checks.is_empty();
        let phase = &mut self.phase;
        let exchange = async move {
            let resp = sender
                .send_request(req)
                .await
                .map_err(|e| hyper_failure("no valid HTTP response", &e))?;
            let processing = t.elapsed();
            *phase = Phase::Transfer;
            let t = Instant::now();
            let resp = read_response(resp, max_body, want_body).await?;
            Ok::<_, HopError>((resp, processing, t.elapsed()))
        };
        // hyper's connection future does the I/O; it ends on its own after a
        // `Connection: close` exchange, possibly before the body is taken.
        let conn = async move {
            let _ = conn.await;
        };
        let (resp, processing, transfer) = {
            tokio::pin!(exchange);
            tokio::pin!(conn);
            tokio::select! {
                biased;
                r = &mut exchange => r?,
                _ = &mut conn => exchange.await?,
            }
        };
        self.phases.processing += processing;
        self.phases.transfer += transfer;
        Ok(resp)
    }

    fn request(&self, hop: &Hop, absolute_form: bool) -> Result<Request<Full<Bytes>>, HopError> {
        let target = &hop.target;
        let uri = if absolute_form {
            target.url()
        } else {
            target.path_and_query.clone()
        };
        let mut req = Request::builder()
            .method(hop.method.clone())
            .uri(uri.as_str())
            .header(http::header::HOST, target.authority())
            .header(http::header::USER_AGENT, self.prober.user_agent.clone())
            .header(http::header::CONNECTION, "close")
            .body(Full::new(hop.body.clone()))
            .map_err(|e| {
                HopError::new(Reason::InvalidSpec, format!("cannot build request: {e}"))
            })?;
        if let Some(r) = &self.prober.replica_header {
            req.headers_mut().insert("x-webchecker-replica", r.clone());
        }
        // Credentials go to the checker's own origin only (redirect.rs).
        for (k, v) in hop_headers(&self.plan.headers, hop) {
            req.headers_mut().insert(k.clone(), v.clone());
        }
        Ok(req)
    }
}

/// Reads the body, keeping it only when `keep` (a check needs it), and stops
/// after `max_body` bytes.
async fn read_response(
    resp: http::Response<Incoming>,
    max_body: usize,
    keep: bool,
) -> Result<Response, HopError> {
    let status = resp.status();
    let (parts, mut body) = resp.into_parts();
    let location = parts
        .headers
        .get(http::header::LOCATION)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let mut kept = Vec::new();
    let mut read = 0usize;
    let mut truncated = false;
    loop {
        if read >= max_body {
            truncated = true;
            break;
        }
        match body.frame().await {
            Some(Ok(frame)) => {
                if let Ok(data) = frame.into_data() {
                    read += data.len();
                    if keep {
                        let room = max_body.saturating_sub(kept.len());
                        kept.extend_from_slice(&data[..data.len().min(room)]);
                    }
                }
            }
            Some(Err(e)) => {
                let context = format!("HTTP {}: response body broken", status.as_u16());
                return Err(hyper_failure(&context, &e).with_status(status.as_u16()));
            }
            None => break,
        }
    }
    Ok(Response {
        status,
        location,
        headers: parts.headers,
        body: kept,
        truncated,
    })
}
