//! cert-manager's CRDs of the pinned release (`CERT_MANAGER_VERSION` of
//! hack/versions.env: Certificate, Issuer, ClusterIssuer), fetched from the
//! Go module proxy by hack/fetch-cert-manager-crds.sh and installed on a
//! test control plane: real Certificate objects, validated by the release's
//! own schema (no cert-manager runs; a test writes their status).

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use crate::{Cluster, script_dir};

static CRDS: OnceLock<PathBuf> = OnceLock::new();

/// The directory of the release's CRDs (fetched once per process).
pub fn cert_manager_crds() -> &'static Path {
    CRDS.get_or_init(|| script_dir("fetch-cert-manager-crds.sh", "Go and the Go module proxy"))
}

impl Cluster {
    /// Installs cert-manager's CRDs (once per control plane and process)
    /// and waits until they are served.
    pub fn install_cert_manager_crds(&self) {
        self.install_crds_once(
            cert_manager_crds(),
            &[
                "certificates.cert-manager.io",
                "issuers.cert-manager.io",
                "clusterissuers.cert-manager.io",
            ],
        );
    }
}
