//! [`plan`]: a WebChecker spec to a [`ProbePlan`].

use std::time::Duration;

use bytes::Bytes;
use http::{HeaderName, Method};

use super::credentials::request_headers;
use super::kinds;
use super::patterns::{Pattern, Patterns, compile};
use super::tls::tls_plan;
use super::values::ValueRef;
use super::{
    AddressFamily, Alpn, Http2, JsonCheckPlan, ProbePlan, ProxyPlan, SloTarget, StatusSet,
    ZoneQuorum,
};
use crate::decode::Coding;
use crate::env_proxy::proxy_target;
use crate::roots::Roots;
use crate::target::Target;
use webchecker_api::{
    CheckKind, Compression, Http2Mode, HttpVersion, IpFamily, TlsSpec, WebCheckerSpec,
    default_timeout,
};

/// Turns a spec into a plan. Errors are the `InvalidSpec` messages: what the
/// schema could not catch (the CRD rejects most bad input at admission), and
/// unusable referenced values. `resolve` returns the value of a Secret or
/// ConfigMap key (see [`super::references`]); values never appear in errors.
///
/// Compiles the spec's patterns here; the operator compiles them ahead, off
/// its engine task, and calls [`plan_with`].
pub fn plan(
    spec: &WebCheckerSpec,
    resolve: &dyn Fn(&ValueRef) -> Result<Vec<u8>, String>,
) -> Result<ProbePlan, String> {
    plan_with(spec, resolve, &compile(spec))
}

/// [`plan`] with the spec's patterns already compiled ([`super::compile_patterns`]).
/// Patterns of another spec are compiled again here.
pub fn plan_with(
    spec: &WebCheckerSpec,
    resolve: &dyn Fn(&ValueRef) -> Result<Vec<u8>, String>,
    patterns: &Result<Patterns, String>,
) -> Result<ProbePlan, String> {
    plan_trusting(spec, resolve, patterns, &Roots::builtin())
}

/// [`plan_with`] whose default verification trusts `roots` (the prober's,
/// [`crate::Prober::roots`]) rather than the built-in roots alone.
pub fn plan_trusting(
    spec: &WebCheckerSpec,
    resolve: &dyn Fn(&ValueRef) -> Result<Vec<u8>, String>,
    patterns: &Result<Patterns, String>,
    roots: &Roots,
) -> Result<ProbePlan, String> {
    // The order of the steps is the order in which errors are reported.
    let kind = CheckKind::of_host(&spec.host).unwrap_or(CheckKind::Http);
    let target = match kind {
        CheckKind::Http => target(spec)?,
        other => kinds::target(spec, other)?,
    };
    kinds::refuse_foreign_fields(spec, kind)?;
    let timeout = timeout(spec)?;
    let expected = StatusSet::parse(&spec.expected_status_codes)
        .map_err(|e| format!("spec.expectedStatusCodes: {e}"))?;
    let headers = request_headers(
        spec.headers.as_deref().unwrap_or_default(),
        spec.auth.as_ref(),
        resolve,
    )?;
    if kind == CheckKind::Grpc {
        kinds::grpc_metadata(&headers)?;
    }
    let content = content_checks(spec, patterns)?;
    let http2 = match (kind, spec.http2.unwrap_or(Http2Mode::Negotiate)) {
        (CheckKind::Grpc, _) | (_, Http2Mode::PriorKnowledge) => Http2::PriorKnowledge,
        (_, Http2Mode::Negotiate) => Http2::Negotiate,
        (_, Http2Mode::Disabled) => Http2::Disabled,
    };
    let alpn = match kind {
        CheckKind::Http | CheckKind::Grpc => Alpn::from(http2),
        CheckKind::Tcp | CheckKind::Tls => Alpn::Nothing,
    };
    let protocol = kinds::protocol(spec, kind, &content.expects)?;
    let tls = tls_plan(
        spec.tls.as_ref().unwrap_or(&TlsSpec::default()),
        alpn,
        resolve,
        roots,
    )?;
    let proxy = proxy_plan(spec)?;
    let connect_to = connect_to(spec)?;
    Ok(ProbePlan {
        kind,
        protocol,
        target,
        method: spec.method.map(|m| m.as_http()).unwrap_or(Method::GET),
        headers,
        body: Bytes::from(spec.body.clone().unwrap_or_default()),
        timeout,
        interval: Duration::from_secs(spec.interval_seconds as u64),
        expected,
        max_response_time: spec
            .max_response_time_millis
            .map(|ms| Duration::from_millis(ms.max(1) as u64)),
        body_match: content.body_match,
        json_checks: content.json_checks,
        header_checks: content.header_checks,
        follow_redirects: spec.follow_redirects.unwrap_or(false),
        max_redirects: spec.max_redirects.unwrap_or(5).clamp(0, 20) as u32,
        tls,
        ip_family: match spec.ip_family.unwrap_or(IpFamily::Auto) {
            IpFamily::Auto => AddressFamily::Auto,
            IpFamily::IPv4 => AddressFamily::V4,
            IpFamily::IPv6 => AddressFamily::V6,
        },
        proxy,
        connect_to,
        compression: compression(spec),
        http2,
        alpn,
        http_versions: http_versions(spec),
        failure_threshold: spec.failure_threshold.unwrap_or(1).clamp(1, 100) as u32,
        success_threshold: spec.success_threshold.unwrap_or(1).clamp(1, 100) as u32,
        suspend: spec.suspend.unwrap_or(false),
        confirm_failures: spec.confirm_failures.unwrap_or(true),
        locations: locations(spec)?,
        slo: slo(spec)?,
    })
}

