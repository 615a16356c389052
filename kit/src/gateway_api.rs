//! The Gateway API CRDs of the pinned release (`GATEWAY_API_VERSION` of
//! hack/versions.env), fetched from the Go module proxy by
//! hack/fetch-gateway-api.sh and installed on a test control plane: real
//! HTTPRoute, GRPCRoute and Gateway objects, validated by the release's own
//! schemas.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use crate::{Cluster, script_dir};

static CRDS: OnceLock<PathBuf> = OnceLock::new();

/// The directory of the release's standard-channel CRDs. The script runs
/// once per process (the first fetch takes seconds; later ones reuse the
/// tools cache). Panics, naming the script, when it fails.
pub fn gateway_api_crds() -> &'static Path {
    CRDS.get_or_init(|| {
        let dir = script_dir("fetch-gateway-api.sh", "Go and the Go module proxy");
        for kind in ["httproutes", "grpcroutes"] {
            assert!(
                dir.join(format!("gateway.networking.k8s.io_{kind}.yaml"))
                    .is_file(),
                "no {kind} CRD in {}",
                dir.display()
            );
        }
        dir
    })
}

impl Cluster {
    /// Installs the Gateway API CRDs (once per control plane and process)
    /// and waits until HTTPRoutes, GRPCRoutes and Gateways are served.
    pub fn install_gateway_api(&self) {
        self.install_crds_once(
            gateway_api_crds(),
            &[
                "httproutes.gateway.networking.k8s.io",
                "grpcroutes.gateway.networking.k8s.io",
                "gateways.gateway.networking.k8s.io",
                "gatewayclasses.gateway.networking.k8s.io",
            ],
        );
    }
}
