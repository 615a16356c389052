#!/usr/bin/env bash
# Builds the peers of the prober's gRPC and TCP checks from the Go module
# proxy at the pinned versions of hack/versions.env, into a cache outside the
# repository keyed by version (and by the source of our wrappers). Prints
# the bin directory. Reuses a finished build.
#
#   grpc-health          grpc-go's own health service (google.golang.org/grpc/health)
#                        behind a tiny main, hack/tools/grpc-health (go.sum committed)
#   grpc-health-probe    github.com/grpc-ecosystem/grpc-health-probe, the reference client
#   blackbox_exporter    github.com/prometheus/blackbox_exporter, the bench's peer for
#                        the grpc and tcp probers (newer than Debian's 0.23), built
#                        through hack/tools/blackbox (a `tool` line, go.sum committed):
#                        `go install module@version` needs the proxy's version list,
#                        which it does not serve for this module here
#
# Nothing here runs them: kit/src/peers.rs does. The SMTP peer (exim) is a
# Debian package: hack/install-deps.sh.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/versions.env"

cache_root=${WEBCHECKER_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/webchecker-operator}
log() { echo "build-probe-peers: $*" >&2; }
command -v go >/dev/null || { log "Go is required (apt-get install golang or a Go >= $GO_MIN_VERSION toolchain)"; exit 1; }

export GOTOOLCHAIN=local GOWORK=off CGO_ENABLED=0 GOFLAGS="-trimpath -buildvcs=false"
export GOMODCACHE=${GOMODCACHE:-$cache_root/gomod} GOCACHE=${GOCACHE:-$cache_root/gobuild}

# Several test binaries may ask at once: one builds, the others wait and reuse.
mkdir -p "$cache_root"
if [ -z "${BUILD_PROBE_PEERS_LOCKED:-}" ] && command -v flock >/dev/null; then
  BUILD_PROBE_PEERS_LOCKED=1 exec flock "$cache_root/build-probe-peers.lock" "$0" "$@"
fi

dir="$here/tools/grpc-health"
if ! grep -q "google.golang.org/grpc v$GRPC_GO_VERSION\$" "$dir/go.mod"; then
  log "pinning google.golang.org/grpc v$GRPC_GO_VERSION in hack/tools/grpc-health/go.mod"
  (cd "$dir" && go get "google.golang.org/grpc@v$GRPC_GO_VERSION" && go mod tidy)
fi
bb_dir="$here/tools/blackbox"
if ! grep -qE "github.com/prometheus/blackbox_exporter v$BLACKBOX_VERSION( |$)" "$bb_dir/go.mod"; then
  log "writing wrapper go.mod for blackbox_exporter v$BLACKBOX_VERSION"
  up=$(go mod download -json "github.com/prometheus/blackbox_exporter@v$BLACKBOX_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
  {
    echo "module example.invalid/webchecker-blackbox"
    echo
    grep -E '^go ' "$up"
    echo
    echo "require github.com/prometheus/blackbox_exporter v$BLACKBOX_VERSION"
    echo
    echo "tool github.com/prometheus/blackbox_exporter"
  } > "$bb_dir/go.mod"
  rm -f "$bb_dir/go.sum"
  (cd "$bb_dir" && go mod tidy)
fi
# Keyed by the wrappers' source too, so an edit of main.go rebuilds.
key=$(cat "$dir/main.go" "$dir/go.mod" "$dir/go.sum" "$bb_dir/go.mod" "$bb_dir/go.sum" | sha256sum | cut -c1-12)
bin="$cache_root/tools/probe-peers-$key-grpc-v$GRPC_GO_VERSION-probe-v$GRPC_HEALTH_PROBE_VERSION-blackbox-v$BLACKBOX_VERSION/bin"
if [ -x "$bin/grpc-health" ] && [ -x "$bin/grpc-health-probe" ] && [ -x "$bin/blackbox_exporter" ]; then
  echo "$bin"; exit 0
fi
mkdir -p "$bin"

if [ ! -x "$bin/grpc-health" ]; then
  log "building grpc-health (grpc-go v$GRPC_GO_VERSION health service)"
  (cd "$dir" && go build -mod=readonly -ldflags "-s -w" -o "$bin/grpc-health.tmp" . && mv "$bin/grpc-health.tmp" "$bin/grpc-health")
fi

if [ ! -x "$bin/grpc-health-probe" ]; then
  log "building grpc-health-probe v$GRPC_HEALTH_PROBE_VERSION"
  tmp=$(mktemp -d "$bin/.gobin.XXXXXX")
  GOBIN="$tmp" go install -ldflags "-s -w -X main.versionTag=v$GRPC_HEALTH_PROBE_VERSION" \
    "github.com/grpc-ecosystem/grpc-health-probe@v$GRPC_HEALTH_PROBE_VERSION"
  mv "$tmp/grpc-health-probe" "$bin/grpc-health-probe" && rmdir "$tmp"
fi

if [ ! -x "$bin/blackbox_exporter" ]; then
  log "building blackbox_exporter v$BLACKBOX_VERSION"
  v=github.com/prometheus/common/version
  (cd "$bb_dir" && go build -mod=readonly -o "$bin/blackbox_exporter.tmp" \
    -ldflags "-s -w -X $v.Version=$BLACKBOX_VERSION -X $v.Branch=HEAD -X $v.Revision=v$BLACKBOX_VERSION -X $v.BuildUser=webchecker -X $v.BuildDate=19700101-00:00:00" \
    github.com/prometheus/blackbox_exporter)
  mv "$bin/blackbox_exporter.tmp" "$bin/blackbox_exporter"
fi

echo "$bin"
