//! The gRPC health check (grpc:// and grpcs://): one unary call of
//! `grpc.health.v1.Health/Check` over HTTP/2, in the clear (prior
//! knowledge) or over TLS (ALPN h2, the checker's `tls` options), on a new
//! connection every probe, as blackbox_exporter's grpc prober does. The
//! answer must be SERVING.

use std::time::Instant;

use bytes::Bytes;
use http::{HeaderValue, Request};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncRead, AsyncWrite};

use super::dial::CloseOnDrop;
use super::error::{HopError, Reason, Stop};
use super::exchange::beside;
use super::failure::hyper_failure;
use super::grpc_wire::{health_request, health_response, status_name};
use super::message::Hop;
use super::outcome::{GrpcFacts, Phase, Serving};
use super::run::Passed;
use super::state::Probe;

impl Probe<'_> {
    /// Connects (TLS for grpcs) and asks for the health of `service`.
    pub(super) async fn grpc_health(&mut self, service: &str) -> Result<Passed, Stop> {
        let hop = Hop::first(self.plan);
        let stream = CloseOnDrop(self.dial(&hop).await?);
        let answer = if hop.target.https {
            let tls = self.handshake(&hop.target, true, stream).await?;
            self.grpc_call(&hop, tls, service).await?
        } else {
            self.grpc_call(&hop, stream, service).await?
        };
        self.grpc = Some(answer);
        verdict(answer, service)
    }

    async fn grpc_call<S>(&mut self, hop: &Hop, io: S, service: &str) -> Result<GrpcFacts, Stop>
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        self.phase = Phase::Processing;
        let t = Instant::now();
        // The HTTP/2 handshake writes the connection preface.
        self.pass_gate()?;
        let (mut sender, conn) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
            .max_header_list_size(64 * 1024)
            .handshake::<_, Full<Bytes>>(TokioIo::new(io))
            .await
            .map_err(|e| hyper_failure("HTTP/2 handshake failed", &e))?;
        let req = self.grpc_request(hop, service)?;
        let max = self.prober.max_body_bytes;
        let phase = &mut self.phase;
        let call = async move {
            let resp = sender
                .send_request(req)
                .await
                .map_err(|e| hyper_failure("no gRPC answer", &e))?;
            let processing = t.elapsed();
            *phase = Phase::Transfer;
            let t = Instant::now();
            let answer = read_answer(resp, max).await?;
            Ok::<_, HopError>((answer, processing, t.elapsed()))
        };
        let (answer, processing, transfer) = beside(call, conn).await?;
        self.phases.processing += processing;
        self.phases.transfer += transfer;
        Ok(answer)
    }

    fn grpc_request(&self, hop: &Hop, service: &str) -> Result<Request<Full<Bytes>>, HopError> {
        let timeout_ms = self.plan.timeout.as_millis().clamp(1, 99_999_999);
        let mut req = Request::builder()
            .method(http::Method::POST)
            .uri(hop.target.url())
            .header(http::header::CONTENT_TYPE, "application/grpc")
            .header(http::header::TE, "trailers")
            .header(http::header::USER_AGENT, self.prober.user_agent.clone())
            .header("grpc-timeout", format!("{timeout_ms}m"))
            .body(Full::new(health_request(service)))
            .map_err(|e| {
                HopError::new(Reason::InvalidSpec, format!("cannot build request: {e}"))
            })?;
        let headers = req.headers_mut();
        if let Some(r) = &self.prober.replica_header {
            headers.insert("x-webchecker-replica", r.clone());
        }
        // Metadata: the spec's headers and auth (refused names: plan/kinds.rs).
        for (k, v) in &self.plan.headers {
            headers.insert(k.clone(), v.clone());
        }
        Ok(req)
    }
}

/// Reads an answer: its grpc-status (from the trailers, or from the head
/// of a trailers-only answer) and, when OK, its message, up to `max` bytes.
async fn read_answer(resp: http::Response<Incoming>, max: usize) -> Result<GrpcFacts, HopError> {
    let code = resp.status().as_u16();
    if code != 200 {
        return Err(HopError::new(
            Reason::ProtocolError,
            format!("not a gRPC answer: HTTP {code}"),
        ));
    }
    let grpc_type = resp
        .headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/grpc"));
    if !grpc_type {
        // The server's value is not quoted.
        return Err(HopError::new(
            Reason::ProtocolError,
            "not a gRPC answer: its content-type is not application/grpc",
        ));
    }
    let mut status = grpc_status(resp.headers().get("grpc-status"))?;
    let mut body = resp.into_body();
    let mut data = Vec::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| hyper_failure("gRPC answer broken", &e))?;
        match frame.into_data() {
            Ok(d) => {
                if data.len() + d.len() > max {
                    return Err(HopError::new(
                        Reason::ProtocolError,
                        format!("the gRPC answer is larger than {max} bytes"),
                    ));
                }
                data.extend_from_slice(&d);
            }
            Err(frame) => {
                if let Some(t) = frame.trailers_ref() {
                    status = status.or(grpc_status(t.get("grpc-status"))?);
                }
            }
        }
    }
    let status = status.ok_or_else(|| {
        HopError::new(Reason::ProtocolError, "the gRPC answer has no grpc-status")
    })?;
    let serving = match status {
        0 => Some(health_response(&data).map_err(|e| HopError::new(Reason::ProtocolError, e))?),
        _ => None,
    };
    Ok(GrpcFacts { status, serving })
}

fn grpc_status(v: Option<&HeaderValue>) -> Result<Option<u32>, HopError> {
    v.map(|v| {
        v.to_str()
            .ok()
            .and_then(|s| s.trim().parse::<u32>().ok())
            .ok_or_else(|| HopError::new(Reason::ProtocolError, "grpc-status is not a number"))
    })
    .transpose()
}

/// SERVING passes; anything else fails with the reason that names it.
fn verdict(answer: GrpcFacts, service: &str) -> Result<Passed, Stop> {
    let what = if service.is_empty() {
        "the server".to_string()
    } else {
        format!("service {service:?}")
    };
    let (reason, message) = match (answer.status, answer.serving) {
        (0, Some(Serving::Serving)) => {
            return Ok(Passed {
                code: None,
                said: format!("SERVING ({what})"),
            });
        }
        (0, Some(s @ (Serving::NotServing | Serving::Unknown))) => (
            Reason::NotServing,
            format!("{what} answered {}", s.as_str()),
        ),
        (0, _) => (
            Reason::ServiceUnknown,
            format!("{what} answered SERVICE_UNKNOWN"),
        ),
        (5, _) => (
            Reason::ServiceUnknown,
            format!("the server does not know {what} (gRPC status NOT_FOUND)"),
        ),
        (12, _) => (
            Reason::UnexpectedGrpcStatus,
            "gRPC status UNIMPLEMENTED (12): the server has no grpc.health.v1.Health service"
                .to_string(),
        ),
        (code, _) => (
            Reason::UnexpectedGrpcStatus,
            format!("gRPC status {} ({code})", status_name(code)),
        ),
    };
    Err(HopError::new(reason, message).into())
}