/// `spec.slo`, as the schema's rules admit it.
fn slo(spec: &WebCheckerSpec) -> Result<Option<SloTarget>, String> {
    let Some(s) = &spec.slo else {
        return Ok(None);
    };
    let milli_percent = s.milli_percent().ok_or_else(|| {
        "spec.slo.objective must be a percentage from 1 to below 100 with at most three decimals, for example \"99.9\"".to_string()
    })?;
    Ok(Some(SloTarget {
        milli_percent,
        window: s.window,
    }))
}

/// `spec.locations`, as the schema's rules admit it (an object stored
/// before those rules fails the plan rather than probing half a quorum).
fn locations(spec: &WebCheckerSpec) -> Result<Option<ZoneQuorum>, String> {
    let Some(l) = spec.locations else {
        return Ok(None);
    };
    if !(2..=5).contains(&l.zones) {
        return Err("spec.locations.zones must be 2 to 5".into());
    }
    if l.quorum < 1 || l.quorum > l.zones {
        return Err("spec.locations.quorum must be 1 to spec.locations.zones".into());
    }
    Ok(Some(ZoneQuorum {
        zones: l.zones as u32,
        quorum: l.quorum as u32,
    }))
}

/// `spec.timeoutSeconds`, or its default for the interval; the interval is
/// checked first, since the timeout must be below it.
fn timeout(spec: &WebCheckerSpec) -> Result<Duration, String> {
    if spec.interval_seconds < 1 {
        return Err("spec.intervalSeconds must be at least 1".into());
    }
    let timeout = spec
        .timeout_seconds
        .unwrap_or_else(|| default_timeout(spec.interval_seconds));
    // `contains` is false for NaN too.
    if !(0.1..=600.0).contains(&timeout) || timeout >= f64::from(spec.interval_seconds) {
        return Err(
            "spec.timeoutSeconds must be between 0.1 and 600 and below spec.intervalSeconds".into(),
        );
    }
    Ok(Duration::from_secs_f64(timeout))
}

/// The checks of a final response's content, with their compiled patterns.
struct ContentChecks {
    body_match: Option<(Pattern, bool)>,
    json_checks: Vec<JsonCheckPlan>,
    header_checks: Vec<(HeaderName, Option<Pattern>)>,
    expects: Vec<Option<Pattern>>,
}

/// `bodyMatch`, `jsonChecks` and `headerChecks`. `patterns` compiled for
/// another spec are compiled again.
fn content_checks(
    spec: &WebCheckerSpec,
    patterns: &Result<Patterns, String>,
) -> Result<ContentChecks, String> {
    let recompiled;
    let patterns = match patterns {
        Ok(p) if !p.belong_to(spec) => {
            recompiled = compile(spec);
            &recompiled
        }
        other => other,
    };
    let patterns = patterns.as_ref().map_err(Clone::clone)?;
    let body_match = match (&spec.body_match, &patterns.body) {
        (Some(m), Some(p)) => Some((p.clone(), m.invert.unwrap_or(false))),
        _ => None,
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
        let re = patterns.headers.get(header_checks.len()).cloned().flatten();
        header_checks.push((name, re));
    }
    Ok(ContentChecks {
        body_match,
        json_checks,
        header_checks,
        expects: patterns.expects.clone(),
    })
}

