//! The annotations a route author sets on a source object (the same for
//! every kind of source), read into settings; a bad value gives no setting
//! and a [`Problem`] naming the annotation, never a panic.

use std::collections::BTreeMap;

use super::Problem;

/// The prefix of every annotation of ours (the rest of a source object's,
/// or a Namespace's, are not kept).
pub const PREFIX: &str = "webchecker.test.network.io/";

/// `"true"` on a source object or its Namespace opts in; `"false"` on the
/// object opts out even when its Namespace opts in.
pub const CHECK: &str = "webchecker.test.network.io/check";
/// On a Namespace: `"false"` lets its sources opt in only through the
/// Namespace's own opt-in ([`CHECK`] on it); a route's (or Service's)
/// `"true"` then makes nothing. Anything else, or none: they may.
pub const ROUTES_MAY_OPT_IN: &str = "webchecker.test.network.io/routes-may-opt-in";
/// The path probed on each host (default `/`).
pub const PATH: &str = "webchecker.test.network.io/path";
/// Comma-separated status codes that count as success (`200,301-302,2xx`).
pub const EXPECTED_STATUS_CODES: &str = "webchecker.test.network.io/expected-status-codes";
/// Seconds between two probes.
pub const INTERVAL_SECONDS: &str = "webchecker.test.network.io/interval-seconds";
/// Consecutive failed probes before Ready turns False.
pub const FAILURE_THRESHOLD: &str = "webchecker.test.network.io/failure-threshold";
/// `"true"`: one checker per host and path of the rules, not per host.
pub const PER_PATH: &str = "webchecker.test.network.io/per-path";

/// Where the checkers connect: `dns` (default) the host's own addresses;
/// `gateway` (HTTPRoute, GRPCRoute) the addresses in its parent Gateways' status;
/// `load-balancer` (Ingress) the addresses in the Ingress's status
/// (`spec.connectTo`, the request still naming the host).
pub const VIA: &str = "webchecker.test.network.io/via";

/// Services only: the port probed, by name (`web`) or number (`8080`);
/// without it, the port named `http`, else the one named `https`.
pub const PORT: &str = "webchecker.test.network.io/port";
/// Services only: `http` or `https`; without it, `https` when the port is
/// named `https` (or its `appProtocol` says so), else `http`.
pub const SCHEME: &str = "webchecker.test.network.io/scheme";

/// GRPCRoutes only: the service whose health is asked (`spec.grpc.service`,
/// for example `shop.Orders`); without it, the server as a whole (`""`).
pub const GRPC_SERVICE: &str = "webchecker.test.network.io/grpc-service";

/// The Event reason of a bad annotation value.
pub const INVALID_ANNOTATION: &str = "InvalidAnnotation";

/// What a source object's annotations ask for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Settings {
    /// Its own opt-in (`Some(true)`) or opt-out (`Some(false)`).
    pub check: Option<bool>,
    pub path: Option<String>,
    pub expected_status_codes: Option<Vec<String>>,
    pub interval_seconds: Option<i32>,
    pub failure_threshold: Option<i32>,
    pub per_path: bool,
    pub via: Via,
    /// [`PORT`] (Services).
    pub port: Option<PortRef>,
    /// [`SCHEME`] (Services): `true` for https.
    pub https: Option<bool>,
    /// [`GRPC_SERVICE`] (GRPCRoutes).
    pub grpc_service: Option<String>,
}

/// A Service's port as [`PORT`] names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PortRef {
    Name(String),
    Number(i32),
}

/// The value of [`VIA`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Via {
    #[default]
    Dns,
    Gateway,
    LoadBalancer,
}

impl Via {
    pub fn as_str(self) -> &'static str {
        match self {
            Via::Dns => "dns",
            Via::Gateway => "gateway",
            Via::LoadBalancer => "load-balancer",
        }
    }
}

fn via(v: &str) -> Result<Via, String> {
    match v {
        "dns" => Ok(Via::Dns),
        "gateway" => Ok(Via::Gateway),
        "load-balancer" => Ok(Via::LoadBalancer),
        _ => Err("is not \"dns\", \"gateway\" or \"load-balancer\"".into()),
    }
}

/// The problem of a [`VIA`] value that the kind of source does not have
/// (`gateway` on an Ingress): its checkers connect through DNS.
pub fn via_not_for(kind: &str, value: Via, hint: &str) -> Problem {
    invalid(
        VIA,
        value.as_str(),
        &format!("does not apply to {} {kind} ({hint})", article(kind)),
    )
}

