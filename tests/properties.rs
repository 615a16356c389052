//! Property tests of the pure paths: spec to probe plan, status reducer. No
//! input may make them panic, a spec the schema accepts always plans, one bad
//! field always gives an InvalidSpec message naming it, and the reducer keeps
//! its promises on any sequence of outcomes.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::{Duration, Instant};

use proptest::prelude::*;
use serde_json::{Map, Value, json};
use webchecker::api::WebCheckerSpec;
use webchecker::engine::status::{CheckerStatus, Context, Truth};
use webchecker::probe::{Outcome, Phases, Reason, StatusSet, ValueRef, plan};

const REASONS: &[Reason] = &[
    Reason::ProbeSucceeded,
    Reason::DnsError,
    Reason::ConnectError,
    Reason::TlsError,
    Reason::CertificateInvalid,
    Reason::Timeout,
    Reason::CheckTimeout,
    Reason::UnexpectedStatus,
    Reason::UnexpectedHttpVersion,
    Reason::BodyMismatch,
    Reason::SlowResponse,
    Reason::Forbidden,
    Reason::ProtocolError,
];

fn outcome(reason: Reason, code: Option<u16>) -> Outcome {
    Outcome {
        reason,
        message: format!("{reason:?}"),
        status_code: code,
        duration: Duration::from_millis(3),
        phases: Phases::default(),
        cert_not_after: None,
        tls: None,
        http_version: None,
        redirects: 0,
        grpc: None,
    }
}

// ============================================================== specs

/// Every referenced value resolves (to something that is not PEM), except
/// those of a Secret named `missing`.
fn values(r: &ValueRef) -> Result<Vec<u8>, String> {
    if r.name() == "missing" {
        Err(format!("{} {:?} not found", r.kind(), r.name()))
    } else {
        Ok(b"v4lue\n".to_vec())
    }
}

#[derive(Clone, Debug)]
enum Host {
    Name(String),
    V4(Ipv4Addr),
    V6(Ipv6Addr),
}

/// A spec the schema accepts, and what its plan must say.
#[derive(Clone, Debug)]
struct Valid {
    spec: Map<String, Value>,
    https: bool,
    host: Host,
    port: Option<u16>,
    path_and_query: String,
    interval: i32,
    /// One code each expectedStatusCodes item accepts.
    codes: Vec<u16>,
    /// Request headers the plan carries (`headers`, plus one for `auth`).
    headers: usize,
}

fn host() -> impl Strategy<Value = Host> {
    prop_oneof![
        // Labels start with a letter, so the last one never reads as IPv4.
        3 => proptest::collection::vec("[a-zA-Z][a-zA-Z0-9]{0,7}(-[a-zA-Z0-9]{1,4})?", 1..4)
            .prop_map(|l| Host::Name(l.join("."))),
        1 => any::<[u8; 4]>().prop_map(|o| Host::V4(Ipv4Addr::from(o))),
        1 => any::<[u16; 8]>().prop_map(|s| Host::V6(Ipv6Addr::from(s))),
    ]
}

/// An expectedStatusCodes item and one code it accepts.
fn status_item() -> impl Strategy<Value = (String, u16)> {
    prop_oneof![
        (100u16..600).prop_map(|c| (c.to_string(), c)),
        (1u16..6, 0u16..100).prop_map(|(k, d)| (format!("{k}xx"), k * 100 + d)),
        (100u16..600, 0u16..100).prop_map(|(lo, d)| {
            let hi = (lo + d).min(599);
            (format!("{lo}-{hi}"), hi)
        }),
    ]
}

fn header() -> impl Strategy<Value = Value> {
    prop_oneof![
        ("x-[a-z0-9-]{1,12}", "[ -~]{0,20}").prop_map(|(n, v)| json!({"name": n, "value": v})),
        ("x-[a-z0-9-]{1,12}", "[a-z]{1,8}", "[a-z.]{1,8}").prop_map(|(n, s, k)| {
            json!({"name": n, "valueFrom": {"secretKeyRef": {"name": s, "key": k}}})
        }),
    ]
}

