//! What a checker's spec cannot do (docs/security.md): take the replica's
//! memory with regular expressions, send its requests (and credentials) to
//! a host other than `spec.host` through `spec.path`, or hand its
//! credentials and TLS settings to another origin through a redirect.
//!
//! The prober against real loopback targets (two ports are two origins),
//! and the operator against a real control plane.

use webchecker_kit as support;

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use support::targets::{Answer, RecordingTarget, TestCa};
use support::*;
use webchecker::api::WebChecker;
use webchecker::probe::{AddressPolicy, Outcome, ProbePlan, Prober, Reason, ValueRef, plan};

// ============================================================== prober

const LOOPBACK: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

/// A prober that knows `a.test` and `b.test` as 127.0.0.1 and `empty.test`
/// as a name without addresses; other names go to the test kit's name server
/// (no test depends on the machine's DNS).
fn prober() -> Prober {
    let mut p = Prober::new(
        Some("limits-test"),
        AddressPolicy::with_loopback(),
        64 * 1024,
    );
    p.resolver = std::sync::Arc::new(support::dns::Dns::shared().resolver());
    for name in ["a.test", "b.test"] {
        p.static_hosts.insert(name.into(), vec![LOOPBACK]);
    }
    p.static_hosts.insert("empty.test".into(), vec![]);
    p
}

fn plan_of(yaml: &str, values: &[(ValueRef, &str)]) -> ProbePlan {
    let spec = serde_yaml::from_str(yaml).unwrap_or_else(|e| panic!("{yaml}: {e}"));
    let m: HashMap<ValueRef, Vec<u8>> = values
        .iter()
        .map(|(r, v)| (r.clone(), v.as_bytes().to_vec()))
        .collect();
    plan(&spec, &|r| {
        m.get(r).cloned().ok_or_else(|| format!("{r} not found"))
    })
    .unwrap_or_else(|e| panic!("{yaml}: {e}"))
}

async fn probe(plan: &ProbePlan) -> Outcome {
    prober()
        .probe(plan, "spec-limits", &|| true)
        .await
        .expect("an open gate gives an outcome")
}

#[tokio::test]
async fn literal_credentials_stay_with_their_origin() {
    let other = RecordingTarget::http(|_| Answer::ok()).await;
    let to = format!("{}/x", other.url());
    let t = RecordingTarget::http(move |r| match r.uri.as_str() {
        "/same" => Answer::redirect(302, "/end"),
        "/cross" => Answer::redirect(307, &to),
        _ => Answer::ok(),
    })
    .await;
    let headers = "headers:\n- {name: Authorization, value: Basic bGl0ZXJhbDpwdw==}\n- {name: Proxy-Authorization, value: Basic cHJveHk6cHc=}\n- {name: Cookie, value: session=c00kie}\n- {name: X-Key, valueFrom: {secretKeyRef: {name: s, key: k}}}\n- {name: X-Plain, value: p}";
    let credentials = ["authorization", "proxy-authorization", "cookie", "x-key"];
    for path in ["/same", "/cross"] {
        let p = plan_of(
            &format!(
                "host: {}\npath: {path}\nfollowRedirects: true\n{headers}",
                t.url()
            ),
            &[(ValueRef::secret("s", "k"), "s3cr3t")],
        );
        let o = probe(&p).await;
        assert_eq!(
            (o.reason, o.redirects),
            (Reason::ProbeSucceeded, 1),
            "{o:?}"
        );
    }
    // Same origin: everything, on both hops.
    let end = t.requests().into_iter().find(|r| r.uri == "/end").unwrap();
    for h in credentials.iter().chain(&["x-plain"]) {
        assert!(end.headers.contains_key(*h), "{h} on the same origin");
    }
    // Another origin (another port): the plain header only.
    let seen = other.requests();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].headers["x-plain"], "p");
    for h in credentials {
        assert!(
            !seen[0].headers.contains_key(h),
            "{h} reached another origin"
        );
    }
}

