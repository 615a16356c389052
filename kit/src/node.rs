//! A real node for end-to-end tests of the Helm install (hack/node.sh): the
//! local control plane plus kubelet, containerd, CNI and kube-proxy, with the
//! images of `make image` loaded. Pods reach the node's address (where the
//! witness listens), never the host's loopback.
//!
//! `WEBCHECKER_NODE_DIR=<dir of make node-up>` reuses a running node (and
//! leaves it running); otherwise the tests start their own, stopped by a
//! reaper when the test process exits.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::api::ListParams;
use kube::{Api, Client, ResourceExt};

use super::oci::{Image, archive};
use super::readme;
use super::registry::Registry;
use super::release::ok;
pub use super::release::{CHART, run};
use super::{Cluster, SETUP_LIMIT, TOOL_LIMIT, bounded, repo, target_dir};

pub struct Node {
    pub cluster: Cluster,
    /// The node's address: pods reach the host there.
    pub ip: String,
    /// Tag of the images loaded (`make image`'s IMAGE_TAG).
    pub tag: String,
}

fn env_value(file: &Path, key: &str) -> Option<String> {
    let text = std::fs::read_to_string(file).ok()?;
    text.lines().find_map(|l| {
        l.strip_prefix(&format!("{key}="))
            .map(|v| v.trim_matches(|c| c == '\'' || c == '"').to_string())
    })
}

static SHARED: OnceLock<Node> = OnceLock::new();

impl Node {
    /// The node shared by the tests of this binary.
    pub fn shared() -> &'static Node {
        SHARED.get_or_init(Node::start)
    }

    fn start() -> Node {
        let images: Vec<PathBuf> = ["pause", "webchecker-operator", "chart-test"]
            .iter()
            .map(|n| archive(n))
            .collect();
        let name = Image::read(&images[1]).name();
        let tag = name.rsplit(':').next().unwrap_or_default().to_string();
        let list = images
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(" ");
        let dir = match std::env::var_os("WEBCHECKER_NODE_DIR") {
            Some(d) => {
                let dir = std::fs::canonicalize(PathBuf::from(d)).expect("WEBCHECKER_NODE_DIR");
                let st = bounded("bash", SETUP_LIMIT)
                    .arg(repo().join("hack/node.sh"))
                    .args(["load", dir.to_str().unwrap()])
                    .args(&images)
                    .status()
                    .unwrap();
                assert!(st.success(), "hack/node.sh load failed");
                dir
            }
            None => {
                let dir = repo()
                    .join("target")
                    .join("e2e")
                    .join(format!("node-{}", std::process::id()));
                std::fs::create_dir_all(&dir).unwrap();
                let st = bounded("bash", SETUP_LIMIT)
                    .arg(repo().join("hack/node.sh"))
                    .args(["up", dir.to_str().unwrap()])
                    .env("NODE_IMAGES", &list)
                    .stdout(Stdio::null())
                    .status()
                    .expect("run hack/node.sh up");
                // Reaper: take the node down when this test process exits.
                crate::reap_at_exit(&repo().join("hack/node.sh"), &dir);
                assert!(
                    st.success(),
                    "hack/node.sh up failed (see {})",
                    dir.display()
                );
                dir
            }
        };
        let bin = env_value(&dir.join("cluster.env"), "BIN").expect("BIN in cluster.env");
        let ip = env_value(&dir.join("node/node.env"), "NODE_IP").expect("NODE_IP in node.env");
        Node {
            cluster: Cluster {
                kubeconfig: dir.join("kubeconfig"),
                dir,
                bin: PathBuf::from(bin),
            },
            ip,
            tag,
        }
    }

    pub fn helm(&self, args: &[&str]) -> Command {
        let home = repo().join("target").join("e2e").join("helm-home");
        let mut c = bounded(self.cluster.bin.join("helm"), TOOL_LIMIT);
        c.current_dir(repo())
            .args(args)
            .env("KUBECONFIG", &self.cluster.kubeconfig)
            .env("HELM_CACHE_HOME", home.join("cache"))
            .env("HELM_CONFIG_HOME", home.join("config"))
            .env("HELM_DATA_HOME", home.join("data"));
        c
    }

    pub fn kubectl(&self, args: &[&str]) -> Command {
        let mut c = bounded(self.cluster.bin.join("kubectl"), TOOL_LIMIT);
        c.env("KUBECONFIG", &self.cluster.kubeconfig).args(args);
        c
    }

    /// `ctr` against the node's containerd (namespace k8s.io).
    pub fn ctr(&self, args: &[&str]) -> Command {
        let mut c = bounded("bash", TOOL_LIMIT);
        c.arg(repo().join("hack/node.sh"))
            .arg("ctr")
            .arg(&self.cluster.dir)
            .args(args);
        c
    }

    /// Lets the node's containerd pull from `registry` over TLS with its
    /// CA, as an administrator does (`hack/node.sh trust-registry`:
    /// containerd's certs.d/<host>/hosts.toml).
    pub async fn trust_registry(&self, registry: &Registry) {
        let mut c = bounded("bash", TOOL_LIMIT);
        c.arg(repo().join("hack/node.sh"))
            .arg("trust-registry")
            .arg(&self.cluster.dir)
            .arg(registry.host())
            .arg(&registry.ca_file);
        must(c, "hack/node.sh trust-registry").await;
    }

    /// A block of the README's Install section as a user on this machine
    /// runs it: against this node (KUBECONFIG), its helm and kubectl first on
    /// PATH, helm's state where the tests keep it, and the host trusting
    /// `registry`'s CA (SSL_CERT_FILE, read by skopeo and helm).
    pub fn readme(&self, block: &str, registry: &Registry) -> Command {
        let home = repo().join("target").join("e2e").join("helm-home");
        let mut c = readme::script(block, &self.cluster.bin);
        c.env("KUBECONFIG", &self.cluster.kubeconfig)
            .env("HELM_CACHE_HOME", home.join("cache"))
            .env("HELM_CONFIG_HOME", home.join("config"))
            .env("HELM_DATA_HOME", home.join("data"))
            .env("SSL_CERT_FILE", registry.trust_bundle())
            .env("CARGO_TARGET_DIR", target_dir());
        c
    }

    /// A second name for an image already loaded (a "new" tag for upgrades).
    pub async fn tag_image(&self, repository: &str, new_tag: &str) {
        let src = format!("docker.io/library/{repository}:{}", self.tag);
        let dst = format!("docker.io/library/{repository}:{new_tag}");
        must(
            self.ctr(&["images", "tag", "--force", &src, &dst]),
            "ctr images tag",
        )
        .await;
    }
}