/// A valid `tls`.
fn tls() -> impl Strategy<Value = Value> {
    (
        any::<bool>(),
        proptest::option::of("[a-z]{1,8}\\.example"),
        proptest::sample::select(vec!["TLS12", "TLS13"]),
        proptest::option::of(1i32..=3650),
    )
        .prop_map(|(insecure, name, min, days)| {
            json!({"insecureSkipVerify": insecure, "serverName": name, "minVersion": min,
                   "certificateExpiryWarningDays": days})
        })
}

/// A valid `proxy`: a URL (with or without its scheme) or the environment's.
fn proxy() -> impl Strategy<Value = Value> {
    prop_oneof![
        ("[a-z]{1,8}", 1u16..=65535)
            .prop_map(|(h, p)| json!({"url": format!("http://{h}.local:{p}")})),
        ("[a-z]{1,8}", 1u16..=65535).prop_map(|(h, p)| json!({"url": format!("{h}:{p}")})),
        Just(json!({"fromEnvironment": true})),
    ]
}

/// The optional response checks (`bodyMatch`, `jsonChecks`, `headerChecks`),
/// each absent or valid.
fn checks() -> impl Strategy<Value = Map<String, Value>> {
    (
        proptest::option::of(("\\PC{1,12}", any::<bool>())),
        proptest::option::of(proptest::collection::vec(
            ("(/[a-z0-9~]{1,5}){0,3}", proptest::option::of("\\PC{0,8}")),
            0..4,
        )),
        proptest::option::of(proptest::collection::vec(
            ("x-[a-z]{1,8}", proptest::option::of("\\PC{1,8}")),
            0..4,
        )),
    )
        .prop_map(|(body, json_checks, header_checks)| {
            let mut m = Map::new();
            if let Some((text, invert)) = body {
                m.insert(
                    "bodyMatch".into(),
                    json!({"regex": regex::escape(&text), "invert": invert}),
                );
            }
            if let Some(c) = json_checks {
                let c: Vec<Value> = c
                    .into_iter()
                    .map(|(p, e)| json!({"pointer": p, "equals": e}))
                    .collect();
                m.insert("jsonChecks".into(), c.into());
            }
            if let Some(c) = header_checks {
                let c: Vec<Value> = c
                    .into_iter()
                    .map(|(n, r)| json!({"name": n, "regex": r.map(|r| regex::escape(&r))}))
                    .collect();
                m.insert("headerChecks".into(), c.into());
            }
            m
        })
}

/// The optional fields, each absent or valid.
fn options() -> impl Strategy<Value = Map<String, Value>> {
    let method = proptest::sample::select(vec![
        "GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS",
    ]);
    let auth = prop_oneof![
        Just(json!({"basic": {"secretName": "creds"}})),
        Just(json!({"basic": {"secretName": "c", "usernameKey": "u", "passwordKey": "p"}})),
        Just(json!({"bearer": {"secretKeyRef": {"name": "t", "key": "token"}}})),
    ];
    let (tls, proxy, checks) = (tls(), proxy(), checks());
    let numbers = (
        proptest::option::of(1i32..=600_000),
        proptest::option::of(1i32..=100),
        proptest::option::of(1i32..=100),
        proptest::option::of(0i32..=20),
        proptest::option::of(any::<bool>()),
        proptest::option::of(any::<bool>()),
    );
    (
        proptest::option::of(method),
        proptest::option::of("\\PC{0,40}"),
        proptest::option::of(auth),
        proptest::option::of(tls),
        proptest::option::of(proxy),
        proptest::option::of(proptest::sample::select(vec!["Auto", "IPv4", "IPv6"])),
        checks,
        numbers,
    )
        .prop_map(
            |(method, body, auth, tls, proxy, family, checks, numbers)| {
                let (max_ms, failure, success, max_redirects, follow, suspend) = numbers;
                let mut m = checks;
                for (k, v) in [
                    ("method", method.map(Value::from)),
                    ("body", body.map(Value::from)),
                    ("auth", auth),
                    ("tls", tls),
                    ("proxy", proxy),
                    ("ipFamily", family.map(Value::from)),
                    ("maxResponseTimeMillis", max_ms.map(Value::from)),
                    ("failureThreshold", failure.map(Value::from)),
                    ("successThreshold", success.map(Value::from)),
                    ("maxRedirects", max_redirects.map(Value::from)),
                    ("followRedirects", follow.map(Value::from)),
                    ("suspend", suspend.map(Value::from)),
                ] {
                    if let Some(v) = v {
                        m.insert(k.into(), v);
                    }
                }
                m
            },
        )
}

