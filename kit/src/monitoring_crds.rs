//! The Prometheus Operator's CRDs of the pinned release
//! (`PROMETHEUS_OPERATOR_VERSION` of hack/versions.env: ServiceMonitor,
//! PodMonitor, PrometheusRule), fetched from the Go module proxy by
//! hack/fetch-prometheus-operator-crds.sh and installed on a test control
//! plane, so that the chart's monitoring objects are checked against the
//! schemas that prometheus-operator serves (no operator runs).

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use crate::{Cluster, script_dir};

static CRDS: OnceLock<PathBuf> = OnceLock::new();

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
        self.install_crds_once(
            prometheus_operator_crds(),
            &[
                "servicemonitors.monitoring.coreos.com",
                "podmonitors.monitoring.coreos.com",
                "prometheusrules.monitoring.coreos.com",
            ],
        );
    }
}
