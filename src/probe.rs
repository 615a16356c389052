//! The HTTP prober.
//!
//! Built on hyper's connection API rather than a pooled client, because a
//! monitoring probe must (a) open a fresh connection so connect and TLS times are
//! honest, (b) time every phase, and (c) check the address it actually connects
//! to against the forgery guard, on every redirect hop. The whole probe runs
//! under one deadline; dropping the future closes the socket.
//!
//! [`plan`] turns a spec (plus the Secret and ConfigMap values it references,
//! resolved by the caller) into a [`ProbePlan`]; [`Prober::probe`] runs one.
//! docs/probes.md describes every field and reason.

use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::StreamExt;
use futures::stream::FuturesUnordered;
use http::{HeaderMap, HeaderName, HeaderValue, Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use ipnet::IpNet;
use regex::Regex;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::api::{IpFamily, TlsVersion, WebCheckerSpec};

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
    pub fn parse(u: &url::Url) -> Result<Self, String> {
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

    fn bracketed_host(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        }
    }

    /// The Host header: the port only when it is not the scheme's default.
    pub fn authority(&self) -> String {
        let default = if self.https { 443 } else { 80 };
        if self.port == default {
            self.bracketed_host()
        } else {
            format!("{}:{}", self.bracketed_host(), self.port)
        }
    }

    /// `host:port` with the port always present (CONNECT's request target).
    fn host_port(&self) -> String {
        format!("{}:{}", self.bracketed_host(), self.port)
    }

    pub fn url(&self) -> String {
        format!(
            "{}://{}{}",
            if self.https { "https" } else { "http" },
            self.authority(),
            self.path_and_query
        )
    }

    fn same_origin(&self, other: &Target) -> bool {
        self.https == other.https
            && self.host.eq_ignore_ascii_case(&other.host)
            && self.port == other.port
    }
}

/// A value the spec takes from the cluster: one key of a Secret or of a
/// ConfigMap in the checker's namespace.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ValueRef {
    Secret { name: String, key: String },
    ConfigMap { name: String, key: String },
}

impl ValueRef {
    pub fn secret(name: &str, key: &str) -> Self {
        ValueRef::Secret {
            name: name.to_string(),
            key: key.to_string(),
        }
    }

    pub fn config_map(name: &str, key: &str) -> Self {
        ValueRef::ConfigMap {
            name: name.to_string(),
            key: key.to_string(),
        }
    }

    /// `Secret` or `ConfigMap`.
    pub fn kind(&self) -> &'static str {
        match self {
            ValueRef::Secret { .. } => "Secret",
            ValueRef::ConfigMap { .. } => "ConfigMap",
        }
    }

    pub fn name(&self) -> &str {
        match self {
            ValueRef::Secret { name, .. } | ValueRef::ConfigMap { name, .. } => name,
        }
    }

    pub fn key(&self) -> &str {
        match self {
            ValueRef::Secret { key, .. } | ValueRef::ConfigMap { key, .. } => key,
        }
    }
}

impl fmt::Display for ValueRef {
    /// Names the object and key, never the value.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {:?} key {:?}", self.kind(), self.name(), self.key())
    }
}

const CLIENT_CERT_KEY: &str = "tls.crt";
const CLIENT_KEY_KEY: &str = "tls.key";

/// Every Secret and ConfigMap key the spec references: exactly what the
/// caller must resolve before [`plan`] (in the checker's namespace).
pub fn references(spec: &WebCheckerSpec) -> Vec<ValueRef> {
    let mut out = Vec::new();
    for h in spec.headers.iter().flatten() {
        if let Some(src) = &h.value_from {
            out.push(ValueRef::secret(
                &src.secret_key_ref.name,
                &src.secret_key_ref.key,
            ));
        }
    }
    if let Some(auth) = &spec.auth {
        if let Some(b) = &auth.basic {
            let (u, p) = basic_keys(b);
            out.push(ValueRef::secret(&b.secret_name, u));
            out.push(ValueRef::secret(&b.secret_name, p));
        }
        if let Some(b) = &auth.bearer {
            out.push(ValueRef::secret(
                &b.secret_key_ref.name,
                &b.secret_key_ref.key,
            ));
        }
    }
    if let Some(tls) = &spec.tls {
        if let Some(ca) = &tls.ca_bundle {
            if let Some(r) = &ca.secret_key_ref {
                out.push(ValueRef::secret(&r.name, &r.key));
            }
            if let Some(r) = &ca.config_map_key_ref {
                out.push(ValueRef::config_map(&r.name, &r.key));
            }
        }
        if let Some(c) = &tls.client_certificate {
            out.push(ValueRef::secret(&c.secret_name, CLIENT_CERT_KEY));
            out.push(ValueRef::secret(&c.secret_name, CLIENT_KEY_KEY));
        }
    }
    out.sort();
    out.dedup();
    out
}

fn basic_keys(b: &crate::api::BasicAuth) -> (&str, &str) {
    (
        b.username_key.as_deref().unwrap_or("username"),
        b.password_key.as_deref().unwrap_or("password"),
    )
}

/// One JSON body check.
#[derive(Clone, Debug, PartialEq)]
pub struct JsonCheckPlan {
    pub pointer: String,
    pub equals: Option<String>,
}

impl JsonCheckPlan {
    /// `None` when the check passes, else why not (never the value found).
    fn failure(&self, doc: &serde_json::Value) -> Option<String> {
        let Some(found) = doc.pointer(&self.pointer) else {
            return Some(format!(
                "jsonChecks: the body has no value at {:?}",
                self.pointer
            ));
        };
        let want = self.equals.as_ref()?;
        let matches = match found {
            serde_json::Value::String(s) => s == want,
            _ => false,
        } || serde_json::from_str::<serde_json::Value>(want)
            .is_ok_and(|w| &w == found);
        if matches {
            None
        } else {
            Some(format!(
                "jsonChecks: the value at {:?} does not equal {:?}",
                self.pointer, want
            ))
        }
    }
}

/// An HTTP proxy choice.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProxyPlan {
    /// Connect to the target (the default).
    Direct,
    /// The operator's HTTP_PROXY / HTTPS_PROXY / NO_PROXY ([`Prober::env_proxy`]).
    FromEnvironment,
    /// This proxy (http://, so `https` is false; the path is ignored).
    Url(Target),
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
    pub min_version: TlsVersion,
    /// Certificates of `caBundle` (they replace the built-in roots).
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
            min_version: TlsVersion::Tls12,
            ca_certificates: 0,
            client_certificate: false,
            expiry_warning_days: None,
            config: None,
        }
    }
}