#[tokio::test]
async fn tls_settings_stay_with_their_origin() {
    let ca = TestCa::new();
    let client = ca.leaf(&["probe-client"]);
    let b =
        RecordingTarget::https(&ca.leaf(&["b.test"]), Some((&ca, false)), |_| Answer::ok()).await;
    let to = format!("https://b.test:{}/x?token=sekrit", b.port());
    let a = RecordingTarget::https(
        &ca.leaf(&["svc.internal"]),
        Some((&ca, true)),
        move |r| match r.uri.as_str() {
            "/same" => Answer::redirect(302, "/end"),
            "/cross" => Answer::redirect(302, &to),
            _ => Answer::ok(),
        },
    )
    .await;
    let values = [
        (ValueRef::config_map("ca", "ca.crt"), ca.pem.as_str()),
        (
            ValueRef::secret("client", "tls.crt"),
            client.cert_pem.as_str(),
        ),
        (
            ValueRef::secret("client", "tls.key"),
            client.key_pem.as_str(),
        ),
    ];
    let spec = |path: &str, tls: &str| {
        format!(
            "host: https://a.test:{}\npath: {path}\nfollowRedirects: true\ntls: {{clientCertificate: {{secretName: client}}, {tls}}}",
            a.port()
        )
    };
    let verified = "serverName: svc.internal, caBundle: {configMapKeyRef: {name: ca, key: ca.crt}}";
    for tls in [verified, "insecureSkipVerify: true"] {
        // The checker's own origin gets its settings on every hop: the server
        // name, the CA bundle (or no verification) and the client certificate.
        let before = a.handshakes().sni.len();
        let o = probe(&plan_of(&spec("/same", tls), &values)).await;
        assert_eq!(
            (o.reason, o.redirects),
            (Reason::ProbeSucceeded, 1),
            "{tls}: {o:?}"
        );
        let hs = a.handshakes();
        let want_sni = if tls == verified {
            Some("svc.internal")
        } else {
            Some("a.test")
        };
        assert_eq!(
            hs.sni[before..],
            [want_sni.map(String::from), want_sni.map(String::from)]
        );
        assert!(hs.client_certificate.iter().all(|c| *c));

        // Another origin gets the defaults: the built-in roots (which do not
        // know the test CA), its own name in SNI, no client certificate.
        let sni_before = b.handshakes().sni.len();
        let o = probe(&plan_of(&spec("/cross", tls), &values)).await;
        assert_eq!(o.reason, Reason::CertificateInvalid, "{tls}: {o:?}");
        assert_eq!(
            o.message,
            "after a redirect (HTTP 302) to another origin: server certificate rejected: issued by an unknown certificate authority"
        );
        let hs = b.handshakes();
        assert_eq!(hs.sni[sni_before..], [Some("b.test".to_string())], "{tls}");
        assert!(hs.client_certificate.iter().all(|c| !*c), "{tls}");
        assert!(
            b.requests().is_empty(),
            "nothing was sent to the other origin"
        );
    }

    // Control: the same server, probed as a checker's own origin with the
    // same settings, is fine, so the redirect failed on the defaults alone.
    let o = probe(&plan_of(
        &format!(
            "host: https://b.test:{}\ntls: {{clientCertificate: {{secretName: client}}, caBundle: {{configMapKeyRef: {{name: ca, key: ca.crt}}}}}}",
            b.port()
        ),
        &values,
    ))
    .await;
    assert_eq!(o.reason, Reason::ProbeSucceeded, "{o:?}");
    assert_eq!(b.handshakes().client_certificate, [true]);
}

