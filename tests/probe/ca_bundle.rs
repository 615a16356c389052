//! Part 2: `--ca-bundle`: a private CA trusted, in addition to the built-in
//! roots, by every checker without a `tls.caBundle` of its own; a checker's
//! own caBundle still replaces them; a bundle the operator cannot use stops
//! it at start, naming the file.

use support::targets::RecordingTarget;

use super::ops::*;
use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_private_ca_is_trusted_with_ca_bundle_and_only_then() {
    let c = cluster();
    let client = c.client().await;
    let private = TestCa::new();
    let t = RecordingTarget::https(&private.leaf(&["127.0.0.1"]), None, |_| Answer::ok()).await;
    let other = TestCa::new();
    let own = RecordingTarget::https(&other.leaf(&["127.0.0.1"]), None, |_| Answer::ok()).await;
    let bundle = c.dir.join(format!("ca-bundle-{}.crt", rand_suffix()));
    std::fs::write(&bundle, format!("# the cluster's CA\n{}", private.pem)).unwrap();
    let flag = format!("--ca-bundle={}", bundle.display());
    let own_ca = "tls: {caBundle: {configMapKeyRef: {name: own-ca, key: ca.crt}}}";
    let checkers_yaml = [
        ("private", format!("host: https://{}", t.addr)),
        // A TLS configuration of its own, still with the default roots.
        (
            "private-tls13",
            format!("host: https://{}\ntls: {{minVersion: TLS13}}", t.addr),
        ),
        ("own-ca", format!("host: https://{}\n{own_ca}", own.addr)),
        // Its own caBundle replaces the defaults, --ca-bundle's CA included.
        (
            "own-ca-elsewhere",
            format!("host: https://{}\n{own_ca}", t.addr),
        ),
    ];
    for with in [false, true] {
        let ns = c.namespace(if with { "probe-ca" } else { "probe-noca" });
        let api = checkers(&client, &ns);
        config_map(&client, &ns, "own-ca", &[("ca.crt", &other.pem)]).await;
        let extra: &[&str] = if with { &[&flag] } else { &[] };
        let op = spawn_op(c, &format!("op-{ns}"), &ns, extra, &[], "info");
        op.wait_ready(Duration::from_secs(60)).await;
        for (name, spec) in &checkers_yaml {
            apply_checker(&ns, name, &format!("{spec}\nintervalSeconds: 2")).await;
        }
        let (status, reason) = match with {
            true => ("True", "ProbeSucceeded"),
            false => ("False", "CertificateInvalid"),
        };
        let mut seen = Vec::new();
        for (name, status, reason) in [
            ("private", status, reason),
            ("private-tls13", status, reason),
            ("own-ca", "True", "ProbeSucceeded"),
            ("own-ca-elsewhere", "False", "CertificateInvalid"),
        ] {
            let within = Duration::from_secs(30);
            let cond = wait_condition(&api, name, "Ready", status, reason, within).await;
            // (own-ca-elsewhere: "bad signature", both test CAs have one name.)
            if status == "False" && name.starts_with("private") {
                assert!(
                    cond.message.contains("unknown certificate authority"),
                    "{name}: {}",
                    cond.message
                );
            }
            seen.push(format!("{name}: {reason}"));
        }
        println!("with --ca-bundle: {with}: {seen:?}");
        let logged = op.log_text().contains("--ca-bundle: 1 certificate(s) of");
        assert_eq!(logged, with, "the bundle trusted is logged, and only then");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ca_bundle_the_operator_cannot_use_stops_it_at_start() {
    let c = cluster();
    let dir = c.dir.join(format!("ca-bundles-{}", rand_suffix()));
    std::fs::create_dir_all(&dir).unwrap();
    let key_only = "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n";
    let cases = [
        ("missing.crt", None, "cannot read"),
        ("key.crt", Some(key_only), "holds no PEM certificate"),
    ];
    for (file, content, want) in cases {
        let path = dir.join(file);
        if let Some(text) = content {
            std::fs::write(&path, text).unwrap();
        }
        let flag = format!("--ca-bundle={}", path.display());
        let ns = format!("ca-{}", file.trim_end_matches(".crt"));
        let mut op = spawn_op(c, &format!("op-{ns}"), &ns, &[&flag], &[], "info");
        let what = format!("the operator with {flag} exits");
        let st = eventually(Duration::from_secs(30), &what, || {
            let st = op.exited();
            async move { st }
        })
        .await;
        let log = op.log_text();
        assert_eq!(st.code(), Some(1), "{file}: a clean error exit:\n{log}");
        assert!(!log.contains("panicked"), "{file}:\n{log}");
        for part in [
            "invalid configuration: --ca-bundle: ",
            path.to_str().unwrap(),
            want,
        ] {
            assert!(log.contains(part), "{file}: {part:?} not in:\n{log}");
        }
        println!("{file}: {}", log.lines().last().unwrap_or_default());
    }
}
