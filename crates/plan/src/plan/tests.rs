//! Unit tests of planning: defaults, every option, and invalid specs.

use std::time::Duration;

use http::Method;

use super::*;
use webchecker_api::WebCheckerSpec;

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
    // What the CRD's pattern keeps out must still not overflow nor panic.
    for item in [
        "657xx", "6553xx", "0xx", "+2xx", "99999-1", "65535", "xx", "-",
    ] {
        assert!(StatusSet::parse(&[item.into()]).is_err(), "{item}");
    }
}

#[test]
fn the_default_timeout_fits_the_interval() {
    let timeout = |y: &str| plan(&spec(y), &no_secrets).unwrap().timeout;
    assert_eq!(timeout("host: http://x"), Duration::from_secs(1));
    assert_eq!(
        timeout("host: http://x\nintervalSeconds: 2"),
        Duration::from_secs(1)
    );
    assert_eq!(
        timeout("host: http://x\nintervalSeconds: 1"),
        Duration::from_millis(500)
    );
    assert_eq!(
        timeout("host: http://x\nintervalSeconds: 1\ntimeoutSeconds: 0.9"),
        Duration::from_millis(900)
    );
    assert!(
        plan(
            &spec("host: http://x\nintervalSeconds: 1\ntimeoutSeconds: 1"),
            &no_secrets
        )
        .is_err()
    );
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
fn a_path_never_changes_the_origin() {
    for path in [
        "//b.example/x",
        "//b.example",
        "/\\b.example/x",
        "/\\/b.example",
        "/\t/b.example/x",
        "/\n/b.example/x",
        "/\r\n/b.example",
        "//a.example:8443/x",
        "//user:pw@a.example/x",
    ] {
        let s = WebCheckerSpec {
            path: path.to_string(),
            ..spec("host: http://a.example")
        };
        let err = plan(&s, &no_secrets).unwrap_err();
        assert!(
            err.starts_with(&format!("spec.path {path:?} leaves the host of spec.host")),
            "{path:?}: {err}"
        );
    }
    let s = WebCheckerSpec {
        path: "///b.example".into(),
        ..spec("host: http://a.example")
    };
    let err = plan(&s, &no_secrets).unwrap_err();
    assert!(
        err.starts_with("spec.path \"///b.example\" is not a valid path"),
        "{err}"
    );
    // Paths that look odd but stay on the host: percent-encoded slashes and
    // backslashes are not decoded, dot segments cannot climb above the root.
    for (path, want) in [
        ("/%2F%2Fb.example/x", "/%2F%2Fb.example/x"),
        ("/%5Cb.example", "/%5Cb.example"),
        ("/../b.example", "/b.example"),
        ("/..//b.example", "//b.example"),
        ("/a@b.example:80", "/a@b.example:80"),
        ("/x?next=//b.example", "/x?next=//b.example"),
    ] {
        let s = WebCheckerSpec {
            path: path.to_string(),
            ..spec("host: http://a.example:8080")
        };
        let p = plan(&s, &no_secrets).unwrap_or_else(|e| panic!("{path:?}: {e}"));
        assert_eq!(
            (
                p.target.host.as_str(),
                p.target.port,
                p.target.path_and_query.as_str()
            ),
            ("a.example", 8080, want),
            "{path:?}"
        );
        // The request URL reads back as the same origin (redirects and
        // proxies parse it again).
        let again = url::Url::parse(&p.target.url()).unwrap();
        assert_eq!(again.host_str(), Some("a.example"), "{path:?}");
    }
}

#[test]
fn credentials_in_the_host_are_refused_not_dropped() {
    for host in [
        "http://user:pw@a.example",
        "https://user@a.example:8443",
        "http://:pw@a.example",
    ] {
        let err = plan(&spec(&format!("host: '{host}'")), &no_secrets).unwrap_err();
        assert!(
            err.starts_with("spec.host must not carry credentials")
                && err.contains("spec.auth.basic"),
            "{host}: {err}"
        );
        assert!(!err.contains("pw"), "{err}");
    }
}

#[test]
fn secret_values_stay_out_of_errors() {
    let s =
        spec("host: http://x\nheaders: [{name: X, valueFrom: {secretKeyRef: {name: s, key: k}}}]");
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
    let s = spec("host: http://x\nauth: {basic: {secretName: c, usernameKey: u, passwordKey: p}}");
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
    let bad: serde_json::Value = serde_json::from_str(r#"{"status":"degraded","n":"42"}"#).unwrap();
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
    assert_eq!(p.tls.min_version, MinTlsVersion::Tls13);
    assert_eq!(p.tls.expiry_warning_days, Some(30));
    assert!(p.tls.config.is_some());
    let (_, ca_pem) = test_ca();
    let s = spec("host: https://x\ntls: {caBundle: {configMapKeyRef: {name: ca, key: ca.crt}}}");
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
        (AddressFamily::Auto, &ProxyPlan::Direct)
    );
    let p = plan(&spec("host: http://x\nipFamily: IPv6"), &no_secrets).unwrap();
    assert_eq!(p.ip_family, AddressFamily::V6);
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
fn connect_to_names_an_address_or_a_host_and_never_a_proxy() {
    let p = plan(&spec("host: https://shop.example"), &no_secrets).unwrap();
    assert_eq!(p.connect_to, None);
    for (given, want) in [
        ("10.0.0.7", "10.0.0.7"),
        ("fd00::1", "fd00::1"),
        ("GW.example.net.", "gw.example.net"),
    ] {
        let s = spec(&format!("host: https://shop.example\nconnectTo: '{given}'"));
        let p = plan(&s, &no_secrets).unwrap();
        assert_eq!(p.connect_to.as_deref(), Some(want), "{given}");
        assert_eq!(p.target.host, "shop.example", "the request names the host");
    }
    for bad in [
        "http://10.0.0.7",
        "10.0.0.7:8080",
        "[fd00::1]",
        "gw.example/x",
        "-gw.example",
        "",
    ] {
        let s = spec(&format!("host: https://shop.example\nconnectTo: '{bad}'"));
        let err = plan(&s, &no_secrets).unwrap_err();
        assert!(err.starts_with("spec.connectTo"), "{bad}: {err}");
    }
    let s = spec(
        "host: http://shop.example\nconnectTo: 10.0.0.7\nproxy: {url: 'http://proxy.local:3128'}",
    );
    let err = plan(&s, &no_secrets).unwrap_err();
    assert!(err.contains("cannot be combined"), "{err}");
}

#[test]
fn an_slo_is_planned_exactly_and_a_stored_bad_one_is_an_invalid_spec() {
    let p = plan(
        &spec("host: https://shop.example\nslo: {objective: \"99.95\", window: 7d}"),
        &no_secrets,
    )
    .unwrap();
    let slo = p.slo.unwrap();
    assert_eq!(
        (slo.percent().as_str(), slo.window.as_str()),
        ("99.95%", "7d")
    );
    assert_eq!(slo.target(), 0.9995);
    let p = plan(
        &spec("host: https://shop.example\nslo: {objective: \"95\"}"),
        &no_secrets,
    )
    .unwrap();
    assert_eq!(p.slo.unwrap().percent(), "95%");
    assert_eq!(p.slo.unwrap().window.as_str(), "30d");
    let e = plan(
        &spec("host: https://shop.example\nslo: {objective: \"100\"}"),
        &no_secrets,
    )
    .unwrap_err();
    assert!(e.contains("spec.slo.objective"), "{e}");
}