#[tokio::test]
async fn redirect_failures_never_quote_the_location() {
    let closed = free_port();
    let t = RecordingTarget::http(move |r| match r.uri.as_str() {
        "/refused" => Answer::redirect(302, &format!("http://127.0.0.1:{closed}/x?token=sekrit")),
        "/no-address" => Answer::redirect(301, "http://empty.test/sekrit"),
        "/scheme" => Answer::redirect(302, "ftp://files.example/sekrit"),
        "/same-origin" => Answer::redirect(308, "/gone"),
        _ => Answer::status(404),
    })
    .await;
    let host = t.url();
    let cases = [
        (
            "/refused",
            Reason::ConnectError,
            "after a redirect (HTTP 302) to another origin: cannot connect to the new host: connection refused".to_string(),
        ),
        (
            "/no-address",
            Reason::DnsError,
            "after a redirect (HTTP 301) to another origin: the new host has no address".to_string(),
        ),
        (
            "/scheme",
            Reason::ProtocolError,
            "HTTP 302: the Location is not an http:// or https:// URL with a host".to_string(),
        ),
        // The checker's own host may be named; the Location's path is not.
        (
            "/same-origin",
            Reason::UnexpectedStatus,
            "HTTP 404, not an expected status".to_string(),
        ),
    ];
    for (path, reason, message) in cases {
        let o = probe(&plan_of(
            &format!("host: {host}\npath: {path}\nfollowRedirects: true"),
            &[],
        ))
        .await;
        assert_eq!(
            (o.reason, o.message.as_str()),
            (reason, message.as_str()),
            "{path}"
        );
        for leak in [
            "sekrit",
            "token",
            &closed.to_string(),
            "files.example",
            "empty.test",
            "gone",
        ] {
            assert!(
                !o.message.contains(leak),
                "{path}: {leak} in {:?}",
                o.message
            );
        }
    }
}

#[tokio::test]
async fn only_redirects_are_followed_and_a_rewrite_to_get_drops_the_body() {
    let t = RecordingTarget::http(|r| match r.uri.as_str() {
        "/end" => Answer::ok(),
        other => {
            let code: u16 = other.trim_start_matches('/').parse().unwrap();
            Answer::redirect(code, "/end")
        }
    })
    .await;
    let body = "body: '{\"a\":1}'\nheaders: [{name: Content-Type, value: application/json}, {name: X-Plain, value: p}]";
    // (path, method, the method /end sees, whether the body and its headers reach /end)
    let followed = [
        ("/303", "POST", "GET", false),
        ("/303", "PUT", "GET", false),
        ("/303", "HEAD", "HEAD", false),
        ("/302", "POST", "GET", false),
        ("/301", "PUT", "PUT", true),
        ("/307", "POST", "POST", true),
        ("/308", "PATCH", "PATCH", true),
    ];
    for (path, method, want, kept) in followed {
        let n = t.requests().len();
        let o = probe(&plan_of(
            &format!(
                "host: {}\npath: {path}\nmethod: {method}\nfollowRedirects: true\n{body}",
                t.url()
            ),
            &[],
        ))
        .await;
        assert_eq!(
            (o.reason, o.redirects),
            (Reason::ProbeSucceeded, 1),
            "{path} {method}: {o:?}"
        );
        let seen = t.requests();
        assert_eq!(seen.len(), n + 2);
        let end = &seen[n + 1];
        assert_eq!(
            (end.uri.as_str(), end.method.as_str()),
            ("/end", want),
            "{path} {method}"
        );
        assert_eq!(end.headers["x-plain"], "p");
        if kept {
            assert_eq!(end.body, b"{\"a\":1}");
            assert_eq!(end.headers["content-type"], "application/json");
            assert_eq!(end.headers["content-length"], "7");
        } else {
            assert!(end.body.is_empty(), "{path} {method}");
            for h in ["content-type", "content-length", "transfer-encoding"] {
                assert!(!end.headers.contains_key(h), "{path} {method}: {h}");
            }
        }
    }
    // 300, 304 and 305 are answers, not redirects, even with a Location.
    for code in [300u16, 304, 305] {
        let n = t.requests().len();
        let o = probe(&plan_of(
            &format!("host: {}\npath: /{code}\nfollowRedirects: true", t.url()),
            &[],
        ))
        .await;
        assert_eq!(
            (o.reason, o.status_code, o.redirects),
            (Reason::ProbeSucceeded, Some(code), 0),
            "{o:?}"
        );
        assert_eq!(t.requests().len(), n + 1, "{code} was not followed");
    }
}