prop_compose! {
    fn valid_spec()(
        https in any::<bool>(),
        host in host(),
        port in proptest::option::of(1u16..=65535),
        path in "/|(/[A-Za-z0-9_~-]{1,8}){1,4}/?",
        query in proptest::option::of("[a-z0-9]{1,5}=[A-Za-z0-9]{0,5}"),
        interval in 1i32..=86400,
        timeout_share in 0.0f64..0.99,
        codes in proptest::collection::vec(status_item(), 1..5),
        headers in proptest::collection::vec(header(), 0..5),
        options in options(),
    ) -> Valid {
        let scheme = if https { "https" } else { "http" };
        let host_text = match &host {
            Host::Name(n) => n.clone(),
            Host::V4(ip) => ip.to_string(),
            Host::V6(ip) => format!("[{ip}]"),
        };
        let port_text = port.map(|p| format!(":{p}")).unwrap_or_default();
        let path_and_query = match &query {
            Some(q) => format!("{path}?{q}"),
            None => path,
        };
        let ceiling = f64::from(interval).min(600.0);
        let timeout = 0.1 + timeout_share * (ceiling - 0.1);
        let auth = options.contains_key("auth");
        let mut spec = options;
        spec.insert("host".into(), format!("{scheme}://{host_text}{port_text}").into());
        spec.insert("path".into(), path_and_query.clone().into());
        spec.insert("intervalSeconds".into(), interval.into());
        spec.insert("timeoutSeconds".into(), timeout.into());
        spec.insert(
            "expectedStatusCodes".into(),
            codes.iter().map(|(item, _)| item.clone()).collect::<Vec<_>>().into(),
        );
        let header_count = headers.len() + usize::from(auth);
        spec.insert("headers".into(), headers.into());
        Valid {
            spec,
            https,
            host,
            port,
            path_and_query,
            interval,
            codes: codes.into_iter().map(|(_, c)| c).collect(),
            headers: header_count,
        }
    }
}

/// One field made invalid.
#[derive(Clone, Debug)]
enum Bad {
    Host(String),
    Path(String),
    Interval(i32),
    /// Added to the interval.
    TimeoutAbove(f64),
    Timeout(f64),
    StatusItem(String),
    NoStatus,
    HeaderName(String),
    HeaderValue(String),
    HeaderValueAndFrom,
    MissingSecret,
    AuthAndHeader,
    AuthBoth,
    BodyRegex(String),
    JsonPointer(String),
    HeaderCheckName(String),
    HeaderCheckRegex(String),
    ProxyUrl(String),
    ProxyNeither,
    CaBundle,
    ClientCertificate,
}

