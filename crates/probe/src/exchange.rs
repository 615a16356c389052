//! The HTTP/1.1 or HTTP/2 exchange of one hop: the request, then the response head and
//! its body, read (and decoded: decode.rs) up to `max_body_bytes`.

use std::future::Future;
use std::time::Instant;

use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncRead, AsyncWrite};

use super::decode::{Coding, Decoder};
use super::error::{HopError, Reason, Stop};
use super::failure::hyper_failure;
use super::message::{Hop, Response, hop_headers};
use super::outcome::Phase;
use super::state::Probe;

/// How a request names its target.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Form {
    /// `GET /path HTTP/1.1` with a Host header.
    Origin,
    /// `GET http://host/path HTTP/1.1`, to an HTTP proxy.
    Absolute,
    /// HTTP/2: scheme and authority are pseudo-headers; no Host, and no
    /// connection-specific headers (RFC 9113 8.2.2).
    H2,
}

impl Probe<'_> {
    /// Sends the hop's request over `io` (connected, and for https past the
    /// TLS handshake) and reads the response. `absolute_form`: `io` leads to
    /// an HTTP proxy, which needs the full URL. `h2`: speak HTTP/2.
    pub(super) async fn exchange<S>(
        &mut self,
        hop: &Hop,
        io: S,
        absolute_form: bool,
        h2: bool,
    ) -> Result<Response, Stop>
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        self.phase = Phase::Processing;
        let t = Instant::now();
        if h2 {
            // The HTTP/2 handshake writes the connection preface: the gate is
            // asked before it too.
            self.pass_gate()?;
            let (mut sender, conn) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
                // As the 64 KiB head limit of HTTP/1.1.
                .max_header_list_size(64 * 1024)
                .handshake::<_, Full<Bytes>>(TokioIo::new(io))
                .await
                .map_err(|e| hyper_failure("HTTP/2 handshake failed", &e))?;
            let req = self.request(hop, Form::H2)?;
            self.pass_gate()?;
            self.drive(async move { sender.send_request(req).await }, conn, t)
                .await
        } else {
            let (mut sender, conn) = hyper::client::conn::http1::Builder::new()
                .max_buf_size(64 * 1024)
                .handshake::<_, Full<Bytes>>(TokioIo::new(io))
                .await
                .map_err(|e| hyper_failure("HTTP handshake failed", &e))?;
            let form = if absolute_form {
                Form::Absolute
            } else {
                Form::Origin
            };
            let req = self.request(hop, form)?;
            // hyper writes nothing before `send_request`: this is the last
            // moment to hold the probe back without a request byte reaching
            // the target.
            self.pass_gate()?;
            self.drive(async move { sender.send_request(req).await }, conn, t)
                .await
        }
    }

    /// Awaits the response of `send` and reads its body while `conn` (hyper's
    /// connection future, which does the I/O) runs beside it.
    async fn drive<F, C>(&mut self, send: F, conn: C, t: Instant) -> Result<Response, Stop>
    where
        F: Future<Output = hyper::Result<http::Response<Incoming>>>,
        C: Future,
    {
        let max_body = self.prober.max_body_bytes;
        let want_body = self.plan.body_match.is_some() || !self.plan.json_checks.is_empty();
        let compression = self.plan.compression;
        let phase = &mut self.phase;
        let exchange = async move {
            let resp = send
                .await
                .map_err(|e| hyper_failure("no valid HTTP response", &e))?;
            let processing = t.elapsed();
            *phase = Phase::Transfer;
            let t = Instant::now();
            let resp = read_response(resp, max_body, want_body, compression).await?;
            Ok::<_, HopError>((resp, processing, t.elapsed()))
        };
        let (resp, processing, transfer) = beside(exchange, conn).await?;
        self.phases.processing += processing;
        self.phases.transfer += transfer;
        Ok(resp)
    }

    fn request(&self, hop: &Hop, form: Form) -> Result<Request<Full<Bytes>>, HopError> {
        let target = &hop.target;
        let uri = match form {
            Form::Absolute | Form::H2 => target.url(),
            Form::Origin => target.path_and_query.clone(),
        };
        let mut req = Request::builder()
            .method(hop.method.clone())
            .uri(uri.as_str());
        if form != Form::H2 {
            req = req
                .header(http::header::HOST, target.authority())
                .header(http::header::CONNECTION, "close");
        }
        let mut req = req
            .header(http::header::USER_AGENT, self.prober.user_agent.clone())
            .header(
                http::header::ACCEPT_ENCODING,
                self.plan.compression.accept_encoding(),
            )
            .body(Full::new(hop.body.clone()))
            .map_err(|e| {
                HopError::new(Reason::InvalidSpec, format!("cannot build request: {e}"))
            })?;
        if let Some(r) = &self.prober.replica_header {
            req.headers_mut().insert("x-webchecker-replica", r.clone());
        }
        // Credentials go to the checker's own origin only (message.rs).
        for (k, v) in hop_headers(&self.plan.headers, hop) {
            req.headers_mut().insert(k.clone(), v.clone());
        }
        Ok(req)
    }
}

