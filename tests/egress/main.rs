//! Addresses a checker can reach (docs/security.md): the forgery guard's
//! defaults, the API server and kubelet addresses it learns from the cluster,
//! the private-network restriction per namespace, and proxied targets.
//!
//! The control plane here publishes its own EndpointSlice (the shared test
//! clusters run with `--endpoint-reconciler-type=none`): it advertises
//! 192.0.2.10 (TEST-NET-1; an endpoint may not be loopback), an address that
//! nothing on this machine answers and no probe may dial. Targets are
//! listeners on loopback that count every connection; a denied address must
//! end `Forbidden` with no connection at its listener.

mod operator;
mod proxies;
use webchecker_kit as support;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Api;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use webchecker::api::{WebChecker, WebCheckerSpec};
use webchecker::probe::{AddressPolicy, ClusterAddresses, Prober, Reason};

use support::*;

/// What the API server of these tests advertises (and publishes in its
/// EndpointSlice).
const ADVERTISED: &str = "192.0.2.10";

fn cluster() -> &'static Cluster {
    static C: OnceLock<Cluster> = OnceLock::new();
    C.get_or_init(|| {
        Cluster::start_with(
            "egress",
            &format!("--endpoint-reconciler-type=lease --advertise-address={ADVERTISED}"),
        )
    })
}

// ============================================================== helpers

/// A TCP listener that counts connections; it answers every request head
/// with 200 and remembers its first line (as a target or as a proxy).
#[derive(Clone)]
struct Recorder {
    addr: SocketAddr,
    accepts: Arc<AtomicUsize>,
    heads: Arc<Mutex<Vec<String>>>,
}

impl Recorder {
    async fn bind(at: &str) -> Recorder {
        let l = support::bind(at)
            .await
            .unwrap_or_else(|e| panic!("cannot listen on {at}: {e}"));
        let r = Recorder {
            addr: l.local_addr().unwrap(),
            accepts: Arc::default(),
            heads: Arc::default(),
        };
        let (accepts, heads) = (r.accepts.clone(), r.heads.clone());
        tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                accepts.fetch_add(1, Ordering::SeqCst);
                let heads = heads.clone();
                tokio::spawn(async move {
                    let mut head = Vec::new();
                    let mut buf = [0u8; 1024];
                    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 16384 {
                        match tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf)).await {
                            Ok(Ok(n)) if n > 0 => head.extend_from_slice(&buf[..n]),
                            _ => return,
                        }
                    }
                    let line = String::from_utf8_lossy(&head)
                        .lines()
                        .next()
                        .unwrap_or_default()
                        .to_string();
                    heads.lock().unwrap().push(line);
                    let _ = s
                        .write_all(
                            b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
                        )
                        .await;
                });
            }
        });
        r
    }

    fn port(&self) -> u16 {
        self.addr.port()
    }

    fn accepts(&self) -> usize {
        self.accepts.load(Ordering::SeqCst)
    }

    fn heads(&self) -> Vec<String> {
        self.heads.lock().unwrap().clone()
    }
}

/// A loopback address of its own for this test process (127.0.0.0/8 is all
/// loopback on Linux), so that fixed ports such as 10250 are free on it.
fn own_loopback(n: u8) -> String {
    format!("127.{}.{}.{n}", std::process::id() % 250 + 1, rand_byte())
}

fn rand_byte() -> u8 {
    (std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos()
        % 250) as u8
        + 1
}

