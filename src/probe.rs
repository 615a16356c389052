//! The HTTP prober.
//!
//! Built on hyper's connection API rather than a pooled client, because a
//! monitoring probe must (a) open a fresh connection so connect and TLS times are
//! honest, (b) time every phase, and (c) check the address it actually connects
//! to against the forgery guard, on every redirect hop. The whole probe runs
//! under one deadline; dropping the future closes the socket.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{HeaderName, HeaderValue, Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use ipnet::IpNet;
use regex::Regex;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

use crate::api::WebCheckerSpec;

/// Why a probe ended the way it did. Also the `reason` of the Ready condition
/// and of the `webchecker_probes_total` metric.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Reason {
    ProbeSucceeded,
    DnsError,
    ConnectError,
    TlsError,
    CertificateInvalid,
    Timeout,
    UnexpectedStatus,
    BodyMismatch,
    SlowResponse,
    Forbidden,
    ProtocolError,
    InvalidSpec,
}

impl Reason {
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::ProbeSucceeded => "ProbeSucceeded",
            Reason::DnsError => "DNSError",
            Reason::ConnectError => "ConnectError",
            Reason::TlsError => "TLSError",
            Reason::CertificateInvalid => "CertificateInvalid",
            Reason::Timeout => "Timeout",
            Reason::UnexpectedStatus => "UnexpectedStatus",
            Reason::BodyMismatch => "BodyMismatch",
            Reason::SlowResponse => "SlowResponse",
            Reason::Forbidden => "Forbidden",
            Reason::ProtocolError => "ProtocolError",
            Reason::InvalidSpec => "InvalidSpec",
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
    /// notAfter of the leaf certificate, unix seconds.
    pub cert_not_after: Option<i64>,
    pub redirects: u32,
}

impl Outcome {
    pub fn success(&self) -> bool {
        self.reason == Reason::ProbeSucceeded
    }

    pub fn invalid_spec(message: impl Into<String>) -> Self {
        Outcome {
            reason: Reason::InvalidSpec,
            message: message.into(),
            status_code: None,
            duration: Duration::ZERO,
            phases: Phases::default(),
            cert_not_after: None,
            redirects: 0,
        }
    }
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
                let c: u16 = class
                    .parse()
                    .map_err(|_| format!("bad status class {item:?}"))?;
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

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    pub https: bool,
    pub host: String,
    pub port: u16,
    /// Origin-form request target: path and query.
    pub path_and_query: String,
}

impl Target {
    fn parse(u: &url::Url) -> Result<Self, String> {
        let https = match u.scheme() {
            "http" => false,
            "https" => true,
            other => return Err(format!("unsupported scheme {other:?}, use http or https")),
        };
        let host = match u.host() {
            Some(url::Host::Domain(d)) => d.to_string(),
            Some(url::Host::Ipv4(ip)) => ip.to_string(),
            Some(url::Host::Ipv6(ip)) => ip.to_string(),
            None => return Err("URL has no host".into()),
        };
        let port = u
            .port_or_known_default()
            .unwrap_or(if https { 443 } else { 80 });
        let mut path_and_query = u.path().to_string();
        if let Some(q) = u.query() {
            path_and_query.push('?');
            path_and_query.push_str(q);
        }
        Ok(Target {
            https,
            host,
            port,
            path_and_query,
        })
    }

    fn authority(&self) -> String {
        let default = if self.https { 443 } else { 80 };
        let host = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        if self.port == default {
            host
        } else {
            format!("{host}:{}", self.port)
        }
    }

    fn url(&self) -> String {
        format!(
            "{}://{}{}",
            if self.https { "https" } else { "http" },
            self.authority(),
            self.path_and_query
        )
    }
}

