//! A CRD upgrade as the docs say it (the README's Install section, the
//! chart's README and NOTES.txt), on a control plane of its own where Helm
//! created the CRD: `helm install` of a copy of the chart whose CRD is older
//! (a field less, one the current CRD dropped, another description). The README's upgrade block then runs
//! word for word against a registry on loopback that holds the current chart
//! (`helm push`); it must leave the current CRD and the release upgraded to
//! the current chart. Without `--force-conflicts` the same apply is refused
//! (the field manager `helm` owns the CRD's fields): the test checks that
//! too, so it keeps testing the case the flag is for. NOTES.txt, as Helm
//! prints it, and the chart's README show the README's `kubectl apply`.

use serde_json::Value as Json;

use super::*;
use support::readme;
use support::registry::Registry;
use support::release::base_values;
use support::repo;

const CRD_FILE: &str = "crds/webcheckers.test.network.io.yaml";
/// A field of the older CRD only: an upgrade must remove it.
const DROPPED: &str = "olderOnly";

/// The CRD's `spec` schema of its first version.
fn spec_schema(crd: &Json) -> &Json {
    &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
}

/// A copy of the chart at version 0.0.1 whose CRD lacks one optional field
/// of `spec`, has one more ([`DROPPED`]) and describes `spec` otherwise;
/// returns the field it lacks.
fn older_chart(at: &Path) -> String {
    let src = repo().join(CHART);
    let st = std::process::Command::new("cp")
        .arg("-a")
        .arg(&src)
        .arg(at)
        .status()
        .unwrap();
    assert!(st.success(), "cp -a {}", src.display());
    let chart = at.join("Chart.yaml");
    let text = std::fs::read_to_string(&chart).unwrap();
    let text: Vec<String> = text
        .lines()
        .map(|l| {
            if l.starts_with("version:") {
                "version: 0.0.1".to_string()
            } else {
                l.to_string()
            }
        })
        .collect();
    std::fs::write(&chart, text.join("\n") + "\n").unwrap();
    let file = at.join(CRD_FILE);
    let mut crd: Json = serde_yaml::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    let spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
        .as_object_mut()
        .expect("the CRD's spec schema");
    let required: Vec<Json> = spec
        .get("required")
        .and_then(Json::as_array)
        .cloned()
        .unwrap_or_default();
    let props = spec["properties"].as_object_mut().unwrap();
    let field = props
        .keys()
        .rev()
        .find(|k| !required.contains(&Json::String(k.to_string())))
        .expect("an optional field")
        .clone();
    props.remove(&field);
    props.insert(
        DROPPED.into(),
        serde_json::json!({"type": "string", "description": "a field the next version drops"}),
    );
    spec.insert(
        "description".into(),
        Json::String("an older WebChecker spec".into()),
    );
    std::fs::write(&file, serde_yaml::to_string(&crd).unwrap()).unwrap();
    field
}