fn bad() -> impl Strategy<Value = Bad> {
    let bad_regex = proptest::sample::select(vec!["(", "[a", "a{2,1}", "*", "(?P<x", "\\"]);
    prop_oneof![
        proptest::sample::select(vec![
            "ftp://example.com",
            "file:///etc",
            "mailto:a@b.c",
            "ws://a.b",
            "example.com",
            "",
            "http://exa mple.com",
            "http://[::1",
            "https://",
            "http://a.b:99999",
            "//a.b",
        ])
        .prop_map(|h| Bad::Host(h.into())),
        "[^/][a-z/?]{0,8}".prop_map(Bad::Path),
        (-5i32..=0).prop_map(Bad::Interval),
        (0.0f64..100.0).prop_map(Bad::TimeoutAbove),
        prop_oneof![-10.0f64..0.1, 600.001f64..1e9].prop_map(Bad::Timeout),
        prop_oneof![
            proptest::sample::select(vec![
                "600", "99", "0xx", "6xx", "300-200", "abc", "", "2x", "200-", "-1"
            ])
            .prop_map(String::from),
            "[a-z ]{1,6}",
        ]
        .prop_map(Bad::StatusItem),
        Just(Bad::NoStatus),
        prop_oneof![
            Just(String::new()),
            "[a-z]{0,4}[ :()\"@,;=/?{}]{1,2}[a-z]{0,4}"
        ]
        .prop_map(Bad::HeaderName),
        "[a-z]{0,4}[\\x00-\\x08\\x0a-\\x1f\\x7f][a-z]{0,4}".prop_map(Bad::HeaderValue),
        Just(Bad::HeaderValueAndFrom),
        Just(Bad::MissingSecret),
        Just(Bad::AuthAndHeader),
        Just(Bad::AuthBoth),
        bad_regex.clone().prop_map(|r| Bad::BodyRegex(r.into())),
        "[^/][a-z/]{0,8}".prop_map(Bad::JsonPointer),
        "[a-z]{0,4}[ :()\"@,;=/?{}][a-z]{0,4}".prop_map(Bad::HeaderCheckName),
        bad_regex.prop_map(|r| Bad::HeaderCheckRegex(r.into())),
        proptest::sample::select(vec![
            "https://p.local:1",
            "http://u:pw@p.local:1",
            "socks5://p.local:1",
            "http://[::1"
        ])
        .prop_map(|u| Bad::ProxyUrl(u.into())),
        Just(Bad::ProxyNeither),
        Just(Bad::CaBundle),
        Just(Bad::ClientCertificate),
    ]
}

impl Bad {
    /// Breaks `spec` (valid, with this interval); returns what the message
    /// must name.
    fn apply(&self, spec: &mut Map<String, Value>, interval: i32) -> String {
        match self {
            Bad::Host(_)
            | Bad::Path(_)
            | Bad::Interval(_)
            | Bad::TimeoutAbove(_)
            | Bad::Timeout(_)
            | Bad::StatusItem(_)
            | Bad::NoStatus => self.break_target(spec, interval),
            Bad::HeaderName(_)
            | Bad::HeaderValue(_)
            | Bad::HeaderValueAndFrom
            | Bad::MissingSecret
            | Bad::AuthAndHeader
            | Bad::AuthBoth => self.break_request(spec),
            Bad::BodyRegex(_)
            | Bad::JsonPointer(_)
            | Bad::HeaderCheckName(_)
            | Bad::HeaderCheckRegex(_)
            | Bad::ProxyUrl(_)
            | Bad::ProxyNeither
            | Bad::CaBundle
            | Bad::ClientCertificate => self.break_checks_or_connection(spec),
        }
    }

    /// Host, path, interval, timeout, expected status codes.
    fn break_target(&self, spec: &mut Map<String, Value>, interval: i32) -> String {
        let mut set = |k: &str, v: Value| {
            spec.insert(k.into(), v);
        };
        match self {
            Bad::Host(h) => {
                set("host", h.as_str().into());
                "spec.host".into()
            }
            Bad::Path(p) => {
                set("path", p.as_str().into());
                "spec.path".into()
            }
            Bad::Interval(i) => {
                set("intervalSeconds", (*i).into());
                "spec.intervalSeconds".into()
            }
            Bad::TimeoutAbove(d) => {
                set("timeoutSeconds", (f64::from(interval) + d).into());
                "spec.timeoutSeconds".into()
            }
            Bad::Timeout(t) => {
                set("timeoutSeconds", (*t).into());
                "spec.timeoutSeconds".into()
            }
            Bad::StatusItem(item) => {
                let Some(Value::Array(codes)) = spec.get_mut("expectedStatusCodes") else {
                    unreachable!("a valid spec has codes")
                };
                codes.push(item.as_str().into());
                "spec.expectedStatusCodes".into()
            }
            Bad::NoStatus => {
                set("expectedStatusCodes", json!([]));
                "spec.expectedStatusCodes".into()
            }
            _ => unreachable!("break_target of another kind of breakage"),
        }
    }

