#!/usr/bin/env bash
# Fetches the CRDs of the Prometheus Operator (example/prometheus-operator-crd/
# of github.com/prometheus-operator/prometheus-operator at
# PROMETHEUS_OPERATOR_VERSION of hack/versions.env) from the Go module proxy
# into the tools cache, outside the repository (they are never committed),
# keyed by version. Prints the directory that holds the ServiceMonitor,
# PodMonitor and PrometheusRule CRDs, the kinds the chart renders. Reuses a
# finished fetch.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/versions.env"

cache_root=${WEBCHECKER_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/webchecker-operator}
log() { echo "fetch-prometheus-operator-crds: $*" >&2; }
command -v go >/dev/null || { log "Go is required (it fetches from the Go module proxy)"; exit 1; }

export GOTOOLCHAIN=local GOWORK=off GOFLAGS=-mod=mod
export GOMODCACHE=${GOMODCACHE:-$cache_root/gomod}

out="$cache_root/tools/prometheus-operator-v$PROMETHEUS_OPERATOR_VERSION/crd"
if [ -f "$out/.done" ]; then echo "$out"; exit 0; fi

mkdir -p "$cache_root"
if [ -z "${FETCH_PROMETHEUS_OPERATOR_LOCKED:-}" ] && command -v flock >/dev/null; then
  FETCH_PROMETHEUS_OPERATOR_LOCKED=1 exec flock "$cache_root/fetch-prometheus-operator-crds.lock" "$0" "$@"
fi
if [ -f "$out/.done" ]; then echo "$out"; exit 0; fi

module=github.com/prometheus-operator/prometheus-operator
log "downloading $module@v$PROMETHEUS_OPERATOR_VERSION"
json=$(cd "$cache_root" && go mod download -json "$module@v$PROMETHEUS_OPERATOR_VERSION")
dir=$(printf '%s\n' "$json" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",*$/\1/p')
src="$dir/example/prometheus-operator-crd"
tmp=$(mktemp -d "$cache_root/.prometheus-operator.XXXXXX")
for kind in servicemonitors podmonitors prometheusrules; do
  f="$src/monitoring.coreos.com_$kind.yaml"
  [ -f "$f" ] || { log "no $f in the module"; rm -rf "$tmp"; exit 1; }
  cp "$f" "$tmp/"
done
touch "$tmp/.done"
mkdir -p "$(dirname "$out")"
rm -rf "$out"
mv "$tmp" "$out"
log "CRDs in $out"
echo "$out"