/// Runs `exchange` while `conn` (hyper's connection future, which does the
/// I/O) runs beside it. The connection future ends on its own after a
/// `Connection: close` exchange, possibly before the body is taken.
pub(super) async fn beside<T, C: Future>(
    exchange: impl Future<Output = Result<T, HopError>>,
    conn: C,
) -> Result<T, HopError> {
    let conn = async move {
        let _ = conn.await;
    };
    tokio::pin!(exchange);
    tokio::pin!(conn);
    tokio::select! {
        biased;
        r = &mut exchange => r,
        _ = &mut conn => exchange.await,
    }
}

/// Reads the body, keeping it only when `keep` (a check needs it), and stops
/// after `max_body` bytes. A body in a content coding is decoded when a check
/// reads it or the plan asked for a coding (so that a broken stream is seen),
/// and then `max_body` counts decoded bytes; the encoded bytes read stop at
/// twice that, for streams that decode to little or nothing.
async fn read_response(
    resp: http::Response<Incoming>,
    max_body: usize,
    keep: bool,
    asked: Coding,
) -> Result<Response, HopError> {
    let status = resp.status();
    let version = resp.version();
    let (parts, mut body) = resp.into_parts();
    let location = parts
        .headers
        .get(http::header::LOCATION)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    // A coding the probe cannot decode fails the final response only (a
    // redirect's body is never checked): its bytes are not kept.
    let (coding, undecodable) = match parts.headers.get(http::header::CONTENT_ENCODING) {
        Some(v) if keep || asked != Coding::Identity => match Coding::of_response(v) {
            Some(c) => (c, false),
            None => (Coding::Identity, true),
        },
        _ => (Coding::Identity, false),
    };
    let keep = keep && !undecodable;
    let mut decoder = (coding != Coding::Identity).then(|| Decoder::new(coding, max_body, keep));
    let invalid = |name: &str| {
        HopError::new(
            Reason::ProtocolError,
            format!(
                "HTTP {}: the response body is not valid {name}",
                status.as_u16()
            ),
        )
        .with_status(status.as_u16())
    };
    let mut kept = Vec::new();
    let mut read = 0usize;
    let mut truncated = false;
    loop {
        let done = match &mut decoder {
            Some(d) => d.full() || d.encoded >= max_body.saturating_mul(2),
            None => read >= max_body,
        };
        if done {
            truncated = true;
            break;
        }
        match body.frame().await {
            Some(Ok(frame)) => {
                if let Ok(data) = frame.into_data() {
                    match &mut decoder {
                        Some(d) => d.push(&data).map_err(|e| invalid(e.0))?,
                        None => {
                            read += data.len();
                            if keep {
                                let room = max_body.saturating_sub(kept.len());
                                kept.extend_from_slice(&data[..data.len().min(room)]);
                            }
                        }
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
    if let Some(d) = decoder {
        kept = d.finish(!truncated).map_err(|e| invalid(e.0))?;
    }
    Ok(Response {
        status,
        version,
        location,
        headers: parts.headers,
        body: kept,
        truncated,
        undecodable,
    })
}
