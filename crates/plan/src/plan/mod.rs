//! What one probe does: the [`ProbePlan`].
//!
//! [`plan`] builds it from a WebChecker spec and the Secret and ConfigMap
//! values the spec references ([`references`]). The submodules here are the
//! only part of the prober that reads the API types; the plan itself is plain
//! data, so the prober never sees a spec.

mod build;
mod credentials;
mod kinds;
mod patterns;
mod tls;
mod values;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_kinds;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderName, HeaderValue, Method};

use super::decode::Coding;
use super::target::Target;
use webchecker_api::CheckKind;

pub use crate::tls::{Alpn, MinTlsVersion};
pub use build::{plan, plan_trusting, plan_with};
pub use credentials::base64;
pub use kinds::GRPC_HEALTH_PATH;
pub use patterns::{
    CHECKER_PATTERN_BUDGET, Compiled, PATTERN_CACHE_LIMIT, PATTERN_SIZE_LIMIT, Pattern,
    PatternError, Patterns, compile as compile_patterns, sources as pattern_sources,
};
pub use values::{ValueRef, references};

/// Everything needed to run one probe, derived once per spec (or referenced
/// value) change.
#[derive(Clone, Debug)]
pub struct ProbePlan {
    /// What the checker speaks (the scheme of `spec.host`).
    pub kind: CheckKind,
    /// What the probe says once connected.
    pub protocol: Protocol,
    /// For `https` targets (and grpcs, tls), whether TLS is spoken from the
    /// start; tcp may start it later (`startTls`).
    pub target: Target,
    pub method: Method,
    /// Request headers; values from Secrets (and `auth`) are marked sensitive
    /// and are not sent across a redirect to another origin.
    pub headers: Vec<(HeaderName, HeaderValue)>,
    pub body: Bytes,
    pub timeout: Duration,
    pub interval: Duration,
    pub expected: StatusSet,
    pub max_response_time: Option<Duration>,
    pub body_match: Option<(Pattern, bool)>,
    pub json_checks: Vec<JsonCheckPlan>,
    pub header_checks: Vec<(HeaderName, Option<Pattern>)>,
    pub follow_redirects: bool,
    pub max_redirects: u32,
    pub tls: TlsPlan,
    pub ip_family: AddressFamily,
    pub proxy: ProxyPlan,
    /// `connectTo`: the address (or name) dialled for the checker's own
    /// origin instead of its host's addresses; the request still names the
    /// host (Host, SNI).
    pub connect_to: Option<String>,
    /// The coding asked for in `Accept-Encoding` (`compression`).
    pub compression: Coding,
    pub http2: Http2,
    /// The protocols offered by ALPN in TLS handshakes with the target.
    pub alpn: Alpn,
    /// Versions a final response may have (`httpVersions`); empty: any.
    pub http_versions: Vec<http::Version>,
    pub failure_threshold: u32,
    pub success_threshold: u32,
    pub suspend: bool,
    /// `confirmFailures`: a failure that would turn Ready False is probed
    /// again by another replica first.
    pub confirm_failures: bool,
    /// `locations`: probed from this many zones every interval.
    pub locations: Option<ZoneQuorum>,
    /// `slo`: the objective its probes are counted against.
    pub slo: Option<SloTarget>,
}

/// `spec.slo`, checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SloTarget {
    /// The objective in thousandths of a percent (99900 for "99.9"): exact,
    /// where a float would print 99.89999999999999.
    pub milli_percent: u32,
    pub window: webchecker_api::SloWindow,
}

impl SloTarget {
    /// The share of good probes, 0 < target < 1.
    pub fn target(&self) -> f64 {
        f64::from(self.milli_percent) / 100_000.0
    }

    /// As a person writes it: "99.9%", "95%".
    pub fn percent(&self) -> String {
        let (whole, frac) = (self.milli_percent / 1000, self.milli_percent % 1000);
        if frac == 0 {
            return format!("{whole}%");
        }
        let frac = format!("{frac:03}");
        format!("{whole}.{}%", frac.trim_end_matches('0'))
    }
}

/// What a probe says once connected.
#[derive(Clone, Debug)]
pub enum Protocol {
    /// A request (and redirects) with the checks of the final response.
    Http,
    /// grpc.health.v1.Health/Check for `service` over HTTP/2.
    GrpcHealth { service: String },
    /// The steps of `spec.tcp.queryResponse`; none: connecting (and on
    /// tls://, the handshake) is the check.
    Tcp { steps: Vec<TcpStepPlan> },
}