/// Everything needed to run one probe, derived once per spec change.
#[derive(Clone, Debug)]
pub struct ProbePlan {
    pub target: Target,
    pub method: Method,
    pub headers: Vec<(HeaderName, HeaderValue)>,
    pub body: Bytes,
    pub timeout: Duration,
    pub interval: Duration,
    pub expected: StatusSet,
    pub max_response_time: Option<Duration>,
    pub body_match: Option<(Regex, bool)>,
    pub follow_redirects: bool,
    pub max_redirects: u32,
    pub insecure_skip_verify: bool,
    pub server_name: Option<String>,
    pub failure_threshold: u32,
    pub success_threshold: u32,
    pub suspend: bool,
}

/// Turns a spec into a plan. Errors are the `InvalidSpec` messages: what the
/// schema could not catch (the CRD rejects most bad input at admission).
/// `resolve_secret` looks up a Secret key; its value never appears in errors.
pub fn plan(
    spec: &WebCheckerSpec,
    resolve_secret: &dyn Fn(&crate::api::SecretKeyRef) -> Result<String, String>,
) -> Result<ProbePlan, String> {
    let base = url::Url::parse(spec.host.trim())
        .map_err(|e| format!("spec.host {:?} is not a URL: {e}", spec.host))?;
    let path = if spec.path.is_empty() {
        "/"
    } else {
        spec.path.as_str()
    };
    if !path.starts_with('/') {
        return Err(format!("spec.path {path:?} must start with '/'"));
    }
    let full = base
        .join(path)
        .map_err(|e| format!("spec.path {path:?} is not a valid path: {e}"))?;
    let target = Target::parse(&full).map_err(|e| format!("spec.host: {e}"))?;
    if spec.interval_seconds < 1 {
        return Err("spec.intervalSeconds must be at least 1".into());
    }
    if spec.timeout_seconds < 1 || spec.timeout_seconds >= spec.interval_seconds {
        return Err("spec.timeoutSeconds must be at least 1 and below spec.intervalSeconds".into());
    }
    let expected = StatusSet::parse(&spec.expected_status_codes)
        .map_err(|e| format!("spec.expectedStatusCodes: {e}"))?;
    let mut headers = Vec::new();
    for h in spec.headers.iter().flatten() {
        let name = HeaderName::from_bytes(h.name.as_bytes())
            .map_err(|_| format!("header name {:?} is not valid", h.name))?;
        let value = match (&h.value, &h.value_from) {
            (Some(v), None) => v.clone(),
            (None, Some(src)) => resolve_secret(&src.secret_key_ref)?,
            _ => {
                return Err(format!(
                    "header {:?} needs exactly one of value or valueFrom",
                    h.name
                ));
            }
        };
        let mut value = HeaderValue::from_str(&value).map_err(|_| {
            format!(
                "the value of header {:?} has characters not allowed in a header",
                h.name
            )
        })?;
        if h.value_from.is_some() {
            value.set_sensitive(true);
        }
        headers.push((name, value));
    }
    let body_match = match &spec.body_match {
        Some(m) => Some((
            Regex::new(&m.regex).map_err(|e| format!("spec.bodyMatch.regex is not valid: {e}"))?,
            m.invert.unwrap_or(false),
        )),
        None => None,
    };
    let tls = spec.tls.clone().unwrap_or(crate::api::TlsSpec {
        insecure_skip_verify: None,
        server_name: None,
    });
    Ok(ProbePlan {
        target,
        method: spec.method.map(|m| m.as_http()).unwrap_or(Method::GET),
        headers,
        body: Bytes::from(spec.body.clone().unwrap_or_default()),
        timeout: Duration::from_secs(spec.timeout_seconds as u64),
        interval: Duration::from_secs(spec.interval_seconds as u64),
        expected,
        max_response_time: spec
            .max_response_time_millis
            .map(|ms| Duration::from_millis(ms.max(1) as u64)),
        body_match,
        follow_redirects: spec.follow_redirects.unwrap_or(false),
        max_redirects: spec.max_redirects.unwrap_or(5).clamp(0, 20) as u32,
        insecure_skip_verify: tls.insecure_skip_verify.unwrap_or(false),
        server_name: tls.server_name,
        failure_threshold: spec.failure_threshold.unwrap_or(1).clamp(1, 100) as u32,
        success_threshold: spec.success_threshold.unwrap_or(1).clamp(1, 100) as u32,
        suspend: spec.suspend.unwrap_or(false),
    })
}