/// Runs a command that must succeed; returns its stdout.
pub async fn must(cmd: Command, what: &str) -> String {
    ok(run(cmd).await, what)
}

/// Pods of a release, as the API has them now.
pub async fn release_pods(client: &Client, ns: &str, release: &str) -> Vec<Pod> {
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    let lp = ListParams::default().labels(&format!(
        "app.kubernetes.io/instance={release},app.kubernetes.io/name=webchecker-operator"
    ));
    api.list(&lp).await.map(|l| l.items).unwrap_or_default()
}

pub fn is_ready(p: &Pod) -> bool {
    p.metadata.deletion_timestamp.is_none()
        && p.status.as_ref().is_some_and(|s| {
            s.phase.as_deref() == Some("Running")
                && s.conditions
                    .as_ref()
                    .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
        })
}

/// Every pod of the release seen while the suite runs, with the last time it
/// was listed (a watcher polls twice a second): the witness must see no other
/// replica names, and no probe from a pod after its object was gone (the API
/// drops a pod only once the kubelet reports its containers ended).
#[derive(Clone, Default)]
pub struct PodNames(Arc<Mutex<BTreeMap<String, Instant>>>);

impl PodNames {
    pub fn watch(client: Client, ns: String, release: String) -> PodNames {
        let names = PodNames::default();
        let n = names.clone();
        tokio::spawn(async move {
            loop {
                let pods = release_pods(&client, &ns, &release).await;
                let now = Instant::now();
                {
                    let mut m = n.0.lock().unwrap();
                    for p in pods {
                        m.insert(p.name_any(), now);
                    }
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        });
        names
    }

    pub fn contains(&self, name: &str) -> bool {
        self.0.lock().unwrap().contains_key(name)
    }

    /// When `name` was last listed, if it has not been for `absent` now.
    pub fn gone_since(&self, name: &str, absent: Duration) -> Option<Instant> {
        let last = *self.0.lock().unwrap().get(name)?;
        (last.elapsed() > absent).then_some(last)
    }
}

/// Waits until the release has exactly `n` pods, all Running and Ready, none
/// of `gone`; returns their names.
pub async fn wait_ready_pods(
    client: &Client,
    ns: &str,
    release: &str,
    n: usize,
    gone: &[String],
    timeout: Duration,
) -> Vec<String> {
    let deadline = Instant::now() + timeout;
    loop {
        let pods = release_pods(client, ns, release).await;
        let ready: Vec<String> = pods
            .iter()
            .filter(|p| is_ready(p))
            .map(|p| p.name_any())
            .collect();
        if pods.len() == n && ready.len() == n && !ready.iter().any(|r| gone.contains(r)) {
            return ready;
        }
        if Instant::now() > deadline {
            let state: Vec<String> = pods
                .iter()
                .map(|p| {
                    format!(
                        "{} {:?} ready={}",
                        p.name_any(),
                        p.status.as_ref().and_then(|s| s.phase.clone()),
                        is_ready(p)
                    )
                })
                .collect();
            panic!(
                "timed out after {timeout:?} waiting for {n} Ready pods (not {gone:?}): {state:?}"
            );
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}