/// Everything needed to run one probe, derived once per spec (or referenced
/// value) change.
#[derive(Clone, Debug)]
pub struct ProbePlan {
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
    pub body_match: Option<(Regex, bool)>,
    pub json_checks: Vec<JsonCheckPlan>,
    pub header_checks: Vec<(HeaderName, Option<Regex>)>,
    pub follow_redirects: bool,
    pub max_redirects: u32,
    pub tls: TlsPlan,
    pub ip_family: IpFamily,
    pub proxy: ProxyPlan,
    pub failure_threshold: u32,
    pub success_threshold: u32,
    pub suspend: bool,
}

/// Strips one trailing line ending: Secret values written with `echo` or from
/// files usually carry one, and no header may contain it.
fn trim_line_end(v: &[u8]) -> &[u8] {
    let v = v.strip_suffix(b"\n").unwrap_or(v);
    v.strip_suffix(b"\r").unwrap_or(v)
}

fn sensitive_header(bytes: &[u8], what: &str) -> Result<HeaderValue, String> {
    let mut v = HeaderValue::from_bytes(trim_line_end(bytes))
        .map_err(|_| format!("{what} has characters not allowed in a header"))?;
    v.set_sensitive(true);
    Ok(v)
}

/// Standard base64 with padding (RFC 4648), for Basic authentication.
pub fn base64(input: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(input.len().div_ceil(3) * 4);
    for chunk in input.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(A[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Turns a spec into a plan. Errors are the `InvalidSpec` messages: what the
/// schema could not catch (the CRD rejects most bad input at admission), and
/// unusable referenced values. `resolve` returns the value of a Secret or
/// ConfigMap key (see [`references`]); values never appear in errors.
pub fn plan(
    spec: &WebCheckerSpec,
    resolve: &dyn Fn(&ValueRef) -> Result<Vec<u8>, String>,
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
    // `!(x >= min)` also rejects NaN.
    if !(spec.timeout_seconds >= 0.1 && spec.timeout_seconds <= 600.0)
        || spec.timeout_seconds >= f64::from(spec.interval_seconds)
    {
        return Err(
            "spec.timeoutSeconds must be between 0.1 and 600 and below spec.intervalSeconds".into(),
        );
    }
    let expected = StatusSet::parse(&spec.expected_status_codes)
        .map_err(|e| format!("spec.expectedStatusCodes: {e}"))?;
    let mut headers = Vec::new();
    for h in spec.headers.iter().flatten() {
        let name = HeaderName::from_bytes(h.name.as_bytes())
            .map_err(|_| format!("header name {:?} is not valid", h.name))?;
        let value = match (&h.value, &h.value_from) {
            (Some(v), None) => HeaderValue::from_str(v).map_err(|_| {
                format!(
                    "the value of header {:?} has characters not allowed in a header",
                    h.name
                )
            })?,
            (None, Some(src)) => {
                let r = ValueRef::secret(&src.secret_key_ref.name, &src.secret_key_ref.key);
                let bytes = resolve(&r).map_err(|e| format!("header {:?}: {e}", h.name))?;
                sensitive_header(
                    &bytes,
                    &format!("the value of header {:?} (from {r})", h.name),
                )?
            }
            _ => {
                return Err(format!(
                    "header {:?} needs exactly one of value or valueFrom",
                    h.name
                ));
            }
        };
        headers.push((name, value));
    }
    if let Some(auth) = &spec.auth {
        if headers
            .iter()
            .any(|(n, _)| n == http::header::AUTHORIZATION)
        {
            return Err("spec.auth and a header named Authorization cannot be combined".into());
        }
        let value = match (&auth.basic, &auth.bearer) {
            (Some(b), None) => {
                let (uk, pk) = basic_keys(b);
                let ur = ValueRef::secret(&b.secret_name, uk);
                let pr = ValueRef::secret(&b.secret_name, pk);
                let user = resolve(&ur).map_err(|e| format!("spec.auth.basic: {e}"))?;
                let pass = resolve(&pr).map_err(|e| format!("spec.auth.basic: {e}"))?;
                let user = trim_line_end(&user);
                if user.contains(&b':') {
                    return Err(format!(
                        "spec.auth.basic: the user name ({ur}) contains ':', which Basic authentication does not allow"
                    ));
                }
                let mut pair = user.to_vec();
                pair.push(b':');
                pair.extend_from_slice(trim_line_end(&pass));
                let mut v = HeaderValue::from_str(&format!("Basic {}", base64(&pair)))
                    .expect("base64 is a valid header value");
                v.set_sensitive(true);
                v
            }
            (None, Some(b)) => {
                let r = ValueRef::secret(&b.secret_key_ref.name, &b.secret_key_ref.key);
                let token = resolve(&r).map_err(|e| format!("spec.auth.bearer: {e}"))?;
                let mut full = b"Bearer ".to_vec();
                full.extend_from_slice(trim_line_end(&token));
                sensitive_header(&full, &format!("spec.auth.bearer: the token ({r})"))?
            }
            _ => return Err("spec.auth needs exactly one of basic or bearer".into()),
        };
        headers.push((http::header::AUTHORIZATION, value));
    }
    let body_match = match &spec.body_match {
        Some(m) => Some((
            Regex::new(&m.regex).map_err(|e| format!("spec.bodyMatch.regex is not valid: {e}"))?,
            m.invert.unwrap_or(false),
        )),
        None => None,
    };
    let mut json_checks = Vec::new();
    for c in spec.json_checks.iter().flatten() {
        if !(c.pointer.is_empty() || c.pointer.starts_with('/')) {
            return Err(format!(
                "spec.jsonChecks: pointer {:?} must be empty or start with '/'",
                c.pointer
            ));
        }
        json_checks.push(JsonCheckPlan {
            pointer: c.pointer.clone(),
            equals: c.equals.clone(),
        });
    }
    let mut header_checks = Vec::new();
    for c in spec.header_checks.iter().flatten() {
        let name = HeaderName::from_bytes(c.name.as_bytes())
            .map_err(|_| format!("spec.headerChecks: header name {:?} is not valid", c.name))?;
        let re = match &c.regex {
            Some(r) => Some(Regex::new(r).map_err(|e| {
                format!(
                    "spec.headerChecks: the regex of {:?} is not valid: {e}",
                    c.name
                )
            })?),
            None => None,
        };
        header_checks.push((name, re));
    }
    let tls = tls_plan(spec.tls.clone().unwrap_or_default(), resolve)?;
    let proxy = match &spec.proxy {
        None => ProxyPlan::Direct,
        Some(p) => match (&p.url, p.from_environment.unwrap_or(false)) {
            (Some(u), false) => {
                ProxyPlan::Url(proxy_target(u).map_err(|e| format!("spec.proxy.url {u:?}: {e}"))?)
            }
            (None, true) => ProxyPlan::FromEnvironment,
            _ => return Err("spec.proxy needs exactly one of url or fromEnvironment: true".into()),
        },
    };
    Ok(ProbePlan {
        target,
        method: spec.method.map(|m| m.as_http()).unwrap_or(Method::GET),
        headers,
        body: Bytes::from(spec.body.clone().unwrap_or_default()),
        timeout: Duration::from_secs_f64(spec.timeout_seconds),
        interval: Duration::from_secs(spec.interval_seconds as u64),
        expected,
        max_response_time: spec
            .max_response_time_millis
            .map(|ms| Duration::from_millis(ms.max(1) as u64)),
        body_match,
        json_checks,
        header_checks,
        follow_redirects: spec.follow_redirects.unwrap_or(false),
        max_redirects: spec.max_redirects.unwrap_or(5).clamp(0, 20) as u32,
        tls,
        ip_family: spec.ip_family.unwrap_or(IpFamily::Auto),
        proxy,
        failure_threshold: spec.failure_threshold.unwrap_or(1).clamp(1, 100) as u32,
        success_threshold: spec.success_threshold.unwrap_or(1).clamp(1, 100) as u32,
        suspend: spec.suspend.unwrap_or(false),
    })
}

/// Parses an http:// proxy URL (a bare `host:port` counts as http://).
pub fn proxy_target(raw: &str) -> Result<Target, String> {
    let raw = raw.trim();
    let with_scheme = if raw.contains("://") {
        raw.to_string()
    } else {
        format!("http://{raw}")
    };
    let u = url::Url::parse(&with_scheme).map_err(|e| format!("not a URL: {e}"))?;
    if u.scheme() != "http" {
        return Err(format!(
            "scheme {:?} is not supported; the proxy must be an http:// URL",
            u.scheme()
        ));
    }
    if !u.username().is_empty() || u.password().is_some() {
        return Err("proxy credentials are not supported".into());
    }
    let mut t = Target::parse(&u)?;
    t.path_and_query = "/".into();
    Ok(t)
}

fn tls_plan(
    tls: crate::api::TlsSpec,
    resolve: &dyn Fn(&ValueRef) -> Result<Vec<u8>, String>,
) -> Result<TlsPlan, String> {
    let insecure = tls.insecure_skip_verify.unwrap_or(false);
    let min_version = tls.min_version.unwrap_or(TlsVersion::Tls12);
    let mut roots = None;
    let mut ca_certificates = 0;
    if let Some(ca) = &tls.ca_bundle {
        let r = match (&ca.secret_key_ref, &ca.config_map_key_ref) {
            (Some(s), None) => ValueRef::secret(&s.name, &s.key),
            (None, Some(c)) => ValueRef::config_map(&c.name, &c.key),
            _ => {
                return Err(
                    "spec.tls.caBundle needs exactly one of secretKeyRef or configMapKeyRef".into(),
                );
            }
        };
        let pem = resolve(&r).map_err(|e| format!("spec.tls.caBundle: {e}"))?;
        let mut store = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(&pem) {
            let cert = cert.map_err(|_| format!("spec.tls.caBundle: {r} is not valid PEM"))?;
            store.add(cert).map_err(|e| {
                format!("spec.tls.caBundle: a certificate of {r} is not usable: {e}")
            })?;
            ca_certificates += 1;
        }
        if ca_certificates == 0 {
            return Err(format!(
                "spec.tls.caBundle: {r} holds no PEM certificate (-----BEGIN CERTIFICATE-----)"
            ));
        }
        roots = Some(store);
    }
    let mut client = None;
    if let Some(c) = &tls.client_certificate {
        let cr = ValueRef::secret(&c.secret_name, CLIENT_CERT_KEY);
        let kr = ValueRef::secret(&c.secret_name, CLIENT_KEY_KEY);
        let crt = resolve(&cr).map_err(|e| format!("spec.tls.clientCertificate: {e}"))?;
        let key = resolve(&kr).map_err(|e| format!("spec.tls.clientCertificate: {e}"))?;
        let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&crt)
            .collect::<Result<_, _>>()
            .map_err(|_| format!("spec.tls.clientCertificate: {cr} is not valid PEM"))?;
        if chain.is_empty() {
            return Err(format!(
                "spec.tls.clientCertificate: {cr} holds no PEM certificate"
            ));
        }
        let key = PrivateKeyDer::from_pem_slice(&key)
            .map_err(|_| format!("spec.tls.clientCertificate: {kr} holds no PEM private key"))?;
        client = Some((chain, key));
    }
    let custom = roots.is_some() || client.is_some() || min_version == TlsVersion::Tls13;
    let client_certificate = client.is_some();
    let config = if custom {
        let trust = match (insecure, roots) {
            (true, _) => Trust::AnyCertificate,
            (false, Some(store)) => Trust::Roots(store),
            (false, None) => Trust::Roots(webpki_store()),
        };
        Some(TlsConfig(Arc::new(client_config(
            trust,
            min_version,
            client,
        )?)))
    } else {
        None
    };
    Ok(TlsPlan {
        insecure_skip_verify: insecure,
        server_name: tls.server_name,
        min_version,
        ca_certificates,
        client_certificate,
        expiry_warning_days: tls
            .certificate_expiry_warning_days
            .map(|d| d.clamp(1, 3650) as u32),
        config,
    })
}

enum Trust {
    Roots(rustls::RootCertStore),
    AnyCertificate,
}

fn webpki_store() -> rustls::RootCertStore {
    let mut roots = rustls::RootCertStore::empty();
    roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    roots
}

fn client_config(
    trust: Trust,
    min_version: TlsVersion,
    client: Option<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)>,
) -> Result<rustls::ClientConfig, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let versions: &[&'static rustls::SupportedProtocolVersion] = match min_version {
        TlsVersion::Tls12 => &[&rustls::version::TLS13, &rustls::version::TLS12],
        TlsVersion::Tls13 => &[&rustls::version::TLS13],
    };
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(versions)
        .map_err(|e| format!("TLS versions not supported: {e}"))?;
    let builder = match trust {
        Trust::Roots(roots) => builder.with_root_certificates(roots),
        Trust::AnyCertificate => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AcceptAnyCert(provider))),
    };
    let mut config = match client {
        Some((chain, key)) => builder.with_client_auth_cert(chain, key).map_err(|e| {
            format!(
                "spec.tls.clientCertificate: the certificate and key are not usable together: {e}"
            )
        })?,
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

/// The proxy settings of the operator's environment (HTTP_PROXY, HTTPS_PROXY,
/// NO_PROXY, or their lower-case forms), used by `proxy.fromEnvironment`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct EnvProxy {
    pub http: Option<Result<Target, String>>,
    pub https: Option<Result<Target, String>>,
    /// Lower-cased NO_PROXY entries.
    pub no_proxy: Vec<String>,
}

