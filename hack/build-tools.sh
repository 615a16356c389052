#!/usr/bin/env bash
# Builds kube-apiserver, kubectl, etcd and helm from the Go module proxy at the
# pinned versions of hack/versions.env, into a cache outside the repository
# keyed by version. Prints the bin directory. Reuses a finished build.
#
# The wrapper go.mod files live in hack/tools/{kube,etcd} and their go.sum are
# committed, so the module graph is pinned; we regenerate go.mod only when the
# pinned version changes.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/versions.env"

cache_root=${WEBCHECKER_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/webchecker-operator}
bin="$cache_root/tools/k8s-v$KUBE_VERSION-etcd-v$ETCD_VERSION-helm-v$HELM_VERSION/bin"
if [ -x "$bin/kube-apiserver" ] && [ -x "$bin/kubectl" ] && [ -x "$bin/etcd" ] && [ -x "$bin/helm" ]; then
  echo "$bin"; exit 0
fi
command -v go >/dev/null || { echo "build-tools: Go is required (apt-get install golang or a Go >= 1.26 toolchain)" >&2; exit 1; }
mkdir -p "$bin"

export GOTOOLCHAIN=local GOWORK=off CGO_ENABLED=0 GOFLAGS="-trimpath -buildvcs=false"
export GOMODCACHE=${GOMODCACHE:-$cache_root/gomod} GOCACHE=${GOCACHE:-$cache_root/gobuild}

minor=$(echo "$KUBE_VERSION" | cut -d. -f2)
staging="v0.${KUBE_VERSION#1.}"

log() { echo "build-tools: $*" >&2; }

# kube-apiserver + kubectl through a wrapper module: the upstream go.mod maps its
# staging modules to ./staging with replace directives, which a dependency cannot
# use, so we replace each of them with its published v0.X.Y.
kube_dir="$here/tools/kube"
if ! grep -q "k8s.io/kubernetes v$KUBE_VERSION\$" "$kube_dir/go.mod" 2>/dev/null; then
  log "writing wrapper go.mod for k8s.io/kubernetes v$KUBE_VERSION"
  up=$(go mod download -json "k8s.io/kubernetes@v$KUBE_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
  {
    echo "module example.invalid/webchecker-kube-tools"
    echo
    grep -E '^(go|godebug) ' "$up"
    echo
    echo "require k8s.io/kubernetes v$KUBE_VERSION"
    echo
    echo "replace ("
    sed -nE 's#^[[:space:]]*(k8s\.io/[^[:space:]]+)[[:space:]]+=>[[:space:]]+\./staging/.*#\t\1 => \1 '"$staging"'#p' "$up"
    echo ")"
    echo
    # The node's binaries too (hack/build-node-tools.sh builds them from this module).
    echo "tool ("
    for t in kube-apiserver kubectl kube-controller-manager kube-proxy kube-scheduler kubelet; do
      echo "	k8s.io/kubernetes/cmd/$t"
    done
    echo ")"
  } > "$kube_dir/go.mod"
  rm -f "$kube_dir/go.sum"
  (cd "$kube_dir" && go mod tidy)
fi
ld="-s -w"
for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ld="$ld -X $p.gitVersion=v$KUBE_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor -X $p.gitTreeState=clean -X $p.buildDate=1970-01-01T00:00:00Z"
done
log "building kube-apiserver and kubectl v$KUBE_VERSION (the first build takes many minutes)"
(cd "$kube_dir" && go build -mod=readonly -ldflags "$ld" -o "$bin/" k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kubectl)

# etcd: server/v3's go.mod has replace lines, so a tiny main in a wrapper module.
etcd_dir="$here/tools/etcd"
if ! grep -q "go.etcd.io/etcd/server/v3 v$ETCD_VERSION\$" "$etcd_dir/go.mod" 2>/dev/null; then
  log "writing wrapper go.mod for etcd v$ETCD_VERSION"
  printf 'module example.invalid/webchecker-etcd\n\ngo 1.25.0\n\nrequire go.etcd.io/etcd/server/v3 v%s\n' "$ETCD_VERSION" > "$etcd_dir/go.mod"
  rm -f "$etcd_dir/go.sum"
  (cd "$etcd_dir" && go mod tidy)
fi
log "building etcd v$ETCD_VERSION"
(cd "$etcd_dir" && go build -mod=readonly -ldflags "-s -w" -o "$bin/etcd" .)

log "building helm v$HELM_VERSION"
GOBIN="$bin" go install -ldflags "-s -w -X helm.sh/helm/v4/internal/version.version=v$HELM_VERSION" "helm.sh/helm/v4/cmd/helm@v$HELM_VERSION"

echo "$bin"