/// The forgery guard: where probes may connect.
#[derive(Clone, Debug, Default)]
pub struct AddressPolicy {
    pub deny: Vec<IpNet>,
    pub allow: Vec<IpNet>,
}

impl AddressPolicy {
    pub fn permits(&self, ip: IpAddr) -> bool {
        // An IPv4-mapped IPv6 address is judged as the IPv4 address it carries.
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(ip),
            v4 => v4,
        };
        if self.deny.iter().any(|n| n.contains(&ip)) {
            return false;
        }
        self.allow.is_empty() || self.allow.iter().any(|n| n.contains(&ip))
    }
}

/// Shared, immutable prober configuration.
pub struct Prober {
    pub user_agent: HeaderValue,
    pub replica_header: Option<HeaderValue>,
    pub policy: AddressPolicy,
    pub max_body_bytes: usize,
    verified: Arc<rustls::ClientConfig>,
    unverified: Arc<rustls::ClientConfig>,
}

const PHASE_RESOLVE: u8 = 0;
const PHASE_CONNECT: u8 = 1;
const PHASE_TLS: u8 = 2;
const PHASE_PROCESSING: u8 = 3;
const PHASE_TRANSFER: u8 = 4;

fn phase_name(p: u8) -> &'static str {
    match p {
        PHASE_RESOLVE => "name resolution",
        PHASE_CONNECT => "connect",
        PHASE_TLS => "TLS handshake",
        PHASE_PROCESSING => "response headers",
        _ => "response body",
    }
}

struct Failure {
    reason: Reason,
    message: String,
}

fn fail(reason: Reason, message: impl Into<String>) -> Failure {
    Failure {
        reason,
        message: message.into(),
    }
}