impl EnvProxy {
    pub fn from_env() -> Self {
        let get = |lower: &str, upper: &str| {
            std::env::var(lower)
                .ok()
                .or_else(|| std::env::var(upper).ok())
                .filter(|v| !v.trim().is_empty())
        };
        Self::parse(
            get("http_proxy", "HTTP_PROXY").as_deref(),
            get("https_proxy", "HTTPS_PROXY").as_deref(),
            get("no_proxy", "NO_PROXY").as_deref(),
        )
    }

    pub fn parse(http: Option<&str>, https: Option<&str>, no_proxy: Option<&str>) -> Self {
        EnvProxy {
            http: http.map(proxy_target),
            https: https.map(proxy_target),
            no_proxy: no_proxy
                .unwrap_or_default()
                .split(',')
                .map(|e| e.trim().to_ascii_lowercase())
                .filter(|e| !e.is_empty())
                .collect(),
        }
    }

    fn bypass(&self, target: &Target) -> bool {
        let host = target.host.to_ascii_lowercase();
        let ip = host.parse::<IpAddr>().ok();
        self.no_proxy.iter().any(|entry| {
            if entry == "*" {
                return true;
            }
            if let (Some(ip), Ok(net)) = (ip, entry.parse::<IpNet>()) {
                return net.contains(&ip);
            }
            // Drop a port (host:port) but not the colons of an IPv6 address.
            let e = match entry.rsplit_once(':') {
                Some((h, p)) if p.chars().all(|c| c.is_ascii_digit()) && !h.contains(':') => h,
                _ => entry.as_str(),
            };
            let e = e.trim_start_matches("*.").trim_start_matches('.');
            let e = e.trim_start_matches('[').trim_end_matches(']');
            host == e || host.ends_with(&format!(".{e}"))
        })
    }

