//! The Gateway API CRDs of the pinned release (`GATEWAY_API_VERSION` of
//! hack/versions.env), fetched from the Go module proxy by
//! hack/fetch-gateway-api.sh and installed on a test control plane: real
//! HTTPRoute, GRPCRoute and Gateway objects, validated by the release's own
//! schemas.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use crate::{Cluster, script_dir};

static CRDS: OnceLock<PathBuf> = OnceLock::new();
/// Control planes (by kubeconfig) the CRDs are installed on already.
static INSTALLED: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

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
        let mut done = INSTALLED.lock().unwrap_or_else(|p| p.into_inner());
        if done.contains(&self.kubeconfig) {
            return;
        }
        let dir = gateway_api_crds();
        let out = self.kubectl(&[
            "apply",
            "--server-side",
            "--force-conflicts",
            "-f",
            dir.to_str().unwrap(),
        ]);
        assert!(
            out.status.success(),
            "installing the Gateway API CRDs: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let out = self.kubectl(&[
            "wait",
            "--for=condition=Established",
            "--timeout=60s",
            "crd/httproutes.gateway.networking.k8s.io",
            "crd/grpcroutes.gateway.networking.k8s.io",
            "crd/gateways.gateway.networking.k8s.io",
            "crd/gatewayclasses.gateway.networking.k8s.io",
        ]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        done.push(self.kubeconfig.clone());
    }
}
