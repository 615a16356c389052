//! The README's Install section, word for word, on the real node, with the
//! registry a user would push to: Debian's docker-registry on the node's
//! address with a certificate of a test CA. The node's containerd trusts it
//! the way an administrator sets it up (certs.d/<host>/hosts.toml,
//! `hack/node.sh trust-registry`); the host's skopeo and helm through
//! SSL_CERT_FILE. Each block runs as written, the registry's address for the
//! README's placeholder:
//!
//! - install: `make push` (images with skopeo, the chart with `helm push`),
//!   `helm install oci://...`, `kubectl rollout status`. The images it
//!   builds are not those loaded at the node's start (another
//!   SOURCE_DATE_EPOCH), so nothing of them is on the node before. Every pod
//!   of the release runs the image of that registry (its imageID names the
//!   registry and the digest of the archive pushed, containerd lists the
//!   image under the registry's name, the registry served containerd the
//!   manifest and every blob) and is Ready. A pull that fails ends the test
//!   at once with the kubelet's reason;
//! - upgrade: the CRD from the chart in the registry, `helm upgrade`;
//! - uninstall.

use super::*;
use std::path::Path;

use support::oci::Image;
use support::readme;
use support::registry::Registry;
use support::release::ok;

const RELEASE: &str = "wc";
const NS: &str = "webchecker";
const PATH: &str = "team";

/// Runs `block` (the README's, for `registry`) to its end while watching the
/// release's pods: a pod that cannot pull its image fails the test then.
/// The images `make push` builds go to `out`, a second of the node's start
/// apart from those loaded there (SOURCE_DATE_EPOCH: every file and the
/// image's time), so containerd has none of their blobs and fetches each.
async fn run_watching_pulls(
    node: &Node,
    client: &Client,
    block: &str,
    registry: &Registry,
    out: &Path,
) {
    let epoch = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let mut child = node
        .readme(block, registry)
        .env("OUT", out)
        .env("SOURCE_DATE_EPOCH", epoch.to_string())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run bash");
    loop {
        if child.try_wait().unwrap().is_some() {
            let out = child.wait_with_output().unwrap();
            assert!(
                out.status.success(),
                "the README's block failed ({}):\n{block}\nstdout: {}\nstderr: {}\nregistry log:\n{}",
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr),
                registry.log_text()
            );
            println!("{}", String::from_utf8_lossy(&out.stdout));
            return;
        }
        for p in release_pods(client, NS, RELEASE).await {
            let waiting = p
                .status
                .iter()
                .flat_map(|s| s.container_statuses.iter().flatten())
                .filter_map(|c| c.state.as_ref()?.waiting.as_ref())
                .find(|w| {
                    matches!(
                        w.reason.as_deref(),
                        Some("ErrImagePull" | "ImagePullBackOff" | "InvalidImageName")
                    )
                })
                .cloned();
            if let Some(w) = waiting {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "{} does not pull its image: {:?}: {}\nregistry log:\n{}",
                    p.name_any(),
                    w.reason,
                    w.message.unwrap_or_default(),
                    registry.log_text()
                );
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn install_from_a_registry_as_the_readme_says() {
    let node = Node::shared();
    let client = node.cluster.client().await;
    let dir = support::repo()
        .join("target")
        .join("e2e")
        .join(format!("registry-{}", std::process::id()));
    let registry = Registry::start(node.ip.parse().expect("the node's address"), &dir);
    node.trust_registry(&registry).await;
    let at = format!("{}/{PATH}", registry.host());
    let version = env!("CARGO_PKG_VERSION");

    let t = Instant::now();
    let install = readme::for_registry(&readme::block_with("make push"), &at);
    let out = dir.join("oci");
    run_watching_pulls(node, &client, &install, &registry, &out).await;
    println!(
        "the README's install block, {} at {at}: {:.1?}",
        registry.addr,
        t.elapsed()
    );

    // The digest the registry holds is the archive's (skopeo --preserve-digests).
    let pushed = Image::read(&out.join("webchecker-operator.oci.tar"));
    let digest = pushed.index["manifests"][0]["digest"]
        .as_str()
        .expect("the archive's manifest digest")
        .to_string();
    let image = format!("{at}/webchecker-operator:{version}");
    let pods = wait_ready_pods(&client, NS, RELEASE, 3, &[], WAIT).await;
    for p in release_pods(&client, NS, RELEASE).await {
        let c = &p
            .status
            .as_ref()
            .unwrap()
            .container_statuses
            .as_ref()
            .unwrap()[0];
        assert_eq!(c.image, image, "{}", p.name_any());
        assert_eq!(
            c.image_id,
            format!("{at}/webchecker-operator@{digest}"),
            "{} runs an image that is not the one pushed to {at}",
            p.name_any()
        );
    }
    let images = must(node.ctr(&["images", "ls", "-q"]), "ctr images ls").await;
    assert!(
        images.lines().any(|l| l == image),
        "containerd has no {image}:\n{images}"
    );
    let repository = format!("{PATH}/webchecker-operator");
    let asked = registry.manifest_requests(&repository, "containerd");
    assert!(
        !asked.is_empty(),
        "containerd never asked the registry for the manifest:\n{}",
        registry.log_text()
    );
    // Every blob of the image (config and layers) came from the registry.
    let log = registry.log_text();
    let blobs: Vec<&str> = std::iter::once(&pushed.manifest["config"])
        .chain(pushed.manifest["layers"].as_array().unwrap())
        .map(|b| b["digest"].as_str().unwrap())
        .collect();
    for b in &blobs {
        let get = format!("\"GET /v2/{repository}/blobs/{b} ");
        assert!(
            log.lines()
                .any(|l| l.contains(&get) && l.contains(" 200 ") && l.contains("containerd")),
            "containerd did not fetch {b} from the registry:\n{log}"
        );
    }
    println!(
        "{pods:?} Ready, image {image} ({digest}, {} blobs fetched), pulled by containerd:\n  {}",
        blobs.len(),
        asked.join("\n  ")
    );

    let t = Instant::now();
    let upgrade = readme::for_registry(&readme::block_with("helm upgrade"), &at);
    run_watching_pulls(node, &client, &upgrade, &registry, &out).await;
    let list = must(node.helm(&["list", "-n", NS, "-o", "json"]), "helm list").await;
    support::release::assert_deployed(&serde_json::from_str(&list).unwrap(), 2, version);
    wait_ready_pods(&client, NS, RELEASE, 3, &[], WAIT).await;
    println!("the README's upgrade block: {:.1?}", t.elapsed());

    let uninstall = readme::block_with("helm uninstall");
    let out = run(node.readme(&uninstall, &registry)).await;
    ok(out, "the README's uninstall block");
    let deadline = Instant::now() + WAIT;
    while !release_pods(&client, NS, RELEASE).await.is_empty() {
        assert!(Instant::now() < deadline, "pods left after helm uninstall");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let _ = run(node.kubectl(&["delete", "namespace", NS, "--wait=false"])).await;
}