/// One step of a TCP conversation.
#[derive(Clone, Debug)]
pub struct TcpStepPlan {
    pub expect: Option<Pattern>,
    pub send: Bytes,
    pub start_tls: bool,
}

impl From<Http2> for Alpn {
    fn from(h: Http2) -> Alpn {
        match h {
            Http2::Negotiate => Alpn::H2AndHttp11,
            Http2::Disabled => Alpn::Http11,
            Http2::PriorKnowledge => Alpn::H2,
        }
    }
}

/// `spec.locations`, checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ZoneQuorum {
    /// Zones that probe every interval, the owner's among them.
    pub zones: u32,
    /// Zones that must fail before Ready turns False.
    pub quorum: u32,
}

/// Accepted status codes, as inclusive ranges.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StatusSet(Vec<(u16, u16)>);

impl StatusSet {
    pub fn parse(items: &[String]) -> Result<Self, String> {
        let mut ranges = Vec::with_capacity(items.len());
        for item in items {
            let item = item.trim();
            let range = if let Some(class) = item.strip_suffix("xx") {
                // One digit, 1-5: a class such as "657xx" must not overflow.
                let c: u16 = match class.parse() {
                    Ok(c @ 1..=5) if class.len() == 1 => c,
                    _ => return Err(format!("bad status class {item:?}")),
                };
                (c * 100, c * 100 + 99)
            } else if let Some((lo, hi)) = item.split_once('-') {
                let lo: u16 = lo
                    .parse()
                    .map_err(|_| format!("bad status range {item:?}"))?;
                let hi: u16 = hi
                    .parse()
                    .map_err(|_| format!("bad status range {item:?}"))?;
                if lo > hi {
                    return Err(format!("status range {item:?} is reversed"));
                }
                (lo, hi)
            } else {
                let c: u16 = item
                    .parse()
                    .map_err(|_| format!("bad status code {item:?}"))?;
                (c, c)
            };
            if range.0 < 100 || range.1 > 599 {
                return Err(format!("status {item:?} is outside 100-599"));
            }
            ranges.push(range);
        }
        if ranges.is_empty() {
            return Err("expectedStatusCodes is empty".into());
        }
        Ok(StatusSet(ranges))
    }

    pub fn contains(&self, code: u16) -> bool {
        self.0.iter().any(|&(lo, hi)| lo <= code && code <= hi)
    }
}

/// One JSON body check.
#[derive(Clone, Debug, PartialEq)]
pub struct JsonCheckPlan {
    pub pointer: String,
    pub equals: Option<String>,
}

/// Which resolved addresses a probe may connect to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AddressFamily {
    /// Both, interleaved, the resolver's first family first.
    Auto,
    V4,
    V6,
}

/// An HTTP proxy choice.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProxyPlan {
    /// Connect to the target (the default).
    Direct,
    /// The operator's HTTP_PROXY / HTTPS_PROXY / NO_PROXY ([`super::Prober::env_proxy`]).
    FromEnvironment,
    /// This proxy (http://, so `https` is false; the path is ignored).
    Url(Target),
}

/// Whether a probe speaks HTTP/2 (`http2`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Http2 {
    /// ALPN h2 and http/1.1 over TLS; HTTP/1.1 in the clear.
    Negotiate,
    /// HTTP/1.1 only.
    Disabled,
    /// HTTP/2 without negotiation: h2c in the clear, ALPN h2 alone over TLS.
    PriorKnowledge,
}

/// A rustls client configuration of one checker (custom roots, client
/// certificate or minimum version). Its Debug never prints key material.
#[derive(Clone)]
pub struct TlsConfig(pub Arc<rustls::ClientConfig>);

impl fmt::Debug for TlsConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("TlsConfig { .. }")
    }
}

/// TLS part of a plan.
#[derive(Clone, Debug)]
pub struct TlsPlan {
    pub insecure_skip_verify: bool,
    pub server_name: Option<String>,
    pub min_version: MinTlsVersion,
    /// Certificates of `caBundle` (they replace the roots of default
    /// verification: the built-in ones and `--ca-bundle`).
    pub ca_certificates: usize,
    pub client_certificate: bool,
    pub expiry_warning_days: Option<u32>,
    /// Set when anything differs from the prober's shared configurations.
    pub config: Option<TlsConfig>,
}

impl Default for TlsPlan {
    fn default() -> Self {
        TlsPlan {
            insecure_skip_verify: false,
            server_name: None,
            min_version: MinTlsVersion::Tls12,
            ca_certificates: 0,
            client_certificate: false,
            expiry_warning_days: None,
            config: None,
        }
    }
}