impl Prober {
    pub fn new(identity: Option<&str>, policy: AddressPolicy, max_body_bytes: usize) -> Self {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = rustls::RootCertStore::empty();
        roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
        let mut verified = rustls::ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .expect("ring supports the default TLS versions")
            .with_root_certificates(roots)
            .with_no_client_auth();
        verified.alpn_protocols = vec![b"http/1.1".to_vec()];
        let mut unverified = rustls::ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .expect("ring supports the default TLS versions")
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AcceptAnyCert(provider)))
            .with_no_client_auth();
        unverified.alpn_protocols = vec![b"http/1.1".to_vec()];
        Prober {
            user_agent: HeaderValue::from_str(&format!(
                "webchecker-operator/{}",
                env!("CARGO_PKG_VERSION")
            ))
            .expect("version is ASCII"),
            replica_header: identity.and_then(|i| HeaderValue::from_str(i).ok()),
            policy,
            max_body_bytes,
            verified: Arc::new(verified),
            unverified: Arc::new(unverified),
        }
    }

    /// Runs one probe under the plan's deadline. Never panics on any target.
    pub async fn probe(&self, plan: &ProbePlan) -> Outcome {
        let started = Instant::now();
        let phase = AtomicU8::new(PHASE_RESOLVE);
        let mut phases = Phases::default();
        let mut cert = None;
        let mut redirects = 0;
        let result = tokio::time::timeout(
            plan.timeout,
            self.run(plan, &phase, &mut phases, &mut cert, &mut redirects),
        )
        .await;
        let duration = started.elapsed();
        let (reason, message, status_code) = match result {
            Ok(Ok(code)) => {
                if let Some(max) = plan.max_response_time
                    && duration > max
                {
                    (
                        Reason::SlowResponse,
                        format!(
                            "answered in {} ms, slower than maxResponseTimeMillis {}",
                            duration.as_millis(),
                            max.as_millis()
                        ),
                        Some(code),
                    )
                } else {
                    (Reason::ProbeSucceeded, format!("HTTP {code}"), Some(code))
                }
            }
            Ok(Err((f, code))) => (f.reason, f.message, code),
            Err(_) => {
                let p = phase.load(Ordering::Relaxed);
                let reason = if p == PHASE_RESOLVE {
                    Reason::DnsError
                } else {
                    Reason::Timeout
                };
                (
                    reason,
                    format!(
                        "timed out after {} during {}",
                        human_duration(plan.timeout),
                        phase_name(p)
                    ),
                    None,
                )
            }
        };
        Outcome {
            reason,
            message,
            status_code,
            duration,
            phases,
            cert_not_after: cert,
            redirects,
        }
    }

    async fn run(
        &self,
        plan: &ProbePlan,
        phase: &AtomicU8,
        phases: &mut Phases,
        cert: &mut Option<i64>,
        redirects: &mut u32,
    ) -> Result<u16, (Failure, Option<u16>)> {
        let mut target = plan.target.clone();
        let mut method = plan.method.clone();
        let mut body = plan.body.clone();
        loop {
            let (status, location) = self
                .one_hop(plan, &target, &method, &body, phase, phases, cert)
                .await?;
            let code = status.as_u16();
            if plan.follow_redirects
                && status.is_redirection()
                && let Some(loc) = location
            {
                {
                    if *redirects >= plan.max_redirects {
                        return Err((
                            fail(
                                Reason::UnexpectedStatus,
                                format!(
                                    "HTTP {code}: more than {} redirects (maxRedirects)",
                                    plan.max_redirects
                                ),
                            ),
                            Some(code),
                        ));
                    }
                    let base = url::Url::parse(&target.url()).map_err(|_| {
                        (fail(Reason::ProtocolError, "bad redirect base"), Some(code))
                    })?;
                    let next = base.join(&loc).map_err(|_| {
                        (
                            fail(
                                Reason::ProtocolError,
                                format!("HTTP {code}: invalid Location header"),
                            ),
                            Some(code),
                        )
                    })?;
                    target = Target::parse(&next).map_err(|e| {
                        (
                            fail(Reason::ProtocolError, format!("redirect: {e}")),
                            Some(code),
                        )
                    })?;
                    if code == 303 || ((code == 301 || code == 302) && method == Method::POST) {
                        method = Method::GET;
                        body = Bytes::new();
                    }
                    *redirects += 1;
                    continue;
                }
            }
            if !plan.expected.contains(code) {
                return Err((
                    fail(
                        Reason::UnexpectedStatus,
                        format!("HTTP {code}, not an expected status"),
                    ),
                    Some(code),
                ));
            }
            return Ok(code);
        }
    }

    #[allow(clippy::too_many_arguments)]
    async fn one_hop(
        &self,
        plan: &ProbePlan,
        target: &Target,
        method: &Method,
        body: &Bytes,
        phase: &AtomicU8,
        phases: &mut Phases,
        cert: &mut Option<i64>,
    ) -> Result<(StatusCode, Option<String>), (Failure, Option<u16>)> {
        phase.store(PHASE_RESOLVE, Ordering::Relaxed);
        let t = Instant::now();
        let addrs: Vec<SocketAddr> = match target.host.parse::<IpAddr>() {
            Ok(ip) => vec![SocketAddr::new(ip, target.port)],
            Err(_) => tokio::net::lookup_host((target.host.as_str(), target.port))
                .await
                .map_err(|e| {
                    (
                        fail(
                            Reason::DnsError,
                            format!("cannot resolve {}: {}", target.host, short_io(&e)),
                        ),
                        None,
                    )
                })?
                .collect(),
        };
        phases.resolve += t.elapsed();
        if addrs.is_empty() {
            return Err((
                fail(Reason::DnsError, format!("{} has no address", target.host)),
                None,
            ));
        }
        let allowed: Vec<SocketAddr> = addrs
            .into_iter()
            .filter(|a| self.policy.permits(a.ip()))
            .collect();
        if allowed.is_empty() {
            return Err((
                fail(
                    Reason::Forbidden,
                    format!(
                        "{} resolves only to addresses the operator may not probe",
                        target.host
                    ),
                ),
                None,
            ));
        }

        phase.store(PHASE_CONNECT, Ordering::Relaxed);
        let t = Instant::now();
        let mut last_err = None;
        let mut stream = None;
        for addr in &allowed {
            match TcpStream::connect(addr).await {
                Ok(s) => {
                    stream = Some(s);
                    break;
                }
                Err(e) => last_err = Some(e),
            }
        }
        phases.connect += t.elapsed();
        let stream = stream.ok_or_else(|| {
            (
                fail(
                    Reason::ConnectError,
                    format!(
                        "cannot connect to {}:{}: {}",
                        target.host,
                        target.port,
                        last_err.map(|e| short_io(&e)).unwrap_or_default()
                    ),
                ),
                None,
            )
        })?;
        let _ = stream.set_nodelay(true);

        if target.https {
            phase.store(PHASE_TLS, Ordering::Relaxed);
            let t = Instant::now();
            let config = if plan.insecure_skip_verify {
                self.unverified.clone()
            } else {
                self.verified.clone()
            };
            let sni = plan
                .server_name
                .clone()
                .unwrap_or_else(|| target.host.clone());
            let name = rustls::pki_types::ServerName::try_from(sni).map_err(|_| {
                (
                    fail(Reason::InvalidSpec, "TLS server name is not valid"),
                    None,
                )
            })?;
            let tls = tokio_rustls::TlsConnector::from(config)
                .connect(name, stream)
                .await
                .map_err(|e| (tls_failure(&e), None))?;
            phases.tls += t.elapsed();
            if let Some(der) = tls.get_ref().1.peer_certificates().and_then(|c| c.first()) {
                *cert = not_after(der.as_ref());
            }
            self.exchange(plan, target, method, body, tls, phase, phases)
                .await
        } else {
            self.exchange(plan, target, method, body, stream, phase, phases)
                .await
        }
    }

    #[allow(clippy::too_many_arguments)]
    async fn exchange<S>(
        &self,
        plan: &ProbePlan,
        target: &Target,
        method: &Method,
        body: &Bytes,
        io: S,
        phase: &AtomicU8,
        phases: &mut Phases,
    ) -> Result<(StatusCode, Option<String>), (Failure, Option<u16>)>
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        phase.store(PHASE_PROCESSING, Ordering::Relaxed);
        let t = Instant::now();
        let (mut sender, conn) = hyper::client::conn::http1::Builder::new()
            .max_buf_size(64 * 1024)
            .handshake::<_, Full<Bytes>>(TokioIo::new(io))
            .await
            .map_err(|e| {
                (
                    fail(Reason::ProtocolError, format!("HTTP handshake failed: {e}")),
                    None,
                )
            })?;
        let mut req = Request::builder()
            .method(method.clone())
            .uri(target.path_and_query.as_str())
            .header(http::header::HOST, target.authority())
            .header(http::header::USER_AGENT, self.user_agent.clone())
            .header(http::header::CONNECTION, "close")
            .body(Full::new(body.clone()))
            .map_err(|e| {
                (
                    fail(Reason::InvalidSpec, format!("cannot build request: {e}")),
                    None,
                )
            })?;
        if let Some(r) = &self.replica_header {
            req.headers_mut().insert("x-webchecker-replica", r.clone());
        }
        for (k, v) in &plan.headers {
            req.headers_mut().insert(k.clone(), v.clone());
        }
        let max_body = self.max_body_bytes;
        let want_body = plan.body_match.is_some();
        let exchange = async move {
            let resp = sender.send_request(req).await.map_err(|e| {
                (
                    fail(
                        Reason::ProtocolError,
                        format!("no valid HTTP response: {}", hyper_cause(&e)),
                    ),
                    None,
                )
            })?;
            let processing = t.elapsed();
            phase.store(PHASE_TRANSFER, Ordering::Relaxed);
            let t2 = Instant::now();
            let status = resp.status();
            let location = resp
                .headers()
                .get(http::header::LOCATION)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string);
            let mut body = resp.into_body();
            let mut kept = Vec::new();
            let mut read = 0usize;
            while read < max_body {
                match body.frame().await {
                    Some(Ok(frame)) => {
                        if let Ok(data) = frame.into_data() {
                            read += data.len();
                            if want_body {
                                let room = max_body.saturating_sub(kept.len());
                                kept.extend_from_slice(&data[..data.len().min(room)]);
                            }
                        }
                    }
                    Some(Err(e)) => {
                        return Err((
                            fail(
                                Reason::ProtocolError,
                                format!(
                                    "HTTP {}: response body broken: {}",
                                    status.as_u16(),
                                    hyper_cause(&e)
                                ),
                            ),
                            Some(status.as_u16()),
                        ));
                    }
                    None => break,
                }
            }
            Ok((status, location, kept, processing, t2.elapsed()))
        };
        let conn = async move {
            let _ = conn.await;
        };
        tokio::pin!(exchange);
        tokio::pin!(conn);
        let (status, location, kept, processing, transfer) = tokio::select! {
            biased;
            r = &mut exchange => r?,
            _ = &mut conn => exchange.await?,
        };
        phases.processing += processing;
        phases.transfer += transfer;
        if let Some((re, invert)) = &plan.body_match
            && !(plan.follow_redirects && status.is_redirection() && location.is_some())
        {
            let text = String::from_utf8_lossy(&kept);
            let found = re.is_match(&text);
            if found == *invert {
                return Err((
                    fail(
                        Reason::BodyMismatch,
                        if *invert {
                            "response body matches bodyMatch.regex, which it must not".to_string()
                        } else {
                            "response body does not match bodyMatch.regex".to_string()
                        },
                    ),
                    Some(status.as_u16()),
                ));
            }
        }
        Ok((status, location))
    }
}

