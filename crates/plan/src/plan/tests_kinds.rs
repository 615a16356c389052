//! Unit tests of the plans of grpc, tcp and tls checks.

use super::*;
use webchecker_api::{CheckKind, WebCheckerSpec};

fn spec(yaml: &str) -> WebCheckerSpec {
    serde_yaml::from_str(yaml).unwrap()
}

fn no_secrets(r: &ValueRef) -> Result<Vec<u8>, String> {
    Err(format!("{} {:?} not found", r.kind(), r.name()))
}

fn err(yaml: &str) -> String {
    plan(&spec(yaml), &no_secrets).unwrap_err()
}

#[test]
fn the_scheme_says_what_a_check_speaks() {
    let p = plan(&spec("host: grpc://10.0.0.1:50051"), &no_secrets).unwrap();
    assert_eq!(p.kind, CheckKind::Grpc);
    assert!(!p.target.https);
    assert_eq!(p.target.path_and_query, GRPC_HEALTH_PATH);
    assert_eq!(
        p.target.url(),
        "http://10.0.0.1:50051/grpc.health.v1.Health/Check"
    );
    assert_eq!(p.alpn, Alpn::H2);
    assert!(matches!(&p.protocol, Protocol::GrpcHealth { service } if service.is_empty()));

    let p = plan(
        &spec("host: GRPCS://Api.Example.com:443\ngrpc: {service: shop.Orders}"),
        &no_secrets,
    )
    .unwrap();
    assert!(p.target.https);
    assert_eq!(p.target.host, "api.example.com");
    assert!(matches!(&p.protocol, Protocol::GrpcHealth { service } if service == "shop.Orders"));

    let p = plan(&spec("host: tcp://[2001:db8::1]:25"), &no_secrets).unwrap();
    assert_eq!(
        (p.kind, p.target.https, p.alpn),
        (CheckKind::Tcp, false, Alpn::Nothing)
    );
    assert_eq!(p.target.host, "2001:db8::1");
    assert!(matches!(&p.protocol, Protocol::Tcp { steps } if steps.is_empty()));

    let p = plan(&spec("host: tls://mail.example.com:465"), &no_secrets).unwrap();
    assert_eq!(
        (p.kind, p.target.https, p.alpn),
        (CheckKind::Tls, true, Alpn::Nothing)
    );

    // The seed's kind is unchanged.
    let p = plan(&spec("host: http://flant.ru"), &no_secrets).unwrap();
    assert_eq!((p.kind, p.alpn), (CheckKind::Http, Alpn::H2AndHttp11));
    assert!(matches!(p.protocol, Protocol::Http));
}

#[test]
fn tcp_steps_are_planned_with_their_patterns() {
    let p = plan(
        &spec(
            r#"
host: tcp://127.0.0.1:2525
tcp:
  queryResponse:
  - expect: "^220 "
  - send: "EHLO probe\r\n"
    expect: "^250[ -]STARTTLS"
  - send: "STARTTLS\r\n"
  - expect: "^220"
    startTls: true
"#,
        ),
        &no_secrets,
    )
    .unwrap();
    let Protocol::Tcp { steps } = &p.protocol else {
        panic!("{:?}", p.protocol)
    };
    let expects: Vec<Option<&str>> = steps
        .iter()
        .map(|s| s.expect.as_ref().map(Pattern::as_str))
        .collect();
    assert_eq!(
        expects,
        [Some("^220 "), Some("^250[ -]STARTTLS"), None, Some("^220")]
    );
    assert_eq!(&steps[1].send[..], b"EHLO probe\r\n");
    assert_eq!(
        steps.iter().map(|s| s.start_tls).collect::<Vec<_>>(),
        [false, false, false, true]
    );
    let e = err("host: tcp://h:1\ntcp: {queryResponse: [{expect: '('}]}");
    assert!(
        e.starts_with("spec.tcp.queryResponse[0].expect is not a valid regular expression"),
        "{e}"
    );
    let e = err("host: tls://h:1\ntcp: {queryResponse: [{startTls: true}]}");
    assert!(e.contains("tls:// host speaks TLS from the start"), "{e}");
}

#[test]
fn other_kinds_refuse_what_only_http_uses_naming_the_field() {
    for (yaml, field) in [
        ("host: tcp://h:1\nmethod: POST", "spec.method"),
        ("host: grpc://h:1\nbodyMatch: {regex: x}", "spec.bodyMatch"),
        (
            "host: tls://h:1\nfollowRedirects: true",
            "spec.followRedirects",
        ),
        (
            "host: grpc://h:1\nexpectedStatusCodes: ['200']",
            "spec.expectedStatusCodes",
        ),
        ("host: grpc://h:1\npath: /x", "spec.path"),
        (
            "host: tcp://h:1\nheaders: [{name: a, value: b}]",
            "spec.headers",
        ),
        ("host: http://h\ngrpc: {}", "spec.grpc"),
        ("host: grpc://h:1\ntcp: {}", "spec.tcp"),
    ] {
        let e = err(yaml);
        assert!(e.starts_with(field), "{yaml}: {e}");
    }
    let e = err("host: grpc://h:1\nheaders: [{name: grpc-timeout, value: 1S}]");
    assert!(
        e.contains("grpc-timeout is set by the gRPC health check"),
        "{e}"
    );
    let e = err("host: tcp://h");
    assert!(e.contains("needs a port"), "{e}");
    let e = err("host: tcp://u:p@h:1");
    assert!(e.contains("credentials"), "{e}");
    let e = err("host: tcp://h:1/x");
    assert!(e.contains("path"), "{e}");
    // Metadata and auth are a gRPC check's own.
    let p = plan(
        &spec("host: grpc://h:1\nheaders: [{name: x-tenant, value: blue}]"),
        &no_secrets,
    )
    .unwrap();
    assert_eq!(p.headers.len(), 1);
}
