//! Part 2: admission rules, and Secrets that reach the target and never leak.

use super::ops::*;
use super::*;

/// `(checker name, spec lines after the host, the message admission must give)`.
const BAD_SPECS: &[(&str, &str, &str)] = &[
    (
        "auth-both",
        "auth: {basic: {secretName: a}, bearer: {secretKeyRef: {name: b, key: c}}}",
        "spec.auth needs exactly one of basic or bearer",
    ),
    (
        "auth-none",
        "auth: {}",
        "spec.auth needs exactly one of basic or bearer",
    ),
    (
        "auth-and-header",
        "headers: [{name: AUTHORIZATION, value: x}]\nauth: {bearer: {secretKeyRef: {name: b, key: c}}}",
        "spec.auth and a header named Authorization cannot be combined",
    ),
    (
        "basic-no-secret",
        "auth: {basic: {}}",
        "spec.auth.basic.secretName: Required value",
    ),
    (
        "json-pointer",
        "jsonChecks: [{pointer: status, equals: ok}]",
        "a jsonChecks pointer must be empty or start with '/'",
    ),
    (
        "header-check-name",
        "headerChecks: [{name: 'not a header'}]",
        "spec.headerChecks[0].name in body should match",
    ),
    (
        "ca-both",
        "tls: {caBundle: {secretKeyRef: {name: a, key: b}, configMapKeyRef: {name: a, key: b}}}",
        "spec.tls.caBundle needs exactly one of secretKeyRef or configMapKeyRef",
    ),
    (
        "ca-none",
        "tls: {caBundle: {}}",
        "spec.tls.caBundle needs exactly one of secretKeyRef or configMapKeyRef",
    ),
    (
        "ca-insecure",
        "tls: {insecureSkipVerify: true, caBundle: {configMapKeyRef: {name: a, key: b}}}",
        "spec.tls.caBundle has no effect with insecureSkipVerify: true",
    ),
    (
        "client-cert-no-secret",
        "tls: {clientCertificate: {}}",
        "spec.tls.clientCertificate.secretName: Required value",
    ),
    (
        "min-version",
        "tls: {minVersion: TLS11}",
        "Unsupported value: \"TLS11\"",
    ),
    (
        "expiry-days",
        "tls: {certificateExpiryWarningDays: 0}",
        "should be greater than or equal to 1",
    ),
    ("ip-family", "ipFamily: IPv5", "Unsupported value: \"IPv5\""),
    (
        "proxy-both",
        "proxy: {url: 'http://proxy:3128', fromEnvironment: true}",
        "spec.proxy needs exactly one of url or fromEnvironment: true",
    ),
    (
        "proxy-none",
        "proxy: {fromEnvironment: false}",
        "spec.proxy needs exactly one of url or fromEnvironment: true",
    ),
    (
        "proxy-https",
        "proxy: {url: 'https://proxy:3128'}",
        "spec.proxy.url must be an http:// URL with a host",
    ),
    (
        "proxy-credentials",
        "proxy: {url: 'http://user:pw@proxy:3128'}",
        "spec.proxy.url must not carry credentials",
    ),
    (
        "connect-to-port",
        "connectTo: '10.0.0.7:8443'",
        "spec.connectTo must be an IP address or a host name",
    ),
    (
        "connect-to-url",
        "connectTo: 'https://gw.example'",
        "spec.connectTo must be an IP address or a host name",
    ),
    (
        "connect-to-proxy",
        "connectTo: 10.0.0.7\nproxy: {url: 'http://proxy:3128'}",
        "spec.connectTo and spec.proxy cannot be combined",
    ),
];

/// The control: every new field at once, valid.
const EVERY_NEW_FIELD: &str = "host: https://example.com
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
tls: {serverName: example.com, caBundle: {configMapKeyRef: {name: ca, key: ca.crt}}, clientCertificate: {secretName: mtls}, minVersion: TLS13, certificateExpiryWarningDays: 21}";