    /// The proxy for this target, if any.
    pub fn for_target(&self, target: &Target) -> Option<Result<&Target, &String>> {
        if self.bypass(target) {
            return None;
        }
        let p = if target.https {
            self.https.as_ref()
        } else {
            self.http.as_ref()
        };
        p.map(|r| r.as_ref())
    }
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
    /// Proxy settings for `proxy.fromEnvironment`, read from the environment by [`Prober::new`].
    pub env_proxy: EnvProxy,
    /// Names answered without the system resolver, like entries of /etc/hosts
    /// (empty in the operator; tests use it for dual-stack names).
    pub static_hosts: std::collections::HashMap<String, Vec<IpAddr>>,
    verified: Arc<rustls::ClientConfig>,
    unverified: Arc<rustls::ClientConfig>,
}

/// Delay before the next address is tried while a connection attempt is still
/// pending (Happy Eyeballs, RFC 8305 section 5).
pub const CONNECTION_ATTEMPT_DELAY: Duration = Duration::from_millis(250);

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

type HopError = (Failure, Option<u16>);

/// What one hop brought back.
struct Response {
    status: StatusCode,
    location: Option<String>,
    headers: HeaderMap,
    body: Vec<u8>,
    truncated: bool,
}

impl Prober {
    pub fn new(identity: Option<&str>, policy: AddressPolicy, max_body_bytes: usize) -> Self {
        let verified = client_config(Trust::Roots(webpki_store()), TlsVersion::Tls12, None)
            .expect("ring supports TLS 1.2 and 1.3");
        let unverified = client_config(Trust::AnyCertificate, TlsVersion::Tls12, None)
            .expect("ring supports TLS 1.2 and 1.3");
        Prober {
            user_agent: HeaderValue::from_str(&format!(
                "webchecker-operator/{}",
                env!("CARGO_PKG_VERSION")
            ))
            .expect("version is ASCII"),
            replica_header: identity.and_then(|i| HeaderValue::from_str(i).ok()),
            policy,
            max_body_bytes,
            env_proxy: EnvProxy::from_env(),
            static_hosts: Default::default(),
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
    ) -> Result<u16, HopError> {
        let mut target = plan.target.clone();
        let mut method = plan.method.clone();
        let mut body = plan.body.clone();
        loop {
            let resp = self
                .one_hop(plan, &target, &method, &body, phase, phases, cert)
                .await?;
            let code = resp.status.as_u16();
            if plan.follow_redirects
                && resp.status.is_redirection()
                && let Some(loc) = &resp.location
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
                let base = url::Url::parse(&target.url())
                    .map_err(|_| (fail(Reason::ProtocolError, "bad redirect base"), Some(code)))?;
                let next = base.join(loc).map_err(|_| {
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
            if !plan.expected.contains(code) {
                return Err((
                    fail(
                        Reason::UnexpectedStatus,
                        format!("HTTP {code}, not an expected status"),
                    ),
                    Some(code),
                ));
            }
            if let Some(why) = check_content(plan, &resp) {
                return Err((fail(Reason::BodyMismatch, why), Some(code)));
            }
            return Ok(code);
        }
    }

    /// The addresses of `host` allowed by `ipFamily`, interleaved by family
    /// (Auto) so a fallback to the other family comes early.
    async fn resolve(
        &self,
        host: &str,
        port: u16,
        family: IpFamily,
    ) -> Result<Vec<SocketAddr>, HopError> {
        let addrs: Vec<SocketAddr> = if let Ok(ip) = host.parse::<IpAddr>() {
            vec![SocketAddr::new(ip, port)]
        } else if let Some(ips) = self.static_hosts.get(&host.to_ascii_lowercase()) {
            ips.iter().map(|ip| SocketAddr::new(*ip, port)).collect()
        } else {
            tokio::net::lookup_host((host, port))
                .await
                .map_err(|e| {
                    (
                        fail(
                            Reason::DnsError,
                            format!("cannot resolve {host}: {}", short_io(&e)),
                        ),
                        None,
                    )
                })?
                .collect()
        };
        if addrs.is_empty() {
            return Err((
                fail(Reason::DnsError, format!("{host} has no address")),
                None,
            ));
        }
        let (v4, v6): (Vec<SocketAddr>, Vec<SocketAddr>) = addrs.iter().partition(|a| {
            // An IPv4-mapped IPv6 address is reached over IPv4.
            match a.ip() {
                IpAddr::V4(_) => true,
                IpAddr::V6(v6) => v6.to_ipv4_mapped().is_some(),
            }
        });
        let picked = match family {
            IpFamily::IPv4 => v4,
            IpFamily::IPv6 => v6,
            IpFamily::Auto => {
                let (first, second) = if addrs[0].is_ipv6() && !v6.is_empty() {
                    (v6, v4)
                } else {
                    (v4, v6)
                };
                let mut out = Vec::with_capacity(addrs.len());
                let (mut a, mut b) = (first.into_iter(), second.into_iter());
                loop {
                    match (a.next(), b.next()) {
                        (None, None) => break,
                        (x, y) => out.extend(x.into_iter().chain(y)),
                    }
                }
                out
            }
        };
        if picked.is_empty() {
            let fam = if family == IpFamily::IPv4 {
                "IPv4"
            } else {
                "IPv6"
            };
            return Err((
                fail(
                    Reason::DnsError,
                    format!("{host} has no {fam} address (spec.ipFamily {fam})"),
                ),
                None,
            ));
        }
        Ok(picked)
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
    ) -> Result<Response, HopError> {
        let proxy: Option<Target> = match &plan.proxy {
            ProxyPlan::Direct => None,
            ProxyPlan::Url(p) => Some(p.clone()),
            ProxyPlan::FromEnvironment => match self.env_proxy.for_target(target) {
                None => None,
                Some(Ok(p)) => Some(p.clone()),
                Some(Err(e)) => {
                    return Err((
                        fail(
                            Reason::InvalidSpec,
                            format!("the operator's proxy environment is not usable: {e}"),
                        ),
                        None,
                    ));
                }
            },
        };
        // Behind a proxy the proxy resolves the target's name; a literal address
        // is still checked here.
        if proxy.is_some()
            && let Ok(ip) = target.host.parse::<IpAddr>()
            && !self.policy.permits(ip)
        {
            let what = format!("{} is an address the operator may not probe", target.host);
            return Err((
                fail(Reason::Forbidden, hop_context(plan, target, what)),
                None,
            ));
        }
        let dial = proxy.as_ref().unwrap_or(target);

        phase.store(PHASE_RESOLVE, Ordering::Relaxed);
        let t = Instant::now();
        let resolved = self.resolve(&dial.host, dial.port, plan.ip_family).await;
        phases.resolve += t.elapsed();
        let addrs = resolved?;
        let allowed: Vec<SocketAddr> = addrs
            .into_iter()
            .filter(|a| self.policy.permits(a.ip()))
            .collect();
        if allowed.is_empty() {
            let who = if proxy.is_some() { "the proxy " } else { "" };
            let what = if dial.host.parse::<IpAddr>().is_ok() {
                format!(
                    "{who}{} is an address the operator may not probe",
                    dial.host
                )
            } else {
                format!(
                    "{who}{} resolves only to addresses the operator may not probe",
                    dial.host
                )
            };
            return Err((
                fail(Reason::Forbidden, hop_context(plan, target, what)),
                None,
            ));
        }

        phase.store(PHASE_CONNECT, Ordering::Relaxed);
        let t = Instant::now();
        let connected = connect_any(&allowed).await;
        let mut stream = match connected {
            Ok(s) => s,
            Err(e) => {
                phases.connect += t.elapsed();
                let what = if proxy.is_some() { "proxy " } else { "" };
                return Err((
                    fail(
                        Reason::ConnectError,
                        format!(
                            "cannot connect to {what}{}: {}",
                            dial.host_port(),
                            short_io(&e)
                        ),
                    ),
                    None,
                ));
            }
        };
        let _ = stream.set_nodelay(true);
        if proxy.is_some() && target.https {
            let r = self.connect_tunnel(&mut stream, target).await;
            phases.connect += t.elapsed();
            r.map_err(|f| (f, None))?;
        } else {
            phases.connect += t.elapsed();
        }
        let absolute_form = proxy.is_some() && !target.https;
        let send_sensitive = target.same_origin(&plan.target);

        if target.https {
            phase.store(PHASE_TLS, Ordering::Relaxed);
            let t = Instant::now();
            let config = match &plan.tls.config {
                Some(c) => c.0.clone(),
                None if plan.tls.insecure_skip_verify => self.unverified.clone(),
                None => self.verified.clone(),
            };
            let sni = plan
                .tls
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
                .connect(name, CloseOnDrop(stream))
                .await
                .map_err(|e| (tls_failure(&e), None))?;
            phases.tls += t.elapsed();
            if let Some(der) = tls.get_ref().1.peer_certificates().and_then(|c| c.first()) {
                *cert = not_after(der.as_ref());
            }
            self.exchange(
                plan,
                target,
                method,
                body,
                tls,
                phase,
                phases,
                false,
                send_sensitive,
            )
            .await
        } else {
            self.exchange(
                plan,
                target,
                method,
                body,
                CloseOnDrop(stream),
                phase,
                phases,
                absolute_form,
                send_sensitive,
            )
            .await
        }
    }

    /// Opens a CONNECT tunnel through an HTTP proxy (counted as connect time).
    async fn connect_tunnel(&self, stream: &mut TcpStream, target: &Target) -> Result<(), Failure> {
        let hp = target.host_port();
        let ua = self.user_agent.to_str().unwrap_or("webchecker-operator");
        let req = format!("CONNECT {hp} HTTP/1.1\r\nHost: {hp}\r\nUser-Agent: {ua}\r\n\r\n");
        stream.write_all(req.as_bytes()).await.map_err(|e| {
            fail(
                Reason::ConnectError,
                format!("proxy CONNECT failed: {}", short_io(&e)),
            )
        })?;
        // The target speaks only after our ClientHello, so nothing may follow
        // the proxy's answer head: read it whole, at most 16 KiB.
        let mut head = Vec::with_capacity(512);
        let mut buf = [0u8; 1024];
        loop {
            let n = stream.read(&mut buf).await.map_err(|e| {
                fail(
                    Reason::ConnectError,
                    format!("proxy CONNECT failed: {}", short_io(&e)),
                )
            })?;
            if n == 0 {
                return Err(fail(
                    Reason::ConnectError,
                    "the proxy closed the connection before answering CONNECT",
                ));
            }
            head.extend_from_slice(&buf[..n]);
            if let Some(end) = head.windows(4).position(|w| w == b"\r\n\r\n") {
                if end + 4 != head.len() {
                    return Err(fail(
                        Reason::ProtocolError,
                        "the proxy sent data after its CONNECT answer",
                    ));
                }
                break;
            }
            if head.len() > 16 * 1024 {
                return Err(fail(
                    Reason::ProtocolError,
                    "the proxy's CONNECT answer is larger than 16 KiB",
                ));
            }
        }
        let line = head.split(|b| *b == b'\n').next().unwrap_or_default();
        let line = String::from_utf8_lossy(line);
        let mut parts = line.split_whitespace();
        let code = match (parts.next(), parts.next()) {
            (Some(v), Some(c)) if v.starts_with("HTTP/1.") => c.parse::<u16>().ok(),
            _ => None,
        };
        match code {
            Some(c) if (200..300).contains(&c) => Ok(()),
            Some(c) => Err(fail(
                Reason::ConnectError,
                format!("the proxy refused CONNECT {hp}: HTTP {c}"),
            )),
            None => Err(fail(
                Reason::ProtocolError,
                "the proxy's CONNECT answer is not HTTP",
            )),
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
        absolute_form: bool,
        send_sensitive: bool,
    ) -> Result<Response, HopError>
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        phase.store(PHASE_PROCESSING, Ordering::Relaxed);
        let t = Instant::now();
        let (mut sender, conn) = hyper::client::conn::http1::Builder::new()
            .max_buf_size(64 * 1024)
            .handshake::<_, Full<Bytes>>(TokioIo::new(io))
            .await
            .map_err(|e| (hyper_failure("HTTP handshake failed", &e), None))?;
        let uri = if absolute_form {
            target.url()
        } else {
            target.path_and_query.clone()
        };
        let mut req = Request::builder()
            .method(method.clone())
            .uri(uri.as_str())
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
            // Credentials go to the checker's own origin only, not across redirects.
            if v.is_sensitive() && !send_sensitive {
                continue;
            }
            req.headers_mut().insert(k.clone(), v.clone());
        }
        let max_body = self.max_body_bytes;
        let want_body = plan.body_match.is_some() || !plan.json_checks.is_empty();
        let exchange = async move {
            let resp = sender
                .send_request(req)
                .await
                .map_err(|e| (hyper_failure("no valid HTTP response", &e), None))?;
            let processing = t.elapsed();
            phase.store(PHASE_TRANSFER, Ordering::Relaxed);
            let t2 = Instant::now();
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
                            if want_body {
                                let room = max_body.saturating_sub(kept.len());
                                kept.extend_from_slice(&data[..data.len().min(room)]);
                            }
                        }
                    }
                    Some(Err(e)) => {
                        let f = hyper_failure(
                            &format!("HTTP {}: response body broken", status.as_u16()),
                            &e,
                        );
                        return Err((f, Some(status.as_u16())));
                    }
                    None => break,
                }
            }
            Ok((
                Response {
                    status,
                    location,
                    headers: parts.headers,
                    body: kept,
                    truncated,
                },
                processing,
                t2.elapsed(),
            ))
        };
        let conn = async move {
            let _ = conn.await;
        };
        tokio::pin!(exchange);
        tokio::pin!(conn);
        let (resp, processing, transfer) = tokio::select! {
            biased;
            r = &mut exchange => r?,
            _ = &mut conn => exchange.await?,
        };
        phases.processing += processing;
        phases.transfer += transfer;
        Ok(resp)
    }
}