fn tls_failure(e: &std::io::Error) -> Failure {
    let inner = e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>());
    match inner {
        Some(rustls::Error::InvalidCertificate(c)) => fail(
            Reason::CertificateInvalid,
            format!("server certificate rejected: {c:?}"),
        ),
        Some(other) => fail(Reason::TlsError, format!("TLS handshake failed: {other}")),
        None => fail(
            Reason::TlsError,
            format!("TLS handshake failed: {}", short_io(e)),
        ),
    }
}

fn short_io(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::ConnectionRefused => "connection refused".into(),
        std::io::ErrorKind::ConnectionReset => "connection reset".into(),
        std::io::ErrorKind::UnexpectedEof => "connection closed".into(),
        _ => {
            let s = e.to_string();
            if s.contains("failed to lookup address") || s.contains("Name or service not known") {
                "no such host".into()
            } else {
                s.chars().take(160).collect()
            }
        }
    }
}

fn hyper_cause(e: &hyper::Error) -> String {
    let mut s = e.to_string();
    let mut src = std::error::Error::source(e);
    while let Some(inner) = src {
        s = format!("{s}: {inner}");
        src = inner.source();
    }
    s.chars().take(160).collect()
}

fn not_after(der: &[u8]) -> Option<i64> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    Some(cert.validity().not_after.timestamp())
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