    /// Request headers and auth.
    fn break_request(&self, spec: &mut Map<String, Value>) -> String {
        let mut set = |k: &str, v: Value| {
            spec.insert(k.into(), v);
        };
        match self {
            Bad::HeaderName(n) => {
                set("headers", json!([{"name": n, "value": "v"}]));
                format!("header name {n:?}")
            }
            Bad::HeaderValue(v) => {
                set("headers", json!([{"name": "X-Bad", "value": v}]));
                "the value of header \"X-Bad\"".into()
            }
            Bad::HeaderValueAndFrom => {
                set(
                    "headers",
                    json!([{"name": "X-Two", "value": "v", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]),
                );
                "header \"X-Two\" needs exactly one of value or valueFrom".into()
            }
            Bad::MissingSecret => {
                set(
                    "headers",
                    json!([{"name": "X-Key", "valueFrom": {"secretKeyRef": {"name": "missing", "key": "k"}}}]),
                );
                "header \"X-Key\": Secret \"missing\"".into()
            }
            Bad::AuthAndHeader => {
                set("headers", json!([{"name": "Authorization", "value": "x"}]));
                set(
                    "auth",
                    json!({"bearer": {"secretKeyRef": {"name": "t", "key": "k"}}}),
                );
                "spec.auth".into()
            }
            Bad::AuthBoth => {
                set(
                    "auth",
                    json!({"basic": {"secretName": "c"}, "bearer": {"secretKeyRef": {"name": "t", "key": "k"}}}),
                );
                "spec.auth".into()
            }
            _ => unreachable!("break_request of another kind of breakage"),
        }
    }

    /// Response checks, proxy, TLS.
    fn break_checks_or_connection(&self, spec: &mut Map<String, Value>) -> String {
        let mut set = |k: &str, v: Value| {
            spec.insert(k.into(), v);
        };
        match self {
            Bad::BodyRegex(r) => {
                set("bodyMatch", json!({"regex": r}));
                "spec.bodyMatch.regex".into()
            }
            Bad::JsonPointer(p) => {
                set("jsonChecks", json!([{"pointer": p}]));
                "spec.jsonChecks".into()
            }
            Bad::HeaderCheckName(n) => {
                set("headerChecks", json!([{"name": n}]));
                "spec.headerChecks".into()
            }
            Bad::HeaderCheckRegex(r) => {
                set("headerChecks", json!([{"name": "x-v", "regex": r}]));
                "spec.headerChecks".into()
            }
            Bad::ProxyUrl(u) => {
                set("proxy", json!({"url": u}));
                "spec.proxy.url".into()
            }
            Bad::ProxyNeither => {
                set("proxy", json!({}));
                "spec.proxy".into()
            }
            Bad::CaBundle => {
                set(
                    "tls",
                    json!({"caBundle": {"configMapKeyRef": {"name": "ca", "key": "ca.crt"}}}),
                );
                "spec.tls.caBundle".into()
            }
            Bad::ClientCertificate => {
                set("tls", json!({"clientCertificate": {"secretName": "mtls"}}));
                "spec.tls.clientCertificate".into()
            }
            _ => unreachable!("break_checks_or_connection of another kind of breakage"),
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, .. ProptestConfig::default() })]

    /// StatusSet::parse never panics (no overflow either: tests build with
    /// overflow checks) on any item, digits-heavy ones included, which the
    /// CRD's pattern would keep out.
    #[test]
    fn status_sets_never_panic(items in proptest::collection::vec(
        prop_oneof![
            "[0-9]{0,7}(xx)?",
            "[+-]?[0-9]{0,6}-[+-]?[0-9]{0,6}",
            "\\PC{0,10}",
        ],
        0..4,
    )) {
        if let Ok(set) = StatusSet::parse(&items) {
            for code in 0..=u16::MAX {
                if set.contains(code) {
                    prop_assert!((100..=599).contains(&code));
                }
            }
        }
    }

