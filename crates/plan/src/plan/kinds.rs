//! The plan parts of the checks that are not HTTP (grpc://, grpcs://, tcp://,
//! tls://): their target, what they say once connected, and the HTTP fields
//! they refuse. Admission refuses the same fields (src/api.rs); this holds
//! for specs that never met the API server (tests, the bench).

use bytes::Bytes;
use http::{HeaderName, HeaderValue};

use super::patterns::Pattern;
use super::{Protocol, TcpStepPlan};
use crate::target::{Target, absolute_name};
use webchecker_api::{CheckKind, WebCheckerSpec};

/// The path of the gRPC health check's one method.
pub const GRPC_HEALTH_PATH: &str = "/grpc.health.v1.Health/Check";

/// The target of a checker of `kind` (not HTTP): scheme, host and a port,
/// nothing else.
pub fn target(spec: &WebCheckerSpec, kind: CheckKind) -> Result<Target, String> {
    let host = spec.host.trim();
    let u = url::Url::parse(host).map_err(|e| format!("spec.host {host:?} is not a URL: {e}"))?;
    if !u.username().is_empty() || u.password().is_some() {
        return Err("spec.host must not carry credentials (user:password@)".into());
    }
    if !matches!(u.path(), "" | "/") || u.query().is_some() || u.fragment().is_some() {
        return Err("spec.host must not contain a path, query or fragment".into());
    }
    if !matches!(spec.path.as_str(), "" | "/") {
        return Err(format!(
            "spec.path applies to http:// and https:// hosts only, not to {}://",
            u.scheme()
        ));
    }
    let (name, absolute) = match u.host() {
        Some(url::Host::Domain(d)) => absolute_name(&d.to_ascii_lowercase()),
        Some(url::Host::Ipv4(ip)) => (ip.to_string(), false),
        Some(url::Host::Ipv6(ip)) => (ip.to_string(), false),
        None => return Err("spec.host must name a host".into()),
    };
    // A host of a scheme the URL standard does not know is kept as written
    // (percent-encoded); such a name resolves nowhere, so say it here.
    if name.is_empty() || name.contains('%') {
        return Err(format!("spec.host {host:?} does not name a host"));
    }
    let port = u.port().ok_or_else(|| {
        format!(
            "spec.host needs a port with {}://, for example {}://{name}:443",
            u.scheme(),
            u.scheme()
        )
    })?;
    Ok(Target {
        https: matches!(u.scheme(), "grpcs" | "tls"),
        host: name,
        absolute,
        port,
        path_and_query: match kind {
            CheckKind::Grpc => GRPC_HEALTH_PATH.into(),
            _ => "/".into(),
        },
    })
}

/// The HTTP-only fields set in `spec`, by their names in the spec.
fn http_fields(spec: &WebCheckerSpec) -> Vec<&'static str> {
    let set = [
        ("method", spec.method.is_some()),
        ("body", spec.body.is_some()),
        ("bodyMatch", spec.body_match.is_some()),
        ("jsonChecks", spec.json_checks.is_some()),
        ("headerChecks", spec.header_checks.is_some()),
        ("followRedirects", spec.follow_redirects.is_some()),
        ("maxRedirects", spec.max_redirects.is_some()),
        ("proxy", spec.proxy.is_some()),
        ("compression", spec.compression.is_some()),
        ("http2", spec.http2.is_some()),
        ("httpVersions", spec.http_versions.is_some()),
    ];
    set.into_iter()
        .filter_map(|(name, on)| on.then_some(name))
        .collect()
}

/// Refuses what a checker of `kind` cannot use, naming the field.
pub fn refuse_foreign_fields(spec: &WebCheckerSpec, kind: CheckKind) -> Result<(), String> {
    let scheme = spec.host.trim().split("://").next().unwrap_or_default();
    if kind != CheckKind::Http {
        if let Some(f) = http_fields(spec).first() {
            return Err(format!(
                "spec.{f} applies to http:// and https:// hosts only, not to {scheme}://"
            ));
        }
        if spec.expected_status_codes != ["2xx", "3xx"] {
            return Err(format!(
                "spec.expectedStatusCodes applies to http:// and https:// hosts only, not to {scheme}://"
            ));
        }
    }
    let talks = matches!(kind, CheckKind::Http | CheckKind::Grpc);
    for (field, set) in [
        ("headers", spec.headers.is_some()),
        ("auth", spec.auth.is_some()),
    ] {
        if set && !talks {
            return Err(format!(
                "spec.{field} applies to http://, https://, grpc:// and grpcs:// hosts only, not to {scheme}://"
            ));
        }
    }
    if spec.grpc.is_some() && kind != CheckKind::Grpc {
        return Err(format!(
            "spec.grpc applies to grpc:// and grpcs:// hosts only, not to {scheme}://"
        ));
    }
    if spec.tcp.is_some() && !matches!(kind, CheckKind::Tcp | CheckKind::Tls) {
        return Err(format!(
            "spec.tcp applies to tcp:// and tls:// hosts only, not to {scheme}://"
        ));
    }
    Ok(())
}

/// Request metadata of a gRPC check: the spec's headers, but none that the
/// call sets itself or that HTTP/2 forbids.
pub fn grpc_metadata(headers: &[(HeaderName, HeaderValue)]) -> Result<(), String> {
    const OWN: &[&str] = &[
        "content-type",
        "te",
        "host",
        "connection",
        "keep-alive",
        "proxy-connection",
        "transfer-encoding",
        "upgrade",
    ];
    for (name, _) in headers {
        let n = name.as_str();
        if OWN.contains(&n) || n.starts_with("grpc-") {
            return Err(format!(
                "spec.headers: {n} is set by the gRPC health check itself (or not allowed in HTTP/2); remove it"
            ));
        }
    }
    Ok(())
}

/// What a checker of `kind` says once connected. `expects` are the compiled
/// `tcp.queryResponse[].expect`, in order.
pub fn protocol(
    spec: &WebCheckerSpec,
    kind: CheckKind,
    expects: &[Option<Pattern>],
) -> Result<Protocol, String> {
    Ok(match kind {
        CheckKind::Http => Protocol::Http,
        CheckKind::Grpc => Protocol::GrpcHealth {
            service: spec
                .grpc
                .as_ref()
                .and_then(|g| g.service.clone())
                .unwrap_or_default(),
        },
        CheckKind::Tcp | CheckKind::Tls => {
            let steps = spec
                .tcp
                .iter()
                .flat_map(|t| t.query_response.iter().flatten());
            let mut out = Vec::new();
            for (i, s) in steps.enumerate() {
                let start_tls = s.start_tls.unwrap_or(false);
                if start_tls && kind == CheckKind::Tls {
                    return Err(format!(
                        "spec.tcp.queryResponse[{i}].startTls upgrades a tcp:// connection; a tls:// host speaks TLS from the start"
                    ));
                }
                out.push(TcpStepPlan {
                    expect: expects.get(i).cloned().flatten(),
                    send: Bytes::from(s.send.clone().unwrap_or_default()),
                    start_tls,
                });
            }
            Protocol::Tcp { steps: out }
        }
    })
}
