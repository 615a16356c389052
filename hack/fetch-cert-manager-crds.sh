#!/usr/bin/env bash
# Fetches cert-manager's Certificate and Issuer CRDs (deploy/crds/ of
# github.com/cert-manager/cert-manager at CERT_MANAGER_VERSION of
# hack/versions.env) into the tools cache (hack/fetch-module-crds.sh).
# Prints their directory. The diagnosis tests install them: a TLS failure's
# diagnosis reads the namespace's Certificates (no cert-manager runs).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/versions.env"
exec "$here/fetch-module-crds.sh" cert-manager \
  github.com/cert-manager/cert-manager "$CERT_MANAGER_VERSION" deploy/crds \
  cert-manager.io_certificates.yaml \
  cert-manager.io_issuers.yaml \
  cert-manager.io_clusterissuers.yaml