/// "an Ingress", "an HTTPRoute", "a Service", "a GRPCRoute".
fn article(kind: &str) -> &'static str {
    if matches!(kind, "Ingress" | "HTTPRoute") {
        "an"
    } else {
        "a"
    }
}

/// Reads the annotations of a source object.
pub fn read(annotations: &BTreeMap<String, String>) -> (Settings, Vec<Problem>) {
    let mut problems = Vec::new();
    let a = annotations;
    let p = &mut problems;
    let settings = Settings {
        check: take(a, CHECK, boolean, p),
        path: take(a, PATH, |v| plain_path(v).map(str::to_string), p),
        expected_status_codes: take(a, EXPECTED_STATUS_CODES, status_codes, p),
        interval_seconds: take(a, INTERVAL_SECONDS, |v| int_in(v, 1, 86400), p),
        failure_threshold: take(a, FAILURE_THRESHOLD, |v| int_in(v, 1, 100), p),
        per_path: take(a, PER_PATH, boolean, p).unwrap_or(false),
        via: take(a, VIA, via, p).unwrap_or_default(),
        port: take(a, PORT, port_ref, p),
        https: take(a, SCHEME, scheme, p),
        grpc_service: take(a, GRPC_SERVICE, grpc_service, p),
    };
    (settings, problems)
}

/// The value of annotation `key`, parsed; a bad one is a problem and None.
fn take<T>(
    annotations: &BTreeMap<String, String>,
    key: &'static str,
    parse: impl Fn(&str) -> Result<T, String>,
    problems: &mut Vec<Problem>,
) -> Option<T> {
    let raw = annotations.get(key)?;
    match parse(raw.trim()) {
        Ok(v) => Some(v),
        Err(why) => {
            problems.push(invalid(key, raw, &why));
            None
        }
    }
}

/// The problems of annotations that `kind` (`Ingress`, `HTTPRoute`,
/// `GRPCRoute`, `Service`, `Gateway`) does not have: [`PORT`] and [`SCHEME`] are a
/// Service's, [`GRPC_SERVICE`] a GRPCRoute's; a Service or a Gateway has
/// one checker ([`PER_PATH`]) reached at its own name or address ([`VIA`]); a
/// GRPCRoute's checkers call the gRPC health service: no path, no HTTP
/// status ([`PATH`], [`EXPECTED_STATUS_CODES`], [`PER_PATH`]). The setting
/// is then ignored.
pub fn not_for_kind(kind: &str, s: &mut Settings) -> Vec<Problem> {
    let mut problems = Vec::new();
    let mut say = |key: &str, shown: &str, why: &str| {
        problems.push(invalid(
            key,
            shown,
            &format!("does not apply to {} {kind} ({why})", article(kind)),
        ));
    };
    if matches!(kind, "Service" | "Gateway") {
        let (paths, reached) = if kind == "Service" {
            (
                "a Service has no paths",
                "a Service is probed at its own name",
            )
        } else {
            (
                "a Gateway's checker probes one path",
                "a Gateway is probed at its own address",
            )
        };
        if s.per_path {
            say(PER_PATH, "true", paths);
            s.per_path = false;
        }
        if s.via != Via::Dns {
            say(VIA, s.via.as_str(), reached);
            s.via = Via::Dns;
        }
    }
    if kind != "Service" {
        if let Some(p) = s.port.take() {
            let shown = match p {
                PortRef::Name(n) => n,
                PortRef::Number(n) => n.to_string(),
            };
            say(PORT, &shown, "a Service's annotation");
        }
        if let Some(https) = s.https.take() {
            say(
                SCHEME,
                if https { "https" } else { "http" },
                "a Service's annotation",
            );
        }
    }
    if kind == "GRPCRoute" {
        let why = "its checkers call grpc.health.v1.Health/Check; name a service with grpc-service";
        if let Some(p) = s.path.take() {
            say(PATH, &p, why);
        }
        if let Some(codes) = s.expected_status_codes.take() {
            say(
                EXPECTED_STATUS_CODES,
                &codes.join(","),
                "a gRPC check needs SERVING",
            );
        }
        if s.per_path {
            say(PER_PATH, "true", "a gRPC health check has no paths");
            s.per_path = false;
        }
    } else if let Some(svc) = s.grpc_service.take() {
        say(GRPC_SERVICE, &svc, "a GRPCRoute's annotation");
    }
    problems
}

