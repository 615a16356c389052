#!/usr/bin/env bash
# Builds Prometheus 3 (prometheus and promtool) from the Go module proxy at
# PROMETHEUS3_VERSION of hack/versions.env, into a cache outside the
# repository keyed by version (and by our wrapper's go.mod/go.sum). Prints the
# bin directory. Reuses a finished build.
#
# The end-to-end tests run this one by default, and Debian's Prometheus 2.42
# (hack/install-deps.sh) as the second target (kit/src/prom.rs,
# WEBCHECKER_PROMETHEUS=2; observability and alerts_fire run both).
#
#   - Prometheus 3.N.M is published as the Go module version v0.3NN.M
#     (3.16.0 is v0.316.0); the wrapper module hack/tools/prometheus names it
#     with `tool` lines (go.sum committed), regenerated only when the pin
#     changes.
#   - No web UI: upstream's release builds embed the compiled React UI with the
#     `builtinassets` tag (web/ui/assets_embed.go), which needs npm. Without
#     the tag the server runs and serves its whole HTTP API (/api/v1/...,
#     /-/ready, /metrics); only the UI pages have no assets.
#   - `remove_all_sd`: only the file and http service discoveries are compiled
#     in (plugins/minimum.go); static_configs are part of the core. The tests
#     scrape static targets, and the cloud/Kubernetes SD clients are most of
#     the build time. Add `enable_kubernetes_sd` (etc.) to `tags` to get one back.
#   - `netgo`, as upstream's release builds.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/versions.env"

cache_root=${WEBCHECKER_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/webchecker-operator}
log() { echo "build-prometheus: $*" >&2; }
command -v go >/dev/null || { log "Go is required (apt-get install golang or a Go >= $GO_MIN_VERSION toolchain)"; exit 1; }

export GOTOOLCHAIN=local GOWORK=off CGO_ENABLED=0 GOFLAGS="-trimpath -buildvcs=false"
export GOMODCACHE=${GOMODCACHE:-$cache_root/gomod} GOCACHE=${GOCACHE:-$cache_root/gobuild}

# Several test binaries may ask at once: one builds, the others wait and reuse.
mkdir -p "$cache_root"
if [ -z "${BUILD_PROMETHEUS_LOCKED:-}" ] && command -v flock >/dev/null; then
  BUILD_PROMETHEUS_LOCKED=1 exec flock "$cache_root/build-prometheus.lock" "$0" "$@"
fi

major=${PROMETHEUS3_VERSION%%.*}
rest=${PROMETHEUS3_VERSION#*.}
minor=${rest%%.*}
patch=${rest#*.}
[ "$major" = 3 ] || { log "PROMETHEUS3_VERSION must be a 3.x release, not $PROMETHEUS3_VERSION"; exit 1; }
module_version=$(printf 'v0.%d%02d.%s' "$major" "$minor" "$patch")
mod=github.com/prometheus/prometheus

dir="$here/tools/prometheus"
if ! grep -qE "^[[:space:]]*$mod $module_version( |\$)" "$dir/go.mod" 2>/dev/null; then
  log "writing wrapper go.mod for $mod $module_version (Prometheus $PROMETHEUS3_VERSION)"
  up=$(go mod download -json "$mod@$module_version" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
  {
    echo "module example.invalid/webchecker-prometheus"
    echo
    grep -E '^(go|godebug) ' "$up"
    echo
    echo "require $mod $module_version"
    echo
    echo "tool ("
    echo "	$mod/cmd/prometheus"
    echo "	$mod/cmd/promtool"
    echo ")"
  } > "$dir/go.mod"
  rm -f "$dir/go.sum"
  (cd "$dir" && go mod tidy)
fi

key=$(cat "$dir/go.mod" "$dir/go.sum" | sha256sum | cut -c1-12)
bin="$cache_root/tools/prometheus-v$PROMETHEUS3_VERSION-$key/bin"
if [ -x "$bin/prometheus" ] && [ -x "$bin/promtool" ]; then
  echo "$bin"; exit 0
fi
mkdir -p "$bin"

v=github.com/prometheus/common/version
ld="-s -w -X $v.Version=$PROMETHEUS3_VERSION -X $v.Revision=$module_version -X $v.Branch=HEAD"
ld="$ld -X $v.BuildUser=webchecker -X $v.BuildDate=19700101-00:00:00"
for t in prometheus promtool; do
  [ -x "$bin/$t" ] && continue
  log "building $t $PROMETHEUS3_VERSION (the first build takes several minutes)"
  (cd "$dir" && go build -mod=readonly -tags netgo,remove_all_sd -ldflags "$ld" \
    -o "$bin/$t.tmp" "$mod/cmd/$t")
  mv "$bin/$t.tmp" "$bin/$t"
done

echo "$bin"