fn kubectl_ok(c: &Cluster, args: &[&str], input: Option<&str>) -> String {
    let out = match input {
        Some(i) => c.kubectl_stdin(args, i),
        None => c.kubectl(args),
    };
    assert!(
        out.status.success(),
        "kubectl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).to_string()
}

fn checker(name: &str, spec: &str) -> String {
    checker_manifest(name, &format!("intervalSeconds: 2\n{spec}"))
}

fn apply(c: &Cluster, ns: &str, yaml: &str) {
    kubectl_ok(c, &["apply", "-n", ns, "-f", "-"], Some(yaml));
}

/// A Node object whose kubelet listens on `port` of each of `addresses`.
fn create_node(c: &Cluster, name: &str, addresses: &[&str], port: u16) {
    let addrs: String = addresses
        .iter()
        .map(|a| format!("  - {{type: InternalIP, address: '{a}'}}\n"))
        .collect();
    let yaml = format!(
        "apiVersion: v1\nkind: Node\nmetadata:\n  name: {name}\nstatus:\n  addresses:\n{addrs}  daemonEndpoints:\n    kubeletEndpoint:\n      Port: {port}\n"
    );
    kubectl_ok(c, &["create", "-f", "-"], Some(&yaml));
}

async fn probes(op: &Operator, ns: &str, name: &str, reason: &str) -> f64 {
    let m = op.metrics().await.unwrap_or_default();
    metric(
        &m,
        "webchecker_probes_total",
        &[("namespace", ns), ("name", name), ("reason", reason)],
    )
    .unwrap_or(0.0)
}

/// Waits until the operator probed `name` twice more with `reason` and
/// its Ready condition says so; returns the condition's message.
async fn settled(op: &Operator, api: &Api<WebChecker>, name: &str, reason: &str) -> String {
    let ns = api.namespace().unwrap().to_string();
    let before = probes(op, &ns, name, reason).await;
    eventually(
        Duration::from_secs(45),
        &format!("{ns}/{name}: two more probes with reason {reason}"),
        || async { (probes(op, &ns, name, reason).await >= before + 2.0).then_some(()) },
    )
    .await;
    eventually(
        Duration::from_secs(30),
        &format!("{ns}/{name}: Ready reason {reason}"),
        || async {
            let c = api
                .get_opt(name)
                .await
                .ok()
                .flatten()?
                .status?
                .condition("Ready")?
                .clone();
            (c.reason == reason).then_some(c.message)
        },
    )
    .await
}

/// The API server's addresses as the cluster publishes them: the
/// ClusterIP of default/kubernetes and the EndpointSlice's address:port.
async fn published_api_server(c: &Cluster) -> (String, SocketAddr) {
    let client = c.client().await;
    let svc: Api<Service> = Api::namespaced(client.clone(), "default");
    let ip = svc
        .get("kubernetes")
        .await
        .unwrap()
        .spec
        .unwrap()
        .cluster_ip
        .unwrap();
    let slices: Api<EndpointSlice> = Api::namespaced(client, "default");
    let ep = eventually(
        Duration::from_secs(30),
        "the API server's EndpointSlice",
        || async {
            let s = slices.get_opt("kubernetes").await.ok().flatten()?;
            let addr = s.endpoints.as_ref()?.first()?.addresses.first()?.clone();
            let port = s.ports.as_ref()?.first()?.port?;
            Some(SocketAddr::new(addr.parse().ok()?, port as u16))
        },
    )
    .await;
    assert_eq!(ep.ip().to_string(), ADVERTISED);
    (ip, ep)
}

fn api_port(c: &Cluster) -> u16 {
    let kc = std::fs::read_to_string(&c.kubeconfig).unwrap();
    let server = kc
        .lines()
        .find_map(|l| l.trim().strip_prefix("server:"))
        .expect("server in kubeconfig")
        .trim()
        .trim_matches('"');
    server.rsplit(':').next().unwrap().parse().unwrap()
}

fn with_fast(extra: &[&str]) -> Vec<String> {
    FAST_LEASES
        .iter()
        .chain(extra)
        .map(|s| s.to_string())
        .collect()
}

fn spawn(c: &Cluster, ns: &str, extra: &[&str]) -> Operator {
    let args = with_fast(extra);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    Operator::spawn(c, &format!("op-{ns}"), ns, &args)
}