/// A probe connection that is closed by dropping it. hyper shuts the write
/// side down before it lets go of a `Connection: close` exchange; that is a
/// system call (with its own FIN) per probe for nothing, since the socket is
/// closed right after, which sends the FIN anyway. A profile showed it as 16%
/// of the prober's CPU time.
struct CloseOnDrop(TcpStream);

impl AsyncRead for CloseOnDrop {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl AsyncWrite for CloseOnDrop {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.0).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.0.is_write_vectored()
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }
}

/// Names the hop in a message when it is not the checker's own URL (a redirect).
fn hop_context(plan: &ProbePlan, target: &Target, message: String) -> String {
    if *target == plan.target {
        message
    } else {
        format!("redirected to {}: {message}", target.url())
    }
}

/// Opens one TCP connection to the first address that answers. Attempts start
/// in order; the next one starts when the previous failed or after
/// [`CONNECTION_ATTEMPT_DELAY`] without an answer, and the first connection
/// wins (the others are dropped).
async fn connect_any(addrs: &[SocketAddr]) -> std::io::Result<TcpStream> {
    let mut pending = FuturesUnordered::new();
    let mut next = 0;
    let mut last_err = None;
    loop {
        if pending.is_empty() {
            match addrs.get(next) {
                Some(a) => {
                    pending.push(TcpStream::connect(*a));
                    next += 1;
                }
                None => {
                    return Err(last_err.unwrap_or_else(|| {
                        std::io::Error::new(std::io::ErrorKind::NotFound, "no address")
                    }));
                }
            }
        }
        let more = next < addrs.len();
        tokio::select! {
            Some(r) = pending.next() => match r {
                Ok(s) => return Ok(s),
                Err(e) => last_err = Some(e),
            },
            _ = tokio::time::sleep(CONNECTION_ATTEMPT_DELAY), if more => {
                pending.push(TcpStream::connect(addrs[next]));
                next += 1;
            }
        }
    }
}