    /// Whatever reaches the operator (the schema may have been looser when it
    /// was stored), planning returns a plan or an InvalidSpec message.
    #[test]
    fn planning_never_panics(
        host in "\\PC{0,40}",
        path in "\\PC{0,40}",
        interval in -5i32..100,
        timeout in -5i32..100,
        codes in proptest::collection::vec("\\PC{0,8}", 0..4),
        regex in proptest::option::of("\\PC{0,12}"),
        header_name in "\\PC{0,10}",
        header_value in "\\PC{0,10}",
    ) {
        let spec: WebCheckerSpec = serde_json::from_value(serde_json::json!({
            "host": host,
            "path": path,
            "intervalSeconds": interval,
            "timeoutSeconds": timeout,
            "expectedStatusCodes": codes,
            "bodyMatch": regex.map(|r| serde_json::json!({"regex": r})),
            "headers": [{"name": header_name, "value": header_value}],
        }))
        .unwrap();
        match plan(&spec, &|_| Err("no secrets".into())) {
            Ok(p) => {
                prop_assert!(p.timeout < p.interval);
                prop_assert!(p.target.path_and_query.starts_with('/'));
            }
            Err(msg) => prop_assert!(!msg.is_empty()),
        }
    }

    /// A spec the schema accepts plans, and the plan says what the spec says.
    #[test]
    fn valid_specs_plan(v in valid_spec()) {
        let spec: WebCheckerSpec = serde_json::from_value(Value::Object(v.spec.clone())).unwrap();
        let p = match plan(&spec, &values) {
            Ok(p) => p,
            Err(e) => return Err(TestCaseError::fail(format!("{e}\nspec: {}", Value::Object(v.spec)))),
        };
        prop_assert_eq!(p.target.https, v.https);
        match &v.host {
            Host::Name(n) => prop_assert!(p.target.host.eq_ignore_ascii_case(n), "{} != {n}", p.target.host),
            Host::V4(ip) => prop_assert_eq!(p.target.host.parse::<IpAddr>().ok(), Some(IpAddr::V4(*ip))),
            Host::V6(ip) => prop_assert_eq!(p.target.host.parse::<IpAddr>().ok(), Some(IpAddr::V6(*ip))),
        }
        let default_port = if v.https { 443 } else { 80 };
        prop_assert_eq!(p.target.port, v.port.unwrap_or(default_port));
        prop_assert_eq!(&p.target.path_and_query, &v.path_and_query);
        prop_assert_eq!(p.interval, Duration::from_secs(v.interval as u64));
        prop_assert!(p.timeout >= Duration::from_millis(100) && p.timeout < p.interval);
        for c in &v.codes {
            prop_assert!(p.expected.contains(*c), "{c} not accepted");
        }
        prop_assert_eq!(p.headers.len(), v.headers);
    }

    /// One bad field in an otherwise valid spec: an InvalidSpec message that
    /// names it.
    #[test]
    fn invalid_specs_are_reported(v in valid_spec(), bad in bad()) {
        let mut spec = v.spec.clone();
        let names = bad.apply(&mut spec, v.interval);
        let spec: WebCheckerSpec = serde_json::from_value(Value::Object(spec)).unwrap();
        match plan(&spec, &values) {
            Ok(_) => prop_assert!(false, "{bad:?} planned"),
            Err(msg) => {
                prop_assert!(msg.contains(&names), "{bad:?}: {msg:?} does not name {names:?}");
                let o = Outcome::invalid_spec(msg);
                prop_assert_eq!(o.reason, Reason::InvalidSpec);
            }
        }
    }