/// Whether checkers are generated, from the object's own word (`own`),
/// its Namespace's annotations and whether the Namespace's opt-in covers
/// the object's kind (routes, not Services): an opt-out always counts; an
/// object's own opt-in only where its Namespace lets its sources opt in
/// themselves ([`ROUTES_MAY_OPT_IN`]); else the Namespace's opt-in. The
/// problem says why an object's own opt-in made nothing.
pub fn opted_in(
    own: Option<bool>,
    namespace: &BTreeMap<String, String>,
    namespace_covers: bool,
) -> (bool, Option<Problem>) {
    let by_namespace = namespace_covers && namespace.get(CHECK).is_some_and(|v| v.trim() == "true");
    let self_allowed = namespace
        .get(ROUTES_MAY_OPT_IN)
        .is_none_or(|v| v.trim() != "false");
    match own {
        Some(false) => (false, None),
        Some(true) if self_allowed || by_namespace => (true, None),
        Some(true) => {
            let why = format!(
                "is refused: its Namespace says {ROUTES_MAY_OPT_IN}: \"false\" (only the Namespace's own opt-in makes checkers there)"
            );
            (false, Some(invalid(CHECK, "true", &why)))
        }
        None => (by_namespace, None),
    }
}

/// [`opted_in`] from an object's annotations (a bad `check` value is no
/// word of its own, as [`read`] takes it).
pub fn opts_in(
    own: &BTreeMap<String, String>,
    namespace: &BTreeMap<String, String>,
    namespace_covers: bool,
) -> bool {
    let word = own.get(CHECK).and_then(|v| boolean(v.trim()).ok());
    opted_in(word, namespace, namespace_covers).0
}

pub(super) fn invalid(key: &str, raw: &str, why: &str) -> Problem {
    let shown: String = raw.chars().take(64).collect();
    Problem {
        reason: INVALID_ANNOTATION,
        subject: key.to_string(),
        message: format!(
            "annotation {key}: {shown:?} {why}; the generated checkers are made without it"
        ),
    }
}

fn boolean(v: &str) -> Result<bool, String> {
    match v {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err("is not \"true\" or \"false\"".into()),
    }
}

/// A port number (1 to 65535) or a port name (an IANA service name: at
/// most 15 characters of `a-z 0-9 -`).
fn port_ref(v: &str) -> Result<PortRef, String> {
    if v.bytes().all(|b| b.is_ascii_digit()) {
        return int_in(v, 1, 65535).map(PortRef::Number);
    }
    let name_ok = !v.is_empty()
        && v.len() <= 15
        && v.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !v.starts_with('-')
        && !v.ends_with('-');
    if name_ok {
        Ok(PortRef::Name(v.to_string()))
    } else {
        Err("is not a port number (1 to 65535) or a port name".into())
    }
}

/// A gRPC service name as the health service knows it (`shop.Orders`): at
/// most 1024 bytes (the CRD's bound), no spaces or control characters.
fn grpc_service(v: &str) -> Result<String, String> {
    if v.is_empty() {
        return Err("is empty (without the annotation the server as a whole is asked)".into());
    }
    if v.len() > 1024 {
        return Err("is longer than 1024 bytes".into());
    }
    if v.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err("contains a space or a control character".into());
    }
    Ok(v.to_string())
}

fn scheme(v: &str) -> Result<bool, String> {
    match v {
        "http" => Ok(false),
        "https" => Ok(true),
        _ => Err("is not \"http\" or \"https\"".into()),
    }
}

fn int_in(v: &str, min: i32, max: i32) -> Result<i32, String> {
    match v.parse::<i32>() {
        Ok(n) if (min..=max).contains(&n) => Ok(n),
        _ => Err(format!("is not a whole number from {min} to {max}")),
    }
}

/// A path the CRD accepts for `spec.path` (its admission rules, repeated
/// here so that a bad annotation is named on the route, not refused on
/// the checker): starts with a single `/`, no backslash, no control
/// characters, at most 2048 bytes.
pub fn plain_path(p: &str) -> Result<&str, String> {
    if !p.starts_with('/') {
        return Err("does not start with '/'".into());
    }
    if p.starts_with("//") {
        return Err("starts with '//', which a URL reads as another host".into());
    }
    if p.contains('\\') || p.chars().any(|c| c.is_control()) {
        return Err("contains a backslash or a control character".into());
    }
    if p.len() > 2048 {
        return Err("is longer than 2048 bytes".into());
    }
    Ok(p)
}