/// The response checks after the status: headerChecks, bodyMatch, jsonChecks.
/// Returns why the response fails them; never a body excerpt nor a header value.
fn check_content(plan: &ProbePlan, resp: &Response) -> Option<String> {
    for (name, re) in &plan.header_checks {
        let values: Vec<String> = resp
            .headers
            .get_all(name)
            .iter()
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
            .collect();
        if values.is_empty() {
            return Some(format!("headerChecks: the response has no {name} header"));
        }
        if let Some(re) = re
            && !values.iter().any(|v| re.is_match(v))
        {
            return Some(format!(
                "headerChecks: the {name} header does not match {:?}",
                re.as_str()
            ));
        }
    }
    if let Some((re, invert)) = &plan.body_match {
        let text = String::from_utf8_lossy(&resp.body);
        if re.is_match(&text) == *invert {
            return Some(if *invert {
                "response body matches bodyMatch.regex, which it must not".to_string()
            } else {
                "response body does not match bodyMatch.regex".to_string()
            });
        }
    }
    if !plan.json_checks.is_empty() {
        let doc: serde_json::Value = match serde_json::from_slice(&resp.body) {
            Ok(d) => d,
            Err(e) => {
                let cut = if resp.truncated {
                    format!(" (only the first {} bytes are read)", resp.body.len())
                } else {
                    String::new()
                };
                return Some(format!(
                    "jsonChecks: the response body is not JSON{cut}: {} at line {} column {}",
                    match e.classify() {
                        serde_json::error::Category::Eof => "unexpected end",
                        serde_json::error::Category::Syntax => "syntax error",
                        serde_json::error::Category::Data => "invalid data",
                        serde_json::error::Category::Io => "read error",
                    },
                    e.line(),
                    e.column()
                ));
            }
        };
        for c in &plan.json_checks {
            if let Some(why) = c.failure(&doc) {
                return Some(why);
            }
        }
    }
    None
}

/// The rustls error inside an I/O error, if any.
fn rustls_cause(e: &std::io::Error) -> Option<&rustls::Error> {
    e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>())
}

fn tls_failure(e: &std::io::Error) -> Failure {
    match rustls_cause(e) {
        Some(rustls::Error::InvalidCertificate(c)) => fail(
            Reason::CertificateInvalid,
            format!("server certificate rejected: {}", cert_error(c)),
        ),
        Some(other) => fail(Reason::TlsError, format!("TLS handshake failed: {other}")),
        None => fail(
            Reason::TlsError,
            format!("TLS handshake failed: {}", short_io(e)),
        ),
    }
}

