#!/usr/bin/env bash
# Builds hack/tools/flux-health (how Flux's kustomize-controller judges an
# object's health: kstatus, and the CEL expressions of a Kustomization's
# healthCheckExprs) and fetches the Kustomization CRD of the same
# kustomize-controller release, both from the Go module proxy at the pinned
# versions of hack/versions.env, into the tools cache outside the repository,
# keyed by version and by the wrapper's source. Prints the directory that
# holds bin/flux-health and crd/. Reuses a finished build.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/versions.env"

cache_root=${WEBCHECKER_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/webchecker-operator}
log() { echo "build-flux-health: $*" >&2; }
command -v go >/dev/null || { log "Go is required (apt-get install golang or a Go >= $GO_MIN_VERSION toolchain)"; exit 1; }

export GOTOOLCHAIN=local GOWORK=off CGO_ENABLED=0 GOFLAGS="-trimpath -buildvcs=false"
export GOMODCACHE=${GOMODCACHE:-$cache_root/gomod} GOCACHE=${GOCACHE:-$cache_root/gobuild}

mkdir -p "$cache_root"
if [ -z "${BUILD_FLUX_HEALTH_LOCKED:-}" ] && command -v flock >/dev/null; then
  BUILD_FLUX_HEALTH_LOCKED=1 exec flock "$cache_root/build-flux-health.lock" "$0" "$@"
fi

dir="$here/tools/flux-health"
pins=(
  "github.com/fluxcd/kustomize-controller/api v$FLUX_KUSTOMIZE_CONTROLLER_VERSION"
  "github.com/fluxcd/pkg/runtime v$FLUX_RUNTIME_VERSION"
  "github.com/fluxcd/cli-utils v$FLUX_CLI_UTILS_VERSION"
  "sigs.k8s.io/cli-utils v$CLI_UTILS_VERSION"
)
for p in "${pins[@]}"; do
  if ! grep -q "^	$p\$" "$dir/go.mod"; then
    log "pinning ${pins[*]} in hack/tools/flux-health/go.mod"
    (cd "$dir" && go get "${pins[@]/ /@}" && go mod tidy)
    break
  fi
done
key=$(cat "$dir/main.go" "$dir/go.mod" "$dir/go.sum" | sha256sum | cut -c1-12)
out="$cache_root/tools/flux-health-$key-kustomize-controller-v$FLUX_KUSTOMIZE_CONTROLLER_VERSION"
if [ -x "$out/bin/flux-health" ] && [ -f "$out/crd/.done" ]; then echo "$out"; exit 0; fi
mkdir -p "$out/bin" "$out/crd"

if [ ! -x "$out/bin/flux-health" ]; then
  log "building flux-health (kustomize-controller v$FLUX_KUSTOMIZE_CONTROLLER_VERSION's API, fluxcd/pkg/runtime v$FLUX_RUNTIME_VERSION)"
  (cd "$dir" && go build -mod=readonly -ldflags "-s -w" -o "$out/bin/flux-health.tmp" . && mv "$out/bin/flux-health.tmp" "$out/bin/flux-health")
fi

if [ ! -f "$out/crd/.done" ]; then
  log "downloading github.com/fluxcd/kustomize-controller@v$FLUX_KUSTOMIZE_CONTROLLER_VERSION for its CRD"
  json=$(cd "$cache_root" && GOFLAGS=-mod=mod go mod download -json "github.com/fluxcd/kustomize-controller@v$FLUX_KUSTOMIZE_CONTROLLER_VERSION")
  src=$(printf '%s\n' "$json" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",*$/\1/p')
  crd="$src/config/crd/bases/kustomize.toolkit.fluxcd.io_kustomizations.yaml"
  [ -f "$crd" ] || { log "no $crd in the module: $json"; exit 1; }
  cp "$crd" "$out/crd/"
  touch "$out/crd/.done"
fi
echo "$out"