/// `200,301-302,2xx`: 1 to 64 codes, each a code, a low-high range or a class.
fn status_codes(v: &str) -> Result<Vec<String>, String> {
    let codes: Vec<String> = v.split(',').map(|c| c.trim().to_string()).collect();
    if codes.len() > 64 {
        return Err("names more than 64 codes".into());
    }
    for c in &codes {
        if !status_code(c) {
            return Err(format!(
                "has {c:?}, not a code (200), a range (200-299) or a class (2xx)"
            ));
        }
    }
    Ok(codes)
}

fn status_code(c: &str) -> bool {
    let code = |s: &str| {
        s.len() == 3
            && s.as_bytes()[0].is_ascii_digit()
            && (b'1'..=b'5').contains(&s.as_bytes()[0])
            && s.bytes().all(|b| b.is_ascii_digit())
    };
    if let Some((lo, hi)) = c.split_once('-') {
        return code(lo) && code(hi) && lo <= hi;
    }
    let class = c.len() == 3 && (b'1'..=b'5').contains(&c.as_bytes()[0]) && &c[1..] == "xx";
    code(c) || class
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ann(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn status_codes_follow_the_crd() {
        for ok in ["200", "2xx", "200-299", "500", "301-302"] {
            assert!(status_code(ok), "{ok}");
        }
        for bad in [
            "", "600", "20", "2XX", "299-200", "6xx", "abc", "200-", "-200",
        ] {
            assert!(!status_code(bad), "{bad}");
        }
    }

    #[test]
    fn the_object_decides_before_its_namespace() {
        let ns_in = ann(&[(CHECK, "true")]);
        let ns_none = ann(&[]);
        let on = |own, ns: &BTreeMap<String, String>| opted_in(own, ns, true).0;
        assert!(on(Some(true), &ns_none));
        assert!(!on(Some(false), &ns_in), "opt-out wins");
        assert!(on(None, &ns_in));
        assert!(!on(None, &ns_none));
        assert!(!on(None, &ann(&[(CHECK, "yes")])));
        assert!(
            !opted_in(None, &ns_in, false).0,
            "not a kind the Namespace covers"
        );
        assert!(opts_in(&ann(&[(CHECK, " true ")]), &ns_none, true));
        assert!(!opts_in(&ann(&[(CHECK, "yes")]), &ns_none, true));
    }

    #[test]
    fn a_namespace_may_refuse_its_routes_own_opt_in() {
        let closed = ann(&[(ROUTES_MAY_OPT_IN, "false")]);
        let (on, why) = opted_in(Some(true), &closed, true);
        assert!(!on);
        let why = why.unwrap();
        assert_eq!(why.subject, CHECK);
        assert!(why.message.contains(ROUTES_MAY_OPT_IN), "{}", why.message);
        let closed_in = ann(&[(ROUTES_MAY_OPT_IN, "false"), (CHECK, "true")]);
        assert_eq!(opted_in(Some(true), &closed_in, true), (true, None));
        assert_eq!(opted_in(None, &closed_in, true), (true, None));
        assert_eq!(opted_in(Some(false), &closed_in, true), (false, None));
        assert!(!opted_in(Some(true), &closed_in, false).0, "a Service");
        let open = ann(&[(ROUTES_MAY_OPT_IN, "true")]);
        assert!(opted_in(Some(true), &open, true).0);
    }

    #[test]
    fn bad_values_are_named_and_left_out() {
        let (s, p) = read(&ann(&[
            (CHECK, "true"),
            (INTERVAL_SECONDS, "0"),
            (FAILURE_THRESHOLD, "3"),
            (PATH, "healthz"),
        ]));
        assert_eq!(s.check, Some(true));
        assert_eq!(s.interval_seconds, None);
        assert_eq!(s.failure_threshold, Some(3));
        assert_eq!(s.path, None);
        let named: Vec<&str> = p.iter().map(|p| p.subject.as_str()).collect();
        assert_eq!(named, [PATH, INTERVAL_SECONDS]);
        assert!(p[1].message.contains("\"0\""), "{}", p[1].message);
    }
}