fn cert_error(c: &rustls::CertificateError) -> String {
    use rustls::CertificateError as C;
    match c {
        C::NotValidForName | C::NotValidForNameContext { .. } => {
            "it is not valid for the server name".into()
        }
        C::UnknownIssuer => "issued by an unknown certificate authority".into(),
        C::Expired | C::ExpiredContext { .. } => "it has expired".into(),
        C::NotValidYet | C::NotValidYetContext { .. } => "it is not valid yet".into(),
        C::Revoked => "it is revoked".into(),
        C::BadSignature => "bad signature".into(),
        C::BadEncoding => "bad encoding".into(),
        other => format!("{other:?}").chars().take(160).collect(),
    }
}

/// Classifies a hyper error: a TLS alert or error inside becomes TLSError
/// (for example a client certificate refused after a TLS 1.3 handshake), the
/// rest ProtocolError.
fn hyper_failure(context: &str, e: &hyper::Error) -> Failure {
    let mut src = std::error::Error::source(e);
    while let Some(inner) = src {
        if let Some(io) = inner.downcast_ref::<std::io::Error>()
            && let Some(t) = rustls_cause(io)
        {
            return fail(Reason::TlsError, format!("{context}: TLS: {t}"));
        }
        src = inner.source();
    }
    fail(
        Reason::ProtocolError,
        format!("{context}: {}", hyper_cause(e)),
    )
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

    fn no_secrets(r: &ValueRef) -> Result<Vec<u8>, String> {
        Err(format!("{} {:?} not found", r.kind(), r.name()))
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
        assert_eq!(p.target.host_port(), "127.0.0.1:8443");
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
        let err = plan(&s, &|_| Ok(b"bad\nvalue-s3cr3t".to_vec())).unwrap_err();
        assert!(!err.contains("s3cr3t"), "{err}");
    }

    /// A resolver over fixed values.
    fn values(pairs: &[(ValueRef, &[u8])]) -> impl Fn(&ValueRef) -> Result<Vec<u8>, String> {
        let m: std::collections::HashMap<ValueRef, Vec<u8>> =
            pairs.iter().map(|(k, v)| (k.clone(), v.to_vec())).collect();
        move |r| {
            m.get(r)
                .cloned()
                .ok_or_else(|| format!("{} {:?} not found", r.kind(), r.name()))
        }
    }

    fn test_ca() -> (rcgen::Issuer<'static, rcgen::KeyPair>, String) {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let cert = params.self_signed(&key).unwrap();
        (rcgen::Issuer::new(params, key), cert.pem())
    }

    #[test]
    fn method_headers_and_body() {
        let p = plan(
            &spec(
                "host: http://x\nmethod: POST\nbody: '{\"a\":1}'\nheaders: [{name: X-Plain, value: v1}, {name: X-Key, valueFrom: {secretKeyRef: {name: s, key: k}}}]",
            ),
            &values(&[(ValueRef::secret("s", "k"), b"s3cr3t\n")]),
        )
        .unwrap();
        assert_eq!(p.method, Method::POST);
        assert_eq!(&p.body[..], b"{\"a\":1}");
        assert_eq!(p.headers.len(), 2);
        assert_eq!(p.headers[0].1, "v1");
        assert!(!p.headers[0].1.is_sensitive());
        assert_eq!(p.headers[1].1, "s3cr3t", "one trailing newline is dropped");
        assert!(p.headers[1].1.is_sensitive());
        assert!(!format!("{p:?}").contains("s3cr3t"), "Debug hides secrets");
    }

    #[test]
    fn missing_secret_and_key_are_named() {
        let s = spec(
            "host: http://x\nheaders: [{name: X-Key, valueFrom: {secretKeyRef: {name: api, key: token}}}]",
        );
        let err = plan(&s, &no_secrets).unwrap_err();
        assert!(err.contains("X-Key") && err.contains("\"api\""), "{err}");
        assert_eq!(references(&s), vec![ValueRef::secret("api", "token")]);
    }

    #[test]
    fn basic_auth() {
        let s = spec("host: http://x\nauth: {basic: {secretName: creds}}");
        assert_eq!(
            references(&s),
            vec![
                ValueRef::secret("creds", "password"),
                ValueRef::secret("creds", "username")
            ]
        );
        let p = plan(
            &s,
            &values(&[
                (ValueRef::secret("creds", "username"), b"Aladdin"),
                (ValueRef::secret("creds", "password"), b"open sesame\n"),
            ]),
        )
        .unwrap();
        let (name, value) = p.headers.last().unwrap();
        assert_eq!(name, http::header::AUTHORIZATION);
        // RFC 7617's example.
        assert_eq!(value, "Basic QWxhZGRpbjpvcGVuIHNlc2FtZQ==");
        assert!(value.is_sensitive());
        let s =
            spec("host: http://x\nauth: {basic: {secretName: c, usernameKey: u, passwordKey: p}}");
        let err = plan(
            &s,
            &values(&[
                (ValueRef::secret("c", "u"), b"a:b"),
                (ValueRef::secret("c", "p"), b"pw"),
            ]),
        )
        .unwrap_err();
        assert!(err.contains("':'") && !err.contains("a:b"), "{err}");
        let err = plan(&s, &values(&[(ValueRef::secret("c", "u"), b"a")])).unwrap_err();
        assert!(
            err.contains("spec.auth.basic") && err.contains("\"c\""),
            "{err}"
        );
    }

    #[test]
    fn bearer_auth_and_authorization_header_conflict() {
        let s = spec("host: http://x\nauth: {bearer: {secretKeyRef: {name: t, key: token}}}");
        let p = plan(&s, &values(&[(ValueRef::secret("t", "token"), b"abc.def")])).unwrap();
        assert_eq!(p.headers[0].1, "Bearer abc.def");
        assert!(p.headers[0].1.is_sensitive());
        let s = spec(
            "host: http://x\nheaders: [{name: authorization, value: x}]\nauth: {bearer: {secretKeyRef: {name: t, key: token}}}",
        );
        let err = plan(&s, &values(&[(ValueRef::secret("t", "token"), b"abc")])).unwrap_err();
        assert!(err.contains("cannot be combined"), "{err}");
    }

    #[test]
    fn base64_matches_rfc_4648_vectors() {
        for (i, o) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(base64(i.as_bytes()), o);
        }
    }

    #[test]
    fn json_and_header_checks() {
        let p = plan(
            &spec(
                "host: http://x\njsonChecks: [{pointer: /status, equals: ok}, {pointer: /n, equals: '42'}, {pointer: /items/0}]\nheaderChecks: [{name: X-Version, regex: '^v2'}, {name: ETag}]",
            ),
            &no_secrets,
        )
        .unwrap();
        assert_eq!(p.json_checks.len(), 3);
        assert_eq!(p.header_checks.len(), 2);
        assert!(p.header_checks[1].1.is_none());
        let doc: serde_json::Value =
            serde_json::from_str(r#"{"status":"ok","n":42,"items":[1]}"#).unwrap();
        assert!(p.json_checks.iter().all(|c| c.failure(&doc).is_none()));
        let bad: serde_json::Value =
            serde_json::from_str(r#"{"status":"degraded","n":"42"}"#).unwrap();
        let why = p.json_checks[0].failure(&bad).unwrap();
        assert!(
            why.contains("/status") && !why.contains("degraded"),
            "{why}"
        );
        assert!(
            p.json_checks[1].failure(&bad).is_none(),
            "string 42 equals '42'"
        );
        assert!(p.json_checks[2].failure(&bad).unwrap().contains("no value"));
        for y in [
            "host: http://x\njsonChecks: [{pointer: status}]",
            "host: http://x\nheaderChecks: [{name: X, regex: '('}]",
        ] {
            assert!(plan(&spec(y), &no_secrets).is_err(), "{y}");
        }
    }

    #[test]
    fn tls_options() {
        let p = plan(&spec("host: https://x"), &no_secrets).unwrap();
        assert!(p.tls.config.is_none(), "defaults share the prober's config");
        let p = plan(
            &spec("host: https://x\ntls: {minVersion: TLS13, certificateExpiryWarningDays: 30}"),
            &no_secrets,
        )
        .unwrap();
        assert_eq!(p.tls.min_version, TlsVersion::Tls13);
        assert_eq!(p.tls.expiry_warning_days, Some(30));
        assert!(p.tls.config.is_some());
        let (_, ca_pem) = test_ca();
        let s =
            spec("host: https://x\ntls: {caBundle: {configMapKeyRef: {name: ca, key: ca.crt}}}");
        assert_eq!(references(&s), vec![ValueRef::config_map("ca", "ca.crt")]);
        let p = plan(
            &s,
            &values(&[(ValueRef::config_map("ca", "ca.crt"), ca_pem.as_bytes())]),
        )
        .unwrap();
        assert_eq!(p.tls.ca_certificates, 1);
        assert!(p.tls.config.is_some());
        let err = plan(
            &s,
            &values(&[(ValueRef::config_map("ca", "ca.crt"), b"not pem")]),
        )
        .unwrap_err();
        assert!(err.contains("no PEM certificate"), "{err}");
        let s = spec("host: https://x\ntls: {caBundle: {secretKeyRef: {name: ca, key: ca.crt}}}");
        assert_eq!(references(&s), vec![ValueRef::secret("ca", "ca.crt")]);
    }

    #[test]
    fn client_certificate() {
        let (ca, _) = test_ca();
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["client".to_string()])
            .unwrap()
            .signed_by(&key, &ca)
            .unwrap();
        let s = spec("host: https://x\ntls: {clientCertificate: {secretName: mtls}}");
        assert_eq!(
            references(&s),
            vec![
                ValueRef::secret("mtls", "tls.crt"),
                ValueRef::secret("mtls", "tls.key")
            ]
        );
        let key_pem = key.serialize_pem();
        let p = plan(
            &s,
            &values(&[
                (ValueRef::secret("mtls", "tls.crt"), cert.pem().as_bytes()),
                (ValueRef::secret("mtls", "tls.key"), key_pem.as_bytes()),
            ]),
        )
        .unwrap();
        assert!(p.tls.client_certificate);
        let dbg = format!("{p:?}");
        assert!(!dbg.contains("PRIVATE KEY") && dbg.contains("TlsConfig { .. }"));
        let err = plan(
            &s,
            &values(&[
                (ValueRef::secret("mtls", "tls.crt"), cert.pem().as_bytes()),
                (ValueRef::secret("mtls", "tls.key"), b"garbage"),
            ]),
        )
        .unwrap_err();
        assert!(
            err.contains("tls.key") && err.contains("no PEM private key"),
            "{err}"
        );
    }

    #[test]
    fn ip_family_and_proxy() {
        let p = plan(&spec("host: http://x"), &no_secrets).unwrap();
        assert_eq!(
            (p.ip_family, &p.proxy),
            (IpFamily::Auto, &ProxyPlan::Direct)
        );
        let p = plan(&spec("host: http://x\nipFamily: IPv6"), &no_secrets).unwrap();
        assert_eq!(p.ip_family, IpFamily::IPv6);
        let p = plan(
            &spec("host: http://x\nproxy: {url: 'http://proxy.local:3128'}"),
            &no_secrets,
        )
        .unwrap();
        match p.proxy {
            ProxyPlan::Url(t) => assert_eq!((t.host.as_str(), t.port), ("proxy.local", 3128)),
            other => panic!("{other:?}"),
        }
        let p = plan(
            &spec("host: http://x\nproxy: {fromEnvironment: true}"),
            &no_secrets,
        )
        .unwrap();
        assert_eq!(p.proxy, ProxyPlan::FromEnvironment);
        for bad in [
            "host: http://x\nproxy: {url: 'https://p:1'}",
            "host: http://x\nproxy: {url: 'http://u:p@p:1'}",
            "host: http://x\nproxy: {}",
        ] {
            assert!(plan(&spec(bad), &no_secrets).is_err(), "{bad}");
        }
    }

    #[test]
    fn env_proxy_and_no_proxy() {
        let e = EnvProxy::parse(
            Some("proxy:3128"),
            Some("http://sproxy:8080"),
            Some("internal.example, .corp,10.0.0.0/8,localhost:8080"),
        );
        let t = |u: &str| Target::parse(&url::Url::parse(u).unwrap()).unwrap();
        let host = |r: Option<Result<&Target, &String>>| r.map(|r| r.unwrap().host.clone());
        assert_eq!(host(e.for_target(&t("http://a.b/"))), Some("proxy".into()));
        assert_eq!(
            host(e.for_target(&t("https://a.b/"))),
            Some("sproxy".into())
        );
        assert_eq!(e.for_target(&t("http://internal.example/")), None);
        assert_eq!(e.for_target(&t("http://x.internal.example/")), None);
        assert_eq!(e.for_target(&t("http://a.corp/")), None);
        assert_eq!(e.for_target(&t("http://10.1.2.3/")), None);
        assert_eq!(e.for_target(&t("http://localhost/")), None);
        assert!(e.for_target(&t("http://notinternal.example/")).is_some());
        let all = EnvProxy::parse(Some("p:1"), None, Some("*"));
        assert_eq!(all.for_target(&t("http://a.b/")), None);
        assert_eq!(
            EnvProxy::parse(None, None, None).for_target(&t("http://a/")),
            None
        );
        let bad = EnvProxy::parse(Some("socks5://p:1"), None, None);
        assert!(bad.for_target(&t("http://a/")).unwrap().is_err());
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