/// The README's upgrade block's `kubectl apply` up to its file argument,
/// and its `helm pull`: what NOTES.txt and the chart's README must say too.
fn documented_apply(block: &str) -> [String; 2] {
    let line = |what: &str| {
        block
            .lines()
            .find(|l| l.trim_start().starts_with(what))
            .unwrap_or_else(|| panic!("no `{what}` in the README's upgrade block:\n{block}"))
            .trim()
            .to_string()
    };
    let apply = line("kubectl apply");
    let apply = apply[..apply.find(" -f ").expect("kubectl apply -f") + 4].to_string();
    let pull = line("helm pull");
    let pull = pull[pull.find(" --untar").expect("helm pull --untar")..].to_string();
    [apply, pull]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crd_upgrade_as_documented_over_a_crd_helm_created() {
    let cluster = Cluster::start_bare("crd-upgrade", "");
    let dir = platform::scratch("crd-upgrade-");
    let old = dir.path().join("webchecker-operator");
    let field = older_chart(&old);
    let notes = install_the_older_chart(&cluster, &old, &field).await;

    // The docs: NOTES.txt as `helm install` printed it, and the chart's README.
    let block = readme::block_with("helm upgrade");
    let [apply, pull] = documented_apply(&block);
    let chart_readme = std::fs::read_to_string(repo().join(CHART).join("README.md")).unwrap();
    for (doc, text) in [("NOTES.txt", &notes), ("the chart's README", &chart_readme)] {
        for cmd in [&apply, &pull] {
            assert!(
                text.contains(cmd.as_str()),
                "{doc} does not say `{cmd}` as the README's upgrade does:\n{text}"
            );
        }
    }

    let current = repo().join(CHART).join(CRD_FILE);
    refused_without_force_conflicts(&cluster, &current).await;

    // The current chart in a registry, as `make push` leaves it.
    let registry = Registry::start("127.0.0.1".parse().unwrap(), &dir.path().join("registry"));
    let path = format!("{}/team", registry.host());
    push_the_current_chart(&cluster, dir.path(), &registry, &path).await;

    let t = std::time::Instant::now();
    let home = repo().join("target").join("e2e").join("helm-home");
    let mut c = readme::script(&readme::for_registry(&block, &path), &cluster.bin);
    c.env("KUBECONFIG", &cluster.kubeconfig)
        .env("HELM_CACHE_HOME", home.join("cache"))
        .env("HELM_CONFIG_HOME", home.join("config"))
        .env("HELM_DATA_HOME", home.join("data"))
        .env("SSL_CERT_FILE", registry.trust_bundle());
    ok(run(c).await, "the README's upgrade block");
    println!("the README's upgrade block: {:.1?}", t.elapsed());

    let crd = kubectl_json(&cluster, &["get", "crd", CRD]).await;
    let want: Json = serde_yaml::from_str(&std::fs::read_to_string(&current).unwrap()).unwrap();
    assert!(
        !spec_schema(&crd)["properties"][&field].is_null(),
        "the CRD still lacks {field} after the upgrade"
    );
    assert!(
        spec_schema(&crd)["properties"][DROPPED].is_null(),
        "the CRD keeps {DROPPED}, which the current one dropped"
    );
    assert_eq!(
        spec_schema(&crd)["description"],
        spec_schema(&want)["description"],
        "the CRD's description after the upgrade"
    );
    let rel = install::helm_release(&cluster).await;
    support::release::assert_deployed(&Json::Array(rel), 2, env!("CARGO_PKG_VERSION"));
    cluster.down();
}

/// `helm install` of the older chart at `old`: its CRD, without `field`,
/// managed by helm. What helm printed (NOTES.txt).
async fn install_the_older_chart(cluster: &Cluster, old: &Path, field: &str) -> String {
    let base = base_values().to_str().unwrap();
    let out = ok(
        cluster_helm(
            cluster,
            &[
                "install",
                RELEASE,
                old.to_str().unwrap(),
                "-n",
                RELEASE_NS,
                "--create-namespace",
                "-f",
                base,
            ],
        )
        .await,
        "helm install of the older chart",
    );
    let crd = kubectl_json(cluster, &["get", "crd", CRD, "--show-managed-fields"]).await;
    assert!(
        spec_schema(&crd)["properties"][field].is_null(),
        "the older CRD has {field}"
    );
    let managers: Vec<&str> = crd["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["manager"].as_str())
        .collect();
    assert!(managers.contains(&"helm"), "managers: {managers:?}");
    out
}

/// What --force-conflicts is for: the current CRD, applied server-side
/// without it, is refused.
async fn refused_without_force_conflicts(cluster: &Cluster, current: &Path) {
    let out = kubectl(
        cluster,
        &[
            "apply",
            "--server-side",
            "--dry-run=server",
            "-f",
            current.to_str().unwrap(),
        ],
    )
    .await;
    let err = support::release::text(&out.stderr);
    assert!(
        !out.status.success() && err.contains("conflict"),
        "a server-side apply without --force-conflicts over the CRD helm created: {}\n{err}",
        out.status
    );
}

/// `helm package` of the current chart into `dir`, and `helm push` of it to
/// `oci://<path>/charts` of `registry`.
async fn push_the_current_chart(cluster: &Cluster, dir: &Path, registry: &Registry, path: &str) {
    let mut c = helm_command(&cluster.bin, None);
    c.args(["package", CHART, "--destination"]).arg(dir);
    ok(run(c).await, "helm package");
    let version = env!("CARGO_PKG_VERSION");
    let tgz = dir.join(format!("webchecker-operator-{version}.tgz"));
    let mut c = helm_command(&cluster.bin, None);
    c.arg("push")
        .arg(&tgz)
        .arg(format!("oci://{path}/charts"))
        .env("SSL_CERT_FILE", registry.trust_bundle());
    ok(run(c).await, "helm push");
}
