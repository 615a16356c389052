//! Every file of examples/ is applied as committed (`kubectl apply -f
//! examples/<file>`, in a namespace of the test) and reaches the state its
//! comment promises, against real servers nobody here wrote: Debian's nginx
//! (HTTPS, basic and bearer auth), grpc-go's health server, exim (SMTP with
//! STARTTLS, SMTPS), operator processes against the real control plane, the
//! real helm for the values files, Flux's own health evaluators and
//! kustomize-controller's Kustomization CRD (hack/build-flux-health.sh), and
//! Debian's Lua 5.1 for the Argo CD health script.
//!
//! The examples name hosts as a cluster would (`shop.shop.svc`,
//! `api.example.com`) and their usual ports (443, 50051, 25): the kit's name
//! server answers each name with a loopback address of the test's own, where
//! the test's server listens on the manifest's port. A certificate signed by
//! a test CA stands in for one the public roots trust: the operator trusts
//! that CA through `--ca-bundle` (the chart's `caBundle`), except where the
//! example brings its own CA (https-ca-configmap.yaml).

mod chart_values;
mod demo;
mod dependencies;
mod discovery;
mod gitops;
mod https;
mod maintenance;
mod protocols;
mod slo;
use webchecker_kit as support;
mod zones;

use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::time::Duration;

use kube::Api;
use serde_yaml::Value;
use webchecker::api::{Condition, WebChecker};

use support::dns::Dns;
use support::nginx::Nginx;
use support::release::text;
use support::targets::{Leaf, TestCa};
use support::*;

/// Bound of a checker's first verdict after its manifest is applied: the
/// first probe starts within 0.5 s of the assignment (docs/architecture.md),
/// Secret and ConfigMap reads included; the rest is room for a loaded
/// two-core machine.
const FIRST: Duration = Duration::from_secs(60);

/// Bound of a verdict after the target changed: the next probe comes within
/// one interval; twice that plus room for the machine.
fn after_change(interval_seconds: u64) -> Duration {
    Duration::from_secs(2 * interval_seconds + 30)
}

fn cluster() -> &'static Cluster {
    Cluster::shared("examples")
}

/// An example's path.
fn example(file: &str) -> PathBuf {
    repo().join("examples").join(file)
}

/// `kubectl apply -n <ns> -f examples/<file>`: the file as committed. Its
/// output.
async fn apply_example(ns: &str, file: &str) -> String {
    let path = example(file);
    let out = cluster()
        .kubectl_async(&["apply", "-n", ns, "-f", path.to_str().unwrap()])
        .await;
    assert!(
        out.status.success(),
        "kubectl apply -f examples/{file}: {}",
        text(&out.stderr)
    );
    let said = text(&out.stdout);
    println!(
        "$ kubectl apply -n {ns} -f examples/{file}\n{}",
        said.trim_end()
    );
    said
}

/// `kubectl` that must succeed; its stdout.
async fn kubectl(args: &[&str]) -> String {
    let out = cluster().kubectl_async(args).await;
    assert!(
        out.status.success(),
        "kubectl {args:?}: {}",
        text(&out.stderr)
    );
    text(&out.stdout)
}

/// The YAML documents of an example (to give the test's servers the
/// placeholder credentials the example's Secrets carry).
fn documents(file: &str) -> Vec<Value> {
    use serde::Deserialize;
    let yaml = std::fs::read_to_string(example(file)).unwrap();
    serde_yaml::Deserializer::from_str(&yaml)
        .map(|d| Value::deserialize(d).unwrap_or_else(|e| panic!("examples/{file}: {e}")))
        .filter(|v| !v.is_null())
        .collect()
}

/// `stringData[key]` of the Secret `name` of an example.
fn secret_value(file: &str, name: &str, key: &str) -> String {
    documents(file)
        .into_iter()
        .find(|d| d["kind"] == "Secret" && d["metadata"]["name"] == name)
        .and_then(|d| d["stringData"][key].as_str().map(str::to_string))
        .unwrap_or_else(|| panic!("examples/{file}: no Secret {name} with stringData.{key}"))
}

/// A loopback address of the test's own: a manifest's port is free on it.
fn loopback_ip() -> Ipv4Addr {
    let r: u32 = rand::random();
    Ipv4Addr::new(
        127,
        (100 + r % 100) as u8,
        (r >> 8) as u8,
        (2 + (r >> 16) % 250) as u8,
    )
}

/// The kit's name server answers `names` with `ip`.
fn resolve(names: &[&str], ip: Ipv4Addr) {
    for n in names {
        Dns::shared().add(n, &[ip.into()]);
    }
}

/// An operator replica watching `ns`, with fast leases and `extra` flags,
/// ready. The kit points it at its name server and allows loopback.
async fn operator(ns: &str, identity: &str, extra: &[&str]) -> Operator {
    let mut args: Vec<&str> = FAST_LEASES.to_vec();
    args.extend_from_slice(extra);
    let op = Operator::spawn(cluster(), identity, ns, &args);
    op.wait_ready(Duration::from_secs(60)).await;
    op
}

