//! Part 2: admission rules, and Secrets that reach the target and never leak.

use super::ops::*;
use super::*;

/// Each new admission rule rejects its example, with its message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn new_admission_rules_reject_bad_specs() {
    let c = cluster();
    let ns = c.namespace("probe-admission");
    let h = "host: https://example.com\n";
    let cases: &[(&str, String, &str)] = &[
        (
            "auth-both",
            format!(
                "{h}auth: {{basic: {{secretName: a}}, bearer: {{secretKeyRef: {{name: b, key: c}}}}}}"
            ),
            "spec.auth needs exactly one of basic or bearer",
        ),
        (
            "auth-none",
            format!("{h}auth: {{}}"),
            "spec.auth needs exactly one of basic or bearer",
        ),
        (
            "auth-and-header",
            format!(
                "{h}headers: [{{name: AUTHORIZATION, value: x}}]\nauth: {{bearer: {{secretKeyRef: {{name: b, key: c}}}}}}"
            ),
            "spec.auth and a header named Authorization cannot be combined",
        ),
        (
            "basic-no-secret",
            format!("{h}auth: {{basic: {{}}}}"),
            "spec.auth.basic.secretName: Required value",
        ),
        (
            "json-pointer",
            format!("{h}jsonChecks: [{{pointer: status, equals: ok}}]"),
            "a jsonChecks pointer must be empty or start with '/'",
        ),
        (
            "header-check-name",
            format!("{h}headerChecks: [{{name: 'not a header'}}]"),
            "spec.headerChecks[0].name in body should match",
        ),
        (
            "ca-both",
            format!(
                "{h}tls: {{caBundle: {{secretKeyRef: {{name: a, key: b}}, configMapKeyRef: {{name: a, key: b}}}}}}"
            ),
            "spec.tls.caBundle needs exactly one of secretKeyRef or configMapKeyRef",
        ),
        (
            "ca-none",
            format!("{h}tls: {{caBundle: {{}}}}"),
            "spec.tls.caBundle needs exactly one of secretKeyRef or configMapKeyRef",
        ),
        (
            "ca-insecure",
            format!(
                "{h}tls: {{insecureSkipVerify: true, caBundle: {{configMapKeyRef: {{name: a, key: b}}}}}}"
            ),
            "spec.tls.caBundle has no effect with insecureSkipVerify: true",
        ),
        (
            "client-cert-no-secret",
            format!("{h}tls: {{clientCertificate: {{}}}}"),
            "spec.tls.clientCertificate.secretName: Required value",
        ),
        (
            "min-version",
            format!("{h}tls: {{minVersion: TLS11}}"),
            "Unsupported value: \"TLS11\"",
        ),
        (
            "expiry-days",
            format!("{h}tls: {{certificateExpiryWarningDays: 0}}"),
            "should be greater than or equal to 1",
        ),
        (
            "ip-family",
            format!("{h}ipFamily: IPv5"),
            "Unsupported value: \"IPv5\"",
        ),
        (
            "proxy-both",
            format!("{h}proxy: {{url: 'http://proxy:3128', fromEnvironment: true}}"),
            "spec.proxy needs exactly one of url or fromEnvironment: true",
        ),
        (
            "proxy-none",
            format!("{h}proxy: {{fromEnvironment: false}}"),
            "spec.proxy needs exactly one of url or fromEnvironment: true",
        ),
        (
            "proxy-https",
            format!("{h}proxy: {{url: 'https://proxy:3128'}}"),
            "spec.proxy.url must be an http:// URL with a host",
        ),
        (
            "proxy-credentials",
            format!("{h}proxy: {{url: 'http://user:pw@proxy:3128'}}"),
            "spec.proxy.url must not carry credentials",
        ),
        (
            "connect-to-port",
            format!("{h}connectTo: '10.0.0.7:8443'"),
            "spec.connectTo must be an IP address or a host name",
        ),
        (
            "connect-to-url",
            format!("{h}connectTo: 'https://gw.example'"),
            "spec.connectTo must be an IP address or a host name",
        ),
        (
            "connect-to-proxy",
            format!("{h}connectTo: 10.0.0.7\nproxy: {{url: 'http://proxy:3128'}}"),
            "spec.connectTo and spec.proxy cannot be combined",
        ),
    ];
    for (name, spec, want) in cases {
        let out = cluster().apply(&ns, &checker_manifest(name, spec)).await;
        assert_refused(&out, name, want);
    }
    let out = cluster()
        .kubectl_async(&["get", "wc", "-n", &ns, "-o", "name"])
        .await;
    assert_eq!(text(&out.stdout).trim(), "", "nothing was created");
    // The control: every new field at once, valid.
    apply_checker(&ns, "everything", "host: https://example.com
method: POST
body: '{}'
headers: [{name: X-Key, valueFrom: {secretKeyRef: {name: s, key: k}}}]
auth: {basic: {secretName: creds, usernameKey: u, passwordKey: p}}
jsonChecks: [{pointer: /status, equals: ok}, {pointer: ''}]
headerChecks: [{name: X-Version, regex: '^v2'}, {name: ETag}]
maxResponseTimeMillis: 500
failureThreshold: 3
successThreshold: 2
followRedirects: true
maxRedirects: 3
ipFamily: IPv4
proxy: {url: 'http://proxy.example:3128'}
tls: {serverName: example.com, caBundle: {configMapKeyRef: {name: ca, key: ca.crt}}, clientCertificate: {secretName: mtls}, minVersion: TLS13, certificateExpiryWarningDays: 21}")
    .await;
    apply_checker(
        &ns,
        "connect-to",
        "host: https://example.com\nconnectTo: 10.0.0.7",
    )
    .await;
    apply_checker(
        &ns,
        "connect-to-v6",
        "host: https://example.com\nconnectTo: 'fd00::7'",
    )
    .await;
    apply_checker(
        &ns,
        "connect-to-name",
        "host: https://example.com\nconnectTo: gw-1.example.net",
    )
    .await;
    apply_checker(&ns, "bearer-env-proxy", "host: https://example.com\nauth: {bearer: {secretKeyRef: {name: t, key: token}}}\nproxy: {fromEnvironment: true}\ntls: {caBundle: {secretKeyRef: {name: ca, key: ca.crt}}}")
    .await;
}