/// Verifier for `insecureSkipVerify`: accepts any certificate but still checks
/// the handshake signatures, so the connection is at least to the key holder.
#[derive(Debug)]
struct AcceptAnyCert(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for AcceptAnyCert {
    fn verify_server_cert(
        &self,
        _end_entity: &rustls::pki_types::CertificateDer<'_>,
        _intermediates: &[rustls::pki_types::CertificateDer<'_>],
        _server_name: &rustls::pki_types::ServerName<'_>,
        _ocsp: &[u8],
        _now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(yaml: &str) -> WebCheckerSpec {
        serde_yaml::from_str(yaml).unwrap()
    }

    fn no_secrets(r: &crate::api::SecretKeyRef) -> Result<String, String> {
        Err(format!("Secret {} not found", r.name))
    }

    #[test]
    fn seed_manifest_plans_with_seed_defaults() {
        let p = plan(&spec("host: http://flant.ru"), &no_secrets).unwrap();
        assert_eq!(p.target.host, "flant.ru");
        assert_eq!(p.target.port, 80);
        assert_eq!(p.target.path_and_query, "/");
        assert_eq!(p.interval, Duration::from_secs(10));
        assert_eq!(p.timeout, Duration::from_secs(1));
        for code in [200, 300, 301, 302, 303] {
            assert!(p.expected.contains(code), "seed success code {code}");
        }
        assert!(!p.expected.contains(404));
        assert_eq!((p.failure_threshold, p.success_threshold), (1, 1));
    }

    #[test]
    fn path_and_port_are_joined() {
        let p = plan(
            &spec("host: https://127.0.0.1:8443\npath: /health?x=1"),
            &no_secrets,
        )
        .unwrap();
        assert!(p.target.https);
        assert_eq!(p.target.port, 8443);
        assert_eq!(p.target.path_and_query, "/health?x=1");
        assert_eq!(p.target.authority(), "127.0.0.1:8443");
    }

    #[test]
    fn status_sets() {
        let s = StatusSet::parse(&["200".into(), "4xx".into(), "500-502".into()]).unwrap();
        assert!(s.contains(200) && s.contains(404) && s.contains(501));
        assert!(!s.contains(201) && !s.contains(503));
        assert!(StatusSet::parse(&["300-200".into()]).is_err());
        assert!(StatusSet::parse(&["9xx".into()]).is_err());
        assert!(StatusSet::parse(&[]).is_err());
    }

    #[test]
    fn runtime_invalid_specs_are_reported_not_panicked() {
        let bad = [
            "host: ftp://x",
            "host: http://x\nintervalSeconds: 2\ntimeoutSeconds: 2",
            "host: http://x\nbodyMatch: {regex: '('}",
            "host: http://x\nheaders: [{name: X, valueFrom: {secretKeyRef: {name: s, key: k}}}]",
            "host: 'not a url'",
        ];
        for y in bad {
            let err = plan(&spec(y), &no_secrets).unwrap_err();
            assert!(!err.is_empty(), "{y}");
        }
    }

    #[test]
    fn secret_values_stay_out_of_errors() {
        let s = spec(
            "host: http://x\nheaders: [{name: X, valueFrom: {secretKeyRef: {name: s, key: k}}}]",
        );
        let err = plan(&s, &|_| Ok("bad\nvalue-s3cr3t".into())).unwrap_err();
        assert!(!err.contains("s3cr3t"), "{err}");
    }

    #[test]
    fn policy_denies_link_local_and_mapped_addresses() {
        let p = AddressPolicy {
            deny: vec![
                "169.254.0.0/16".parse().unwrap(),
                "fe80::/10".parse().unwrap(),
            ],
            allow: vec![],
        };
        assert!(!p.permits("169.254.169.254".parse().unwrap()));
        assert!(!p.permits("::ffff:169.254.169.254".parse().unwrap()));
        assert!(!p.permits("fe80::1".parse().unwrap()));
        assert!(p.permits("127.0.0.1".parse().unwrap()));
        let only_loopback = AddressPolicy {
            deny: vec![],
            allow: vec!["127.0.0.0/8".parse().unwrap()],
        };
        assert!(only_loopback.permits("127.0.0.2".parse().unwrap()));
        assert!(!only_loopback.permits("10.0.0.1".parse().unwrap()));
    }
}
