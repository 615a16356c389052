//! What a probe reports: its [`Outcome`] and the time spent in each phase.

use std::sync::Arc;
use std::time::Duration;

use super::certs::Chain;
use super::error::Reason;

/// The phase a probe is in; a timeout names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    Resolve,
    Connect,
    Tls,
    Processing,
    Transfer,
    /// The content checks, on the matching pool (matcher.rs).
    Checks,
    /// The steps of a tcp check (`spec.tcp.queryResponse`).
    Steps,
}

impl Phase {
    /// For "timed out during ...".
    pub fn describe(self) -> &'static str {
        match self {
            Phase::Resolve => "name resolution",
            Phase::Connect => "connect",
            Phase::Tls => "TLS handshake",
            Phase::Processing => "response headers",
            Phase::Transfer => "response body",
            Phase::Steps => {
                "the steps of spec.tcp.queryResponse (the server did not send a matching line)"
            }
            Phase::Checks => {
                "the response checks (headerChecks, bodyMatch, jsonChecks: their patterns are too slow for this response, or wait behind other checks of this namespace)"
            }
        }
    }
}

/// Phase timings of one probe (summed over redirect hops).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Phases {
    pub resolve: Duration,
    pub connect: Duration,
    pub tls: Duration,
    /// Request sent to response headers received (time to first byte).
    pub processing: Duration,
    /// Response headers to the end of the (capped) body.
    pub transfer: Duration,
}

impl Phases {
    pub fn named(&self) -> [(&'static str, Duration); 5] {
        [
            ("resolve", self.resolve),
            ("connect", self.connect),
            ("tls", self.tls),
            ("processing", self.processing),
            ("transfer", self.transfer),
        ]
    }
}

/// Result of one probe.
#[derive(Clone, Debug, PartialEq)]
pub struct Outcome {
    pub reason: Reason,
    /// Short, human-readable; never a response body nor a header value.
    pub message: String,
    pub status_code: Option<u16>,
    pub duration: Duration,
    pub phases: Phases,
    /// The earliest notAfter of the server's certificate chain (of the last
    /// TLS handshake), unix seconds.
    pub cert_not_after: Option<i64>,
    /// What the last TLS handshake showed; `None` when there was none.
    pub tls: Option<TlsFacts>,
    /// The HTTP version of the final response; `None` when none came.
    pub http_version: Option<http::Version>,
    pub redirects: u32,
    /// What a gRPC health check answered; `None` for other checks, and
    /// when no gRPC answer came.
    pub grpc: Option<GrpcFacts>,
}

/// The answer of a gRPC health check.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GrpcFacts {
    /// The call's grpc-status: 0 (OK) when the server answered the check.
    pub status: u32,
    /// The health status it answered; `None` when the call failed.
    pub serving: Option<Serving>,
}

/// A `grpc.health.v1.HealthCheckResponse.ServingStatus`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Serving {
    Unknown,
    Serving,
    NotServing,
    ServiceUnknown,
}

impl Serving {
    pub const ALL: [Serving; 4] = [
        Serving::Unknown,
        Serving::Serving,
        Serving::NotServing,
        Serving::ServiceUnknown,
    ];

    /// The enum's name in the protocol (and blackbox_exporter's label value).
    pub fn as_str(self) -> &'static str {
        match self {
            Serving::Unknown => "UNKNOWN",
            Serving::Serving => "SERVING",
            Serving::NotServing => "NOT_SERVING",
            Serving::ServiceUnknown => "SERVICE_UNKNOWN",
        }
    }
}

/// What one TLS handshake showed.
#[derive(Clone, Debug, PartialEq)]
pub struct TlsFacts {
    /// `TLS 1.2` or `TLS 1.3`.
    pub version: &'static str,
    /// rustls's name of the cipher suite, for example `TLS13_AES_128_GCM_SHA256`.
    pub cipher: &'static str,
    /// `None` when the leaf certificate could not be parsed.
    pub chain: Option<Arc<Chain>>,
}

impl Outcome {
    pub fn success(&self) -> bool {
        self.reason == Reason::ProbeSucceeded
    }

    /// What a success says in the Ready condition: what the server said
    /// (`HTTP 200`, `SERVING (the server overall)`, ...) and how long it took.
    pub fn success_summary(&self) -> String {
        let said = match (self.message.is_empty(), self.status_code) {
            (false, _) => self.message.clone(),
            (true, Some(code)) => format!("HTTP {code}"),
            (true, None) => "succeeded".to_string(),
        };
        format!("{said} in {}", human_duration(self.duration))
    }

    pub fn invalid_spec(message: impl Into<String>) -> Self {
        Outcome {
            reason: Reason::InvalidSpec,
            message: message.into(),
            status_code: None,
            duration: Duration::ZERO,
            phases: Phases::default(),
            cert_not_after: None,
            tls: None,
            http_version: None,
            redirects: 0,
            grpc: None,
        }
    }
}

pub fn human_duration(d: Duration) -> String {
    if d.as_millis() < 1000 {
        format!("{}ms", d.as_millis())
    } else if d.subsec_millis() == 0 {
        format!("{}s", d.as_secs())
    } else {
        format!("{:.1}s", d.as_secs_f64())
    }
}

/// `HTTP/1.0`, `HTTP/1.1`, `HTTP/2` (as `httpVersions` writes them).
pub fn version_name(v: http::Version) -> &'static str {
    match v {
        http::Version::HTTP_09 => "HTTP/0.9",
        http::Version::HTTP_10 => "HTTP/1.0",
        http::Version::HTTP_11 => "HTTP/1.1",
        http::Version::HTTP_2 => "HTTP/2",
        http::Version::HTTP_3 => "HTTP/3",
        _ => "unknown",
    }
}