/// A header and basic auth from Secrets reach the target; a missing Secret or
/// key is InvalidSpec naming it and is picked up once created; a rotation is
/// picked up; and no value appears in the trace log, status, events or metrics.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_reach_the_target_and_never_leak() {
    let c = cluster();
    let ns = c.namespace("probe-secrets");
    let client = c.client().await;
    let api = checkers(&client, &ns);
    let sfx = rand_suffix();
    let (token_a, token_b) = (format!("tokA-{sfx}-7f3e"), format!("tokB-{sfx}-91c2"));
    let password = format!("pw-{sfx}-e4d1");
    let later = format!("later-{sfx}-0b6a");
    secret(
        &client,
        &ns,
        "api",
        "Opaque",
        &[("token", &token_a), ("unrelated", "x")],
    )
    .await;
    secret(
        &client,
        &ns,
        "creds",
        "kubernetes.io/basic-auth",
        &[("username", "probe-user"), ("password", &password)],
    )
    .await;
    let t = Server::http("127.0.0.1:0", |_| Answer::text("")).await;
    let op = spawn_op(c, &format!("op-{ns}"), &ns, &[], &[], "trace");
    op.wait_ready(Duration::from_secs(60)).await;
    let hdr = |key: &str| {
        format!(
            "host: {}\npath: /{key}\nintervalSeconds: 2\nheaders: [{{name: X-Api-Key, valueFrom: {{secretKeyRef: {{name: api, key: {key}}}}}}}]",
            t.url()
        )
    };
    apply_checker(&ns, "hdr", &hdr("token")).await;
    apply_checker(
        &ns,
        "basic",
        &format!(
            "host: {}\npath: /basic\nintervalSeconds: 2\nauth: {{basic: {{secretName: creds}}}}",
            t.url()
        ),
    )
    .await;
    apply_checker(&ns, "nokey", &hdr("absent")).await;
    apply_checker(&ns, "missing", &format!("host: {}\npath: /missing\nintervalSeconds: 2\nheaders: [{{name: X-Later, valueFrom: {{secretKeyRef: {{name: later, key: v}}}}}}]", t.url()))
    .await;

    let basic = format!(
        "Basic {}",
        base64(format!("probe-user:{password}").as_bytes())
    );
    let header_seen = |path: &'static str, header: &'static str, want: String| {
        let t = &t;
        async move {
            eventually(
                Duration::from_secs(90),
                &format!("{path} with {header}"),
                || {
                    let want = want.clone();
                    async move {
                        t.seen()
                            .iter()
                            .any(|s| s.uri == path && s.headers.get(header) == Some(&want))
                            .then_some(())
                    }
                },
            )
            .await
        }
    };
    header_seen("/token", "x-api-key", token_a.clone()).await;
    header_seen("/basic", "authorization", basic.clone()).await;
    wait_condition(
        &api,
        "hdr",
        "Ready",
        "True",
        "ProbeSucceeded",
        Duration::from_secs(20),
    )
    .await;
    wait_condition(
        &api,
        "basic",
        "Ready",
        "True",
        "ProbeSucceeded",
        Duration::from_secs(20),
    )
    .await;
    let m = wait_condition(
        &api,
        "missing",
        "Ready",
        "False",
        "InvalidSpec",
        Duration::from_secs(20),
    )
    .await;
    println!("missing: {}", m.message);
    assert!(
        m.message.contains("Secret \"later\" not found"),
        "{}",
        m.message
    );
    let k = wait_condition(
        &api,
        "nokey",
        "Ready",
        "False",
        "InvalidSpec",
        Duration::from_secs(20),
    )
    .await;
    println!("nokey: {}", k.message);
    assert!(
        k.message.contains("Secret \"api\"") && k.message.contains("has no key \"absent\""),
        "{}",
        k.message
    );
    assert!(
        t.seen()
            .iter()
            .all(|s| s.uri != "/absent" && s.uri != "/missing")
    );

    // Created later: picked up without touching the checker.
    let created = Instant::now();
    secret(&client, &ns, "later", "Opaque", &[("v", &later)]).await;
    header_seen("/missing", "x-later", later.clone()).await;
    println!(
        "a Secret created later was in use after {:?}",
        created.elapsed()
    );
    wait_condition(
        &api,
        "missing",
        "Ready",
        "True",
        "ProbeSucceeded",
        Duration::from_secs(20),
    )
    .await;

    // Rotation: within the cache TTL (60 s) plus a refresh period (15 s).
    let rotated = Instant::now();
    {
        use k8s_openapi::api::core::v1::Secret;
        let sapi: kube::Api<Secret> = kube::Api::namespaced(client.clone(), &ns);
        sapi.patch(
            "api",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(serde_json::json!({"stringData": {"token": token_b}})),
        )
        .await
        .unwrap();
    }
    header_seen("/token", "x-api-key", token_b.clone()).await;
    let took = rotated.elapsed();
    println!("rotation in use after {took:?}");
    assert!(took <= Duration::from_secs(80), "{took:?}");
    tokio::time::sleep(Duration::from_secs(3)).await;

    // Nowhere: the trace log, status, events, metrics.
    let log = op.log_text();
    let status = text(
        &cluster()
            .kubectl_async(&["get", "wc", "-n", &ns, "-o", "yaml"])
            .await
            .stdout,
    );
    let events = text(
        &cluster()
            .kubectl_async(&["get", "events.events.k8s.io", "-n", &ns, "-o", "yaml"])
            .await
            .stdout,
    );
    let metrics = op.scrape().await;
    assert!(
        log.lines().count() > 1000 && log.contains("TRACE"),
        "a trace log"
    );
    assert!(status.contains("InvalidSpec") || status.contains("ProbeSucceeded"));
    assert!(events.contains("WebChecker"), "{events}");
    assert!(metrics.contains("webchecker_probes_total"));
    let mut needles = vec![
        token_a.clone(),
        token_b.clone(),
        password.clone(),
        later.clone(),
        basic.clone(),
    ];
    for v in [&token_a, &token_b, &password, &later] {
        needles.push(base64(v.as_bytes()));
    }
    needles.push(base64(format!("probe-user:{password}").as_bytes()));
    for (what, hay) in [
        ("log", &log),
        ("status", &status),
        ("events", &events),
        ("metrics", &metrics),
    ] {
        for n in &needles {
            assert!(
                !hay.contains(n.as_str()),
                "a secret value ({n}) appears in the {what}"
            );
        }
    }
    println!(
        "searched {} log lines ({} KiB), status, events and metrics: no value found",
        log.lines().count(),
        log.len() / 1024
    );
}