/// `spec.proxy`: none, `url` or `fromEnvironment`, exactly one of the two.
fn proxy_plan(spec: &WebCheckerSpec) -> Result<ProxyPlan, String> {
    Ok(match &spec.proxy {
        None => ProxyPlan::Direct,
        Some(p) => match (&p.url, p.from_environment.unwrap_or(false)) {
            (Some(u), false) => {
                ProxyPlan::Url(proxy_target(u).map_err(|e| format!("spec.proxy.url {u:?}: {e}"))?)
            }
            (None, true) => ProxyPlan::FromEnvironment,
            _ => return Err("spec.proxy needs exactly one of url or fromEnvironment: true".into()),
        },
    })
}

/// `spec.connectTo`, as admission checks it (an object stored before its
/// rules, or written past them, fails the plan rather than dialling
/// something else): an IP address or a DNS name, never with a proxy.
fn connect_to(spec: &WebCheckerSpec) -> Result<Option<String>, String> {
    let Some(raw) = spec.connect_to.as_deref() else {
        return Ok(None);
    };
    let to = raw.trim().trim_end_matches('.');
    if spec.proxy.is_some() {
        return Err("spec.connectTo and spec.proxy cannot be combined: through a proxy, the proxy chooses where to connect".into());
    }
    let label_ok = |l: &str| {
        (1..=63).contains(&l.len())
            && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    let ok = to.parse::<std::net::IpAddr>().is_ok()
        || (!to.is_empty() && to.len() <= 253 && to.split('.').all(label_ok));
    if !ok {
        return Err(format!(
            "spec.connectTo {raw:?} must be an IP address or a host name, without scheme, port or path, for example 10.0.0.7 or gateway.example.net"
        ));
    }
    Ok(Some(to.to_ascii_lowercase()))
}

/// The coding asked for (`spec.compression`).
fn compression(spec: &WebCheckerSpec) -> Coding {
    match spec.compression.unwrap_or(Compression::Identity) {
        Compression::Identity => Coding::Identity,
        Compression::Gzip => Coding::Gzip,
        Compression::Deflate => Coding::Deflate,
        Compression::Br => Coding::Br,
        Compression::Zstd => Coding::Zstd,
    }
}

/// The versions a final response may have (`spec.httpVersions`).
fn http_versions(spec: &WebCheckerSpec) -> Vec<http::Version> {
    spec.http_versions
        .iter()
        .flatten()
        .map(|v| match v {
            HttpVersion::Http10 => http::Version::HTTP_10,
            HttpVersion::Http11 => http::Version::HTTP_11,
            HttpVersion::Http2 => http::Version::HTTP_2,
        })
        .collect()
}

/// `spec.host` joined with `spec.path`.
fn target(spec: &WebCheckerSpec) -> Result<Target, String> {
    let base = url::Url::parse(spec.host.trim())
        .map_err(|e| format!("spec.host {:?} is not a URL: {e}", spec.host))?;
    // Checked before the join, which fails on some bad hosts (mailto:) and
    // would blame the path.
    Target::parse(&base).map_err(|e| format!("spec.host: {e}"))?;
    if has_userinfo(&base) {
        return Err(HOST_USERINFO.into());
    }
    let path = if spec.path.is_empty() {
        "/"
    } else {
        spec.path.as_str()
    };
    Target::parse(&join_path(&base, path)?).map_err(|e| format!("spec.host: {e}"))
}

/// What admission says about credentials in `spec.host` (src/api.rs).
const HOST_USERINFO: &str = "spec.host must not carry credentials (user:password@); put them in a Secret and use spec.auth.basic";

fn has_userinfo(u: &url::Url) -> bool {
    !u.username().is_empty() || u.password().is_some()
}

/// `base` joined with `path`, which must stay on the origin of `base`. A URL
/// parser reads `//name/x` (and `/\name/x`, `/<tab>/name/x`: backslashes
/// count as slashes, tabs and line breaks are dropped) as another host, which
/// would take the checker's credentials and its TLS settings there and slip
/// past any admission policy on `spec.host`. Admission rejects these paths
/// already (src/api.rs); this holds for objects admitted before that.
pub fn join_path(base: &url::Url, path: &str) -> Result<url::Url, String> {
    if !path.starts_with('/') {
        return Err(format!("spec.path {path:?} must start with '/'"));
    }
    let full = base
        .join(path)
        .map_err(|e| format!("spec.path {path:?} is not a valid path: {e}"))?;
    let same = full.scheme() == base.scheme()
        && full.host() == base.host()
        && full.port_or_known_default() == base.port_or_known_default()
        && !has_userinfo(&full);
    if !same {
        return Err(format!(
            "spec.path {path:?} leaves the host of spec.host (a '//' start, a backslash, tab or line break make a URL name another host): start it with one '/'"
        ));
    }
    Ok(full)
}
