#!/usr/bin/env bash
# Fetches the Gateway API CRDs of the standard channel (config/crd/standard/
# of sigs.k8s.io/gateway-api at GATEWAY_API_VERSION of hack/versions.env)
# into the tools cache (hack/fetch-module-crds.sh). Prints the directory
# that holds only the CustomResourceDefinitions (the release's
# ValidatingAdmissionPolicy, which refuses a downgrade of the CRDs, is left
# out: the tests install one version).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/versions.env"
exec "$here/fetch-module-crds.sh" gateway-api \
  sigs.k8s.io/gateway-api "$GATEWAY_API_VERSION" config/crd/standard '*.yaml'