/// A CA standing in for the public roots: the operator trusts it with
/// `--ca-bundle` (a file of this test).
struct PublicCa {
    ca: TestCa,
    flag: String,
}

impl PublicCa {
    fn new() -> PublicCa {
        let ca = TestCa::new();
        let file = cluster()
            .dir
            .join(format!("public-ca-{}.pem", rand_suffix()));
        std::fs::write(&file, &ca.pem).unwrap();
        PublicCa {
            flag: format!("--ca-bundle={}", file.display()),
            ca,
        }
    }
}

/// nginx serving `names` over HTTPS on port 443 of `ip` with the
/// certificate `leaf`, the pages of www/ and `locations` (location blocks
/// of the server); `files` are written beside its config (pages under www/,
/// an htpasswd file). Started once it listens; the kit's name server
/// answers `names` with `ip`.
async fn https_site(
    ip: Ipv4Addr,
    names: &[&str],
    leaf: &Leaf,
    files: &[(&str, &str)],
    locations: &str,
) -> Nginx {
    let server = format!(
        "server {{
  listen {ip}:443 ssl;
  server_name {};
  ssl_certificate site.crt;
  ssl_certificate_key site.key;
  root www;
{locations}
}}",
        names.join(" ")
    );
    let mut all: Vec<(String, String)> = vec![
        ("site.crt".into(), leaf.cert_pem.clone()),
        ("site.key".into(), leaf.key_pem.clone()),
    ];
    all.extend(files.iter().map(|(p, t)| (p.to_string(), t.to_string())));
    let web = tokio::task::spawn_blocking(move || {
        let files: Vec<(&str, &str)> = all.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
        Nginx::start(&files, &server, &[(ip, 443).into()])
    })
    .await
    .unwrap();
    resolve(names, ip);
    web
}

/// A fresh namespace of the test and its checkers' API.
async fn world(prefix: &str) -> (String, Api<WebChecker>) {
    let ns = cluster().namespace(prefix);
    let api = Api::namespaced(cluster().client().await, &ns);
    (ns, api)
}

/// Waits until checker `name` has the condition `type_` with `status` and
/// `reason`; on a timeout the panic shows the condition as it last was.
async fn wait_condition(
    api: &Api<WebChecker>,
    name: &str,
    (type_, status, reason): (&str, &str, &str),
    within: Duration,
) -> Condition {
    let deadline = std::time::Instant::now() + within;
    loop {
        let c = condition(api, name, type_).await;
        if let Some(c) = c
            .as_ref()
            .filter(|c| c.status == status && c.reason == reason)
        {
            println!("{name}: {type_}={status} {reason}: {}", c.message);
            return c.clone();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{name}: no {type_}={status} ({reason}) within {within:?}; it is {c:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The checkers of `ns` as `kubectl get wc` shows them (for the log).
async fn show(ns: &str) {
    let out = kubectl(&["get", "wc", "-n", ns, "-o", "wide"]).await;
    println!("$ kubectl get wc -n {ns} -o wide\n{}", out.trim_end());
}

/// The interval of a checker as the API server defaulted it.
async fn interval_of(api: &Api<WebChecker>, name: &str) -> u64 {
    api.get(name).await.unwrap().spec.interval_seconds as u64
}

/// Every file of examples/ (but README.md) is one that a test here applies,
/// starts with a comment (what it shows, the state it reaches) unless it is
/// one of the demo's or the seed's, which keep theirs, and has its line in
/// examples/README.md.
#[test]
fn every_example_is_applied_by_a_test_and_listed() {
    const TESTED: &[&str] = &[
        "argocd-health-check.yaml",
        "basic-auth.yaml",
        "bearer-auth.yaml",
        "demo.yaml",
        "dependencies.yaml",
        "flux-kustomization.yaml",
        "grpc-health.yaml",
        "httproute.yaml",
        "https-ca-configmap.yaml",
        "ingress.yaml",
        "maintenance.yaml",
        "seed/badnews.yaml",
        "seed/flant.yaml",
        "slo.yaml",
        "smtp-starttls.yaml",
        "tls-certificate-expiry.yaml",
        "values-kube-prometheus-stack.yaml",
        "values-multi-zone.yaml",
        "zones.yaml",
    ];
    let root = repo().join("examples");
    let mut found = Vec::new();
    let mut dirs = vec![root.clone()];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                dirs.push(p);
            } else {
                found.push(p.strip_prefix(&root).unwrap().to_str().unwrap().to_string());
            }
        }
    }
    found.retain(|f| f != "README.md");
    found.sort();
    assert_eq!(
        found, TESTED,
        "examples/ and the files tests/examples/main.rs applies"
    );
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    for f in TESTED {
        assert!(
            readme.contains(&format!("({f})")),
            "examples/README.md does not link {f}"
        );
        if f.starts_with("seed/") || *f == "demo.yaml" {
            continue;
        }
        let first = std::fs::read_to_string(root.join(f)).unwrap();
        assert!(
            first.starts_with("# "),
            "examples/{f} starts without its comment"
        );
    }
}