    /// lastTransitionTime moves exactly when Ready changes status; a transition
    /// always comes with a write; thresholds are honoured.
    #[test]
    fn reducer_keeps_its_promises(
        steps in proptest::collection::vec((0usize..REASONS.len(), proptest::option::of(100u16..600)), 1..200),
        failure_threshold in 1u32..5,
        success_threshold in 1u32..5,
    ) {
        let start = Instant::now();
        let mut s = CheckerStatus::from_existing(None);
        let mut last_ready = s.ready;
        let mut last_time = s.last_transition_time.clone();
        let mut run_ok = 0u32;
        let mut run_bad = 0u32;
        for (i, (r, code)) in steps.into_iter().enumerate() {
            let o = outcome(REASONS[r], code);
            if o.success() { run_ok += 1; run_bad = 0 } else { run_bad += 1; run_ok = 0 }
            let place = webchecker::ask::Place::default();
            let ctx = Context {
                success_threshold,
                ..step_context(i, start, failure_threshold, false, &place)
            };
            let fx = s.observe(&o, &ctx);
            let changed = s.ready != last_ready;
            prop_assert_eq!(changed, fx.transition.is_some());
            prop_assert_eq!(changed, s.last_transition_time != last_time);
            if changed {
                prop_assert!(fx.write.is_some(), "a transition is always written");
                if s.ready == Truth::True { prop_assert!(run_ok >= success_threshold) }
                if s.ready == Truth::False { prop_assert!(run_bad >= failure_threshold) }
            }
            last_ready = s.ready;
            last_time = s.last_transition_time.clone();
        }
    }

    /// With confirmation, failures another replica refutes never turn Ready
    /// False, whatever the sequence (only a refusal of the operator's own,
    /// the same from every replica, does); unless Ready is False, Degraded is
    /// True exactly while the owner's last probes failed past the threshold;
    /// a held failure is
    /// never written before the verdict.
    #[test]
    fn refuted_failures_never_page(
        steps in proptest::collection::vec((0usize..REASONS.len(), proptest::option::of(100u16..600)), 1..200),
        failure_threshold in 1u32..5,
    ) {
        let start = Instant::now();
        let here = webchecker::ask::Place { replica: "r0".into(), zone: "a".into() };
        let by = webchecker::ask::Place { replica: "r1".into(), zone: "b".into() };
        let mut s = CheckerStatus::from_existing(None);
        let mut run_bad = 0u32;
        for (i, (r, code)) in steps.into_iter().enumerate() {
            let o = outcome(REASONS[r], code);
            if o.success() { run_bad = 0 } else { run_bad += 1 }
            let was = s.ready;
            let ctx = step_context(i, start, failure_threshold, true, &here);
            let fx = s.observe(&o, &ctx);
            if fx.confirm {
                prop_assert!(fx.write.is_none() && fx.transition.is_none());
                let verdict = webchecker::ask::Verdict::Refuted { by: by.clone(), millis: 3 };
                s.confirmed(&verdict, &ctx);
            }
            if s.ready == Truth::False && was != Truth::False {
                prop_assert_eq!(o.reason, Reason::Forbidden, "only the operator's own refusal pages unconfirmed");
            }
            let degraded = s.degraded.as_ref().map(|d| d.status);
            if run_bad >= failure_threshold && s.ready != Truth::False {
                prop_assert_eq!(degraded, Some(Truth::True));
            } else if run_bad == 0 {
                prop_assert_ne!(degraded, Some(Truth::True));
            }
        }
    }
}

/// The reducer's context at step `i` of a property (success threshold 1).
fn step_context<'a>(
    i: usize,
    start: Instant,
    failure_threshold: u32,
    confirm: bool,
    place: &'a webchecker::ask::Place,
) -> Context<'a> {
    Context {
        generation: Some(1),
        owner: "r0",
        now_wall: format!("t{i}"),
        now: start + Duration::from_secs(i as u64),
        heartbeat: Duration::from_secs(300),
        success_threshold: 1,
        failure_threshold,
        certificate_warning_days: None,
        confirm,
        place,
        now_unix: 1_767_225_600 + i as u64,
        slo: None,
        maintenance: None,
        dependency: None,
    }
}