/// `(checker name, spec)` that admission must accept, in the order applied.
const GOOD_SPECS: &[(&str, &str)] = &[
    ("everything", EVERY_NEW_FIELD),
    (
        "connect-to",
        "host: https://example.com\nconnectTo: 10.0.0.7",
    ),
    (
        "connect-to-v6",
        "host: https://example.com\nconnectTo: 'fd00::7'",
    ),
    (
        "connect-to-name",
        "host: https://example.com\nconnectTo: gw-1.example.net",
    ),
    (
        "bearer-env-proxy",
        "host: https://example.com\nauth: {bearer: {secretKeyRef: {name: t, key: token}}}\nproxy: {fromEnvironment: true}\ntls: {caBundle: {secretKeyRef: {name: ca, key: ca.crt}}}",
    ),
];

/// Each new admission rule rejects its example, with its message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn new_admission_rules_reject_bad_specs() {
    let c = cluster();
    let ns = c.namespace("probe-admission");
    let h = "host: https://example.com\n";
    for (name, rest, want) in BAD_SPECS {
        let spec = format!("{h}{rest}");
        let out = cluster().apply(&ns, &checker_manifest(name, &spec)).await;
        assert_refused(&out, name, want);
    }
    let out = cluster()
        .kubectl_async(&["get", "wc", "-n", &ns, "-o", "name"])
        .await;
    assert_eq!(text(&out.stdout).trim(), "", "nothing was created");
    for (name, spec) in GOOD_SPECS {
        apply_checker(&ns, name, spec).await;
    }
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
    let values = SecretValues::new(&rand_suffix());
    let target = Server::http("127.0.0.1:0", |_| Answer::text("")).await;
    let s = SecretsTest {
        client,
        ns,
        api,
        target,
        values,
    };
    s.create_secrets().await;
    let op = spawn_op(c, &format!("op-{}", s.ns), &s.ns, &[], &[], "trace");
    op.wait_ready(Duration::from_secs(60)).await;
    s.apply_checkers().await;
    s.secrets_reach_the_target_or_name_what_is_missing().await;
    s.a_secret_created_later_is_picked_up().await;
    s.a_rotation_is_picked_up().await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    s.no_value_appears_anywhere(&op).await;
}

/// The values of the test's Secrets: unique to the run, so that finding one
/// anywhere is a leak.
struct SecretValues {
    token_a: String,
    token_b: String,
    password: String,
    later: String,
}

impl SecretValues {
    fn new(sfx: &str) -> SecretValues {
        SecretValues {
            token_a: format!("tokA-{sfx}-7f3e"),
            token_b: format!("tokB-{sfx}-91c2"),
            password: format!("pw-{sfx}-e4d1"),
            later: format!("later-{sfx}-0b6a"),
        }
    }

    /// The Authorization header basic auth sends.
    fn basic(&self) -> String {
        format!("Basic {}", base64(self.credentials().as_bytes()))
    }

    fn credentials(&self) -> String {
        format!("probe-user:{}", self.password)
    }

    /// Each value as is and base64-encoded, and the basic auth header and
    /// its encoded credentials.
    fn needles(&self) -> Vec<String> {
        let raw = [&self.token_a, &self.token_b, &self.password, &self.later];
        let mut needles: Vec<String> = raw.iter().map(|v| v.to_string()).collect();
        needles.push(self.basic());
        for v in raw {
            needles.push(base64(v.as_bytes()));
        }
        needles.push(base64(self.credentials().as_bytes()));
        needles
    }
}

/// The state `secrets_reach_the_target_and_never_leak` carries between its
/// phases.
struct SecretsTest {
    client: kube::Client,
    ns: String,
    api: kube::Api<WebChecker>,
    target: Server,
    values: SecretValues,
}

impl SecretsTest {
    async fn create_secrets(&self) {
        let v = &self.values;
        secret(
            &self.client,
            &self.ns,
            "api",
            "Opaque",
            &[("token", &v.token_a), ("unrelated", "x")],
        )
        .await;
        secret(
            &self.client,
            &self.ns,
            "creds",
            "kubernetes.io/basic-auth",
            &[("username", "probe-user"), ("password", &v.password)],
        )
        .await;
    }