// ============================================================== operator

fn cluster() -> &'static Cluster {
    Cluster::shared("limits")
}

async fn kubectl_apply(ns: &str, yaml: &str, dry_run: bool) -> std::process::Output {
    let mut args = vec!["apply", "-n", ns, "-f", "-"];
    if dry_run {
        args.push("--dry-run=server");
    }
    cluster().kubectl_stdin_async(&args, yaml).await
}

/// Each rule rejects its example with a message a person can act on, and
/// lookalikes that stay on the host are admitted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admission_refuses_paths_that_leave_the_host_credentials_in_the_host_and_http_fields_elsewhere()
 {
    let c = cluster();
    let ns = c.namespace("limits-admission");
    let refused = [
        (
            "host: http://a.example\npath: //b.example/x",
            "spec.path must not start with '//', which a URL reads as another host",
        ),
        (
            "host: http://a.example\npath: '/\\b.example/x'",
            "spec.path must not contain a backslash",
        ),
        (
            "host: http://a.example\npath: \"/\\t/b.example/x\"",
            "spec.path must not contain control characters (tab, line breaks)",
        ),
        (
            "host: http://a.example\npath: \"/x\\n\"",
            "spec.path must not contain control characters (tab, line breaks)",
        ),
        (
            "host: http://user:pw@a.example",
            "spec.host must not carry credentials (user:password@); put them in a Secret and use spec.auth.basic",
        ),
        (
            "host: https://token@a.example:8443",
            "spec.host must not carry credentials",
        ),
        (
            "host: http://a.example\nlocations: {zones: 2, quorum: 3}",
            "spec.locations.quorum cannot exceed spec.locations.zones",
        ),
        // The kinds that are not HTTP: a port, and no HTTP-only field.
        (
            "host: tcp://a.example",
            "spec.host needs a port with grpc://",
        ),
        (
            "host: tcp://a.example:25\nmethod: POST",
            "spec.method applies to http://, https:// hosts only; remove it for a grpc://, grpcs://, tcp:// or tls:// host",
        ),
        (
            "host: grpc://a.example:1\nexpectedStatusCodes: ['200']",
            "spec.expectedStatusCodes applies to http:// and https:// hosts only",
        ),
        (
            "host: grpc://a.example:1\npath: /x",
            "spec.path applies to http:// and https:// hosts only",
        ),
        (
            "host: tls://a.example:1\nheaders: [{name: a, value: b}]",
            "spec.headers applies to http://, https://, grpc://, grpcs:// hosts only",
        ),
        (
            "host: http://a.example\ntcp: {}",
            "spec.tcp applies to tcp://, tls:// hosts only",
        ),
        (
            "host: tls://a.example:1\ntcp: {queryResponse: [{startTls: true}]}",
            "spec.tcp.queryResponse[].startTls upgrades a tcp:// connection",
        ),
        (
            "host: tcp://a.example:1\ntcp: {queryResponse: [{}]}",
            "needs at least one of expect, send or startTls: true",
        ),
    ];
    for (i, (spec, message)) in refused.iter().enumerate() {
        let out = kubectl_apply(&ns, &checker_manifest(&format!("refused-{i}"), spec), true).await;
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "admitted: {spec}");
        assert!(err.contains(message), "{spec}: {err}");
    }
    for (i, spec) in [
        "host: http://a.example\npath: /%2F%2Fb.example/x",
        "host: http://a.example\npath: /%5Cb.example",
        "host: http://a.example\npath: /login?next=//b.example",
        "host: http://a.example\npath: /a@b.example",
        "host: grpc://a.example:50051\ngrpc: {service: shop.Orders}\nheaders: [{name: x-tenant, value: blue}]",
        "host: tcp://a.example:25\ntcp: {queryResponse: [{expect: '^220'}, {send: \"QUIT\\r\\n\"}]}",
        "host: tls://a.example:465\ntls: {certificateExpiryWarningDays: 14}",
    ]
    .iter()
    .enumerate()
    {
        let out = kubectl_apply(&ns, &checker_manifest(&format!("admitted-{i}"), spec), true).await;
        assert!(
            out.status.success(),
            "{spec}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

async fn ready(api: &kube::Api<WebChecker>, name: &str) -> Option<webchecker::api::Condition> {
    condition(api, name, "Ready").await
}

/// The checker: 16 header checks and a body match, each pattern of
/// a size the regex crate's defaults accept (about 11 MiB compiled each,
/// 190 MiB for the checker; the operator's VmRSS went from 15 to 233 MiB
/// with the limits lifted). The limits make it InvalidSpec at the first
/// pattern, the replica's memory does not move, and the other checkers of
/// the replica go on being probed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn huge_patterns_are_invalid_spec_and_leave_the_replica_memory_alone() {
    let pattern = |i: usize| format!("\\w{{200}}{i}");
    // Without limits this pattern is accepted (and kept, at about 11 MiB).
    assert!(regex::Regex::new(&pattern(0)).is_ok());

    let c = cluster();
    let client = c.client().await;
    let ns = c.namespace("limits-regex");
    let api: kube::Api<WebChecker> = kube::Api::namespaced(client.clone(), &ns);
    let target = RecordingTarget::http(|_| Answer::ok()).await;
    let mut extra = FAST_LEASES.to_vec();
    extra.push("--log-level=info");
    let op = Operator::spawn(c, &format!("op-{ns}"), &ns, &extra);
    op.wait_ready(Duration::from_secs(60)).await;
    let steady = checker_manifest(
        "steady",
        &format!(
            "host: {}\npath: /steady\nintervalSeconds: 1\ntimeoutSeconds: 0.5",
            target.url()
        ),
    );
    let out = kubectl_apply(&ns, &steady, false).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let probes = || {
        let seen = target.requests();
        assert!(
            seen.iter().all(|r| r.uri == "/steady"),
            "the huge checker probed"
        );
        seen.len()
    };
    eventually(Duration::from_secs(30), "steady probed 3 times", || async {
        (probes() >= 3).then_some(())
    })
    .await;
    let before = proc_memory_kib(op.pid(), "VmRSS");

    let mut spec = format!("host: {}\npath: /huge\nheaderChecks:\n", target.url());
    for i in 0..16 {
        spec.push_str(&format!("- {{name: X-H{i}, regex: '{}'}}\n", pattern(i)));
    }
    spec.push_str(&format!("bodyMatch: {{regex: '{}'}}\n", pattern(16)));
    let out = kubectl_apply(&ns, &checker_manifest("huge", &spec), false).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let cond = eventually(Duration::from_secs(30), "huge InvalidSpec", || async {
        ready(&api, "huge")
            .await
            .filter(|c| c.status == "False" && c.reason == "InvalidSpec")
    })
    .await;
    assert!(
        cond.message.starts_with(
            "spec.headerChecks[0].regex (header \"X-H0\") is too large once compiled (limit 1 MiB per expression)"
        ),
        "{}",
        cond.message
    );
    // The other checker of the replica goes on being probed.
    let n = probes();
    eventually(
        Duration::from_secs(30),
        "steady probed 3 more times",
        || async { (probes() >= n + 3).then_some(()) },
    )
    .await;
    let after = proc_memory_kib(op.pid(), "VmRSS");
    println!("operator VmRSS: {before} KiB before, {after} KiB after the huge checker");
    // Without the limits: about 220 MiB more (233 MiB in all), and the
    // replica's chart limit is 256 MiB.
    assert!(
        after < before + 6 * 1024,
        "VmRSS grew from {before} KiB to {after} KiB"
    );
    assert_eq!(
        ready(&api, "steady").await.map(|c| c.status),
        Some("True".to_string())
    );
}
