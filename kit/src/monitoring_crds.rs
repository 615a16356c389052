//! The Prometheus Operator's CRDs of the pinned release
//! (`PROMETHEUS_OPERATOR_VERSION` of hack/versions.env: ServiceMonitor,
//! PodMonitor, PrometheusRule), fetched from the Go module proxy by
//! hack/fetch-prometheus-operator-crds.sh and installed on a test control
//! plane, so that the chart's monitoring objects are checked against the
//! schemas that prometheus-operator serves (no operator runs).

use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use crate::{Cluster, script_dir};

static CRDS: OnceLock<PathBuf> = OnceLock::new();
/// Control planes (by kubeconfig) the CRDs are installed on already.
static INSTALLED: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// The directory of the release's CRDs (fetched once per process).
pub fn prometheus_operator_crds() -> &'static Path {
    CRDS.get_or_init(|| {
        script_dir(
            "fetch-prometheus-operator-crds.sh",
            "Go and the Go module proxy",
        )
    })
}

impl Cluster {
    /// Installs the Prometheus Operator's CRDs (once per control plane and
    /// process) and waits until they are served.
    pub fn install_prometheus_operator_crds(&self) {
        let mut done = INSTALLED.lock().unwrap_or_else(|p| p.into_inner());
        if done.contains(&self.kubeconfig) {
            return;
        }
        let dir = prometheus_operator_crds();
        let out = self.kubectl(&[
            "apply",
            "--server-side",
            "--force-conflicts",
            "-f",
            dir.to_str().unwrap(),
        ]);
        assert!(
            out.status.success(),
            "installing the Prometheus Operator's CRDs: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let out = self.kubectl(&[
            "wait",
            "--for=condition=Established",
            "--timeout=60s",
            "crd/servicemonitors.monitoring.coreos.com",
            "crd/podmonitors.monitoring.coreos.com",
            "crd/prometheusrules.monitoring.coreos.com",
        ]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        done.push(self.kubeconfig.clone());
    }
}