    /// hdr and basic use the Secrets; nokey names a key api does not have;
    /// missing names a Secret not created yet.
    async fn apply_checkers(&self) {
        let (ns, url) = (&self.ns, self.target.url());
        let hdr = |key: &str| {
            format!(
                "host: {url}\npath: /{key}\nintervalSeconds: 2\nheaders: [{{name: X-Api-Key, valueFrom: {{secretKeyRef: {{name: api, key: {key}}}}}}}]"
            )
        };
        apply_checker(ns, "hdr", &hdr("token")).await;
        apply_checker(
            ns,
            "basic",
            &format!(
                "host: {url}\npath: /basic\nintervalSeconds: 2\nauth: {{basic: {{secretName: creds}}}}"
            ),
        )
        .await;
        apply_checker(ns, "nokey", &hdr("absent")).await;
        apply_checker(ns, "missing", &format!("host: {url}\npath: /missing\nintervalSeconds: 2\nheaders: [{{name: X-Later, valueFrom: {{secretKeyRef: {{name: later, key: v}}}}}}]"))
        .await;
    }

    /// Waits (90 s at most) until the target got a request for `path` with
    /// `header: want`.
    async fn header_seen(&self, path: &str, header: &str, want: &str) {
        eventually(
            Duration::from_secs(90),
            &format!("{path} with {header}"),
            || async {
                self.target
                    .seen()
                    .iter()
                    .any(|s| {
                        s.uri == path && s.headers.get(header).map(String::as_str) == Some(want)
                    })
                    .then_some(())
            },
        )
        .await
    }

    async fn secrets_reach_the_target_or_name_what_is_missing(&self) {
        let v = &self.values;
        self.header_seen("/token", "x-api-key", &v.token_a).await;
        self.header_seen("/basic", "authorization", &v.basic())
            .await;
        wait_ready(&self.api, "hdr", "True", "ProbeSucceeded").await;
        wait_ready(&self.api, "basic", "True", "ProbeSucceeded").await;
        let m = wait_ready(&self.api, "missing", "False", "InvalidSpec").await;
        println!("missing: {}", m.message);
        assert!(
            m.message.contains("Secret \"later\" not found"),
            "{}",
            m.message
        );
        let k = wait_ready(&self.api, "nokey", "False", "InvalidSpec").await;
        println!("nokey: {}", k.message);
        assert!(
            k.message.contains("Secret \"api\"") && k.message.contains("has no key \"absent\""),
            "{}",
            k.message
        );
        assert!(
            self.target
                .seen()
                .iter()
                .all(|s| s.uri != "/absent" && s.uri != "/missing")
        );
    }

    /// Created later: picked up without touching the checker.
    async fn a_secret_created_later_is_picked_up(&self) {
        let later = &self.values.later;
        let created = Instant::now();
        secret(&self.client, &self.ns, "later", "Opaque", &[("v", later)]).await;
        self.header_seen("/missing", "x-later", later).await;
        println!(
            "a Secret created later was in use after {:?}",
            created.elapsed()
        );
        wait_ready(&self.api, "missing", "True", "ProbeSucceeded").await;
    }

    /// Rotation: within the cache TTL (60 s) plus a refresh period (15 s).
    async fn a_rotation_is_picked_up(&self) {
        use k8s_openapi::api::core::v1::Secret;
        let token_b = &self.values.token_b;
        let rotated = Instant::now();
        let sapi: kube::Api<Secret> = kube::Api::namespaced(self.client.clone(), &self.ns);
        sapi.patch(
            "api",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(serde_json::json!({"stringData": {"token": token_b}})),
        )
        .await
        .unwrap();
        self.header_seen("/token", "x-api-key", token_b).await;
        let took = rotated.elapsed();
        println!("rotation in use after {took:?}");
        assert!(took <= Duration::from_secs(80), "{took:?}");
    }

    /// Nowhere: the trace log, status, events, metrics.
    async fn no_value_appears_anywhere(&self, op: &Operator) {
        let ns = &self.ns;
        let log = op.log_text();
        let status = text(
            &cluster()
                .kubectl_async(&["get", "wc", "-n", ns, "-o", "yaml"])
                .await
                .stdout,
        );
        let events = text(
            &cluster()
                .kubectl_async(&["get", "events.events.k8s.io", "-n", ns, "-o", "yaml"])
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
        let needles = self.values.needles();
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
}
