#!/usr/bin/env bash
# Builds what a real node needs beside the control plane of hack/build-tools.sh,
# at the pinned versions of hack/versions.env, into a cache outside the
# repository keyed by version. Prints the bin directory. Reuses a finished build.
#
#   hack/build-node-tools.sh image   oci-image (hack/tools/image, on go-containerregistry):
#                                    writes OCI image archives without a container engine
#   hack/build-node-tools.sh node    kubelet, kube-controller-manager, kube-scheduler,
#                                    kube-proxy (the same k8s.io/kubernetes wrapper module
#                                    and release as kube-apiserver), containerd,
#                                    containerd-shim-runc-v2 and ctr (containerd's module)
#
# runc, the CNI plugins and nft come from Debian (hack/install-deps.sh --node).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/versions.env"

what=${1:-}
cache_root=${WEBCHECKER_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/webchecker-operator}
log() { echo "build-node-tools: $*" >&2; }
command -v go >/dev/null || { log "Go is required (a Go >= $GO_MIN_VERSION toolchain)"; exit 1; }

export GOTOOLCHAIN=local GOWORK=off CGO_ENABLED=0 GOFLAGS="-trimpath -buildvcs=false"
export GOMODCACHE=${GOMODCACHE:-$cache_root/gomod} GOCACHE=${GOCACHE:-$cache_root/gobuild}

# Several callers (make targets, test binaries) may ask at once: one builds
# each tool set (the image tool never waits for the node's build).
lock="$cache_root/build-node-tools-$what.lock"
mkdir -p "$cache_root"
if [ -z "${BUILD_NODE_TOOLS_LOCKED:-}" ] && command -v flock >/dev/null; then
  BUILD_NODE_TOOLS_LOCKED=1 exec flock "$lock" "$0" "$@"
fi

build_image_tool() {
  local dir="$here/tools/image" key bin
  if ! grep -q "github.com/google/go-containerregistry v$GGCR_VERSION\$" "$dir/go.mod"; then
    log "pinning go-containerregistry v$GGCR_VERSION in hack/tools/image/go.mod"
    (cd "$dir" && go get "github.com/google/go-containerregistry@v$GGCR_VERSION" && go mod tidy)
  fi
  # Keyed by the tool's source, so an edit rebuilds it.
  key=$(cat "$dir/main.go" "$dir/go.mod" "$dir/go.sum" | sha256sum | cut -c1-16)
  bin="$cache_root/tools/image-$key/bin"
  if [ -x "$bin/oci-image" ]; then echo "$bin"; return; fi
  mkdir -p "$bin"
  log "building oci-image (go-containerregistry v$GGCR_VERSION)"
  (cd "$dir" && go build -mod=readonly -ldflags "-s -w" -o "$bin/oci-image" .)
  echo "$bin"
}

build_node() {
  local bin="$cache_root/tools/node-k8s-v$KUBE_VERSION-containerd-v$CONTAINERD_VERSION/bin"
  local want=(kubelet kube-controller-manager kube-scheduler kube-proxy containerd containerd-shim-runc-v2 ctr)
  local t missing=0
  for t in "${want[@]}"; do [ -x "$bin/$t" ] || missing=1; done
  if [ $missing -eq 0 ]; then echo "$bin"; return; fi
  mkdir -p "$bin"
  local kube_dir="$here/tools/kube" minor ld p
  grep -qE "k8s.io/kubernetes v$KUBE_VERSION( |$)" "$kube_dir/go.mod" ||
    { log "hack/tools/kube/go.mod is not at v$KUBE_VERSION: run hack/build-tools.sh first"; exit 1; }
  minor=$(echo "$KUBE_VERSION" | cut -d. -f2)
  ld="-s -w"
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ld="$ld -X $p.gitVersion=v$KUBE_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor -X $p.gitTreeState=clean -X $p.buildDate=1970-01-01T00:00:00Z"
  done
  # Upstream links kubelet with cgo; nothing it needs on this node does (no
  # cgo-only cadvisor plugins), and a static kubelet does not care which libc runs it.
  log "building kubelet, kube-controller-manager, kube-scheduler, kube-proxy v$KUBE_VERSION (many minutes the first time)"
  (cd "$kube_dir" && go build -mod=readonly -ldflags "$ld" -o "$bin/" \
    k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kube-controller-manager \
    k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kube-proxy)
  # containerd's go.mod has no replace directives: `go install` at the tag works
  # and uses containerd's own go.sum. Without cgo the btrfs snapshotter is left
  # out (overlayfs is the one used).
  log "building containerd v$CONTAINERD_VERSION"
  ld="-s -w -X github.com/containerd/containerd/v2/version.Version=v$CONTAINERD_VERSION"
  GOBIN="$bin" go install -ldflags "$ld" \
    "github.com/containerd/containerd/v2/cmd/containerd@v$CONTAINERD_VERSION" \
    "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2@v$CONTAINERD_VERSION" \
    "github.com/containerd/containerd/v2/cmd/ctr@v$CONTAINERD_VERSION"
  echo "$bin"
}

case "$what" in
  image) build_image_tool ;;
  node) build_node ;;
  *) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2 ;;
esac
