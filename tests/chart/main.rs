//! The Helm chart (deploy/helm/webchecker-operator) with the real helm and
//! kubectl binaries of hack/build-tools.sh, one concern a module:
//!
//! - `lint`: the chart's copies of the CRD, the alert rules and the
//!   dashboards are identical to their sources (`make chart-sync`);
//!   `helm lint --strict` with the default values and with
//!   deploy/helm/ci/all-on-values.yaml, and of the packaged chart
//!   (`make package`); every values file of
//!   deploy/helm/ci/invalid/ fails with the message of its first line;
//! - `values`: `helm template` with the default and the all-on values, read
//!   back by the operator's own flag parser (`rendered`: reading a render),
//!   and the chart's operator defaults are the operator's own;
//! - `rbac`, `admission`: the permissions and the admission policy rendered;
//! - `route_discovery`: `discovery.enabled` (the operator's
//!   `--discover-routes`), off by default, and the permissions it needs;
//! - `flow_schema`: the FlowSchema that serves the operator's Lease requests
//!   at the `leader-election` priority level, rendered and proven on a real
//!   API server (response headers; a renewal under a burst that fills
//!   `workload-low`);
//! - the knobs of a platform team, each off by default and rendered as
//!   documented: `network_policy`, `dns_and_volumes`, `pod_monitor`,
//!   `ca_bundle` (the operator's `--ca-bundle`);
//! - `install`: `helm install` / `upgrade` / `uninstall` on a real control
//!   plane (the pods never run: there is no kubelet);
//! - `crd_upgrade`: the README's CRD upgrade, word for word, over a CRD that
//!   Helm created (a control plane of its own, the chart from a registry);
//! - `service_account`: least privilege: three operator processes run with a
//!   token of the chart's ServiceAccount and nothing else, shard, probe, fail
//!   over; a replica started after a permission was taken away exits at once,
//!   naming it.

mod admission;
mod ca_bundle;
mod crd_upgrade;
mod dns_and_volumes;
mod flow_schema;
mod install;
mod lint;
mod network_policy;
use webchecker_kit::platform;
mod pod_monitor;
mod rbac;
mod rendered;
mod route_discovery;
mod service_account;
use webchecker_kit as support;
mod values;

use std::path::Path;
use std::process::Output;

use platform::{CHART, RELEASE, RELEASE_NS};
use serde_yaml::Value;
use support::Cluster;
use support::release::{helm_command, ok, run};

/// Paths relative to the repository root (helm runs there, as in the README).
const ALL_ON: &str = "deploy/helm/ci/all-on-values.yaml";
const INVALID_DIR: &str = "deploy/helm/ci/invalid";
/// `<release>-<chart>`: the Deployment, ServiceAccount, (Cluster)Role(Binding)s.
const FULLNAME: &str = "wc-webchecker-operator";
const CRD: &str = "webcheckers.test.network.io";

/// kubectl with the credentials of `kubeconfig`, off the async worker
/// threads (the witness shares them).
async fn kubectl_as(cluster: &Cluster, kubeconfig: &Path, args: &[&str]) -> Output {
    run(cluster.kubectl_as(kubeconfig, args)).await
}

/// kubectl as the cluster admin.
async fn kubectl(cluster: &Cluster, args: &[&str]) -> Output {
    kubectl_as(cluster, &cluster.kubeconfig, args).await
}

async fn kubectl_json(cluster: &Cluster, args: &[&str]) -> serde_json::Value {
    let mut a = args.to_vec();
    a.extend(["-o", "json"]);
    let out = ok(kubectl(cluster, &a).await, &format!("kubectl {args:?}"));
    serde_json::from_str(&out).unwrap()
}

async fn cluster_helm(cluster: &Cluster, args: &[&str]) -> Output {
    let mut c = helm_command(&cluster.bin, Some(&cluster.kubeconfig));
    c.args(args);
    run(c).await
}

/// `helm install <release> <chart> -n <ns> --create-namespace <extra>`, the
/// image repository of the tests first; fails the test if helm does.
async fn helm_install(cluster: &Cluster, release: &str, ns: &str, extra: &[&str]) {
    let base = support::release::base_values().to_str().unwrap();
    let mut args = vec![
        "install",
        release,
        CHART,
        "-n",
        ns,
        "--create-namespace",
        "-f",
        base,
    ];
    args.extend_from_slice(extra);
    ok(cluster_helm(cluster, &args).await, "helm install");
}
