#!/usr/bin/env bash
# Fetches the Gateway API CRDs of the standard channel (config/crd/standard/
# of sigs.k8s.io/gateway-api at GATEWAY_API_VERSION of hack/versions.env)
# from the Go module proxy into the tools cache, outside the repository
# (they are never committed), keyed by version. Prints the directory that
# holds only the CustomResourceDefinitions (the release's
# ValidatingAdmissionPolicy, which refuses a downgrade of the CRDs, is left
# out: the tests install one version). Reuses a finished fetch.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/versions.env"

cache_root=${WEBCHECKER_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/webchecker-operator}
log() { echo "fetch-gateway-api: $*" >&2; }
command -v go >/dev/null || { log "Go is required (it fetches from the Go module proxy)"; exit 1; }

export GOTOOLCHAIN=local GOWORK=off GOFLAGS=-mod=mod
export GOMODCACHE=${GOMODCACHE:-$cache_root/gomod}

out="$cache_root/tools/gateway-api-v$GATEWAY_API_VERSION/crd"
if [ -f "$out/.done" ]; then echo "$out"; exit 0; fi

mkdir -p "$cache_root"
if [ -z "${FETCH_GATEWAY_API_LOCKED:-}" ] && command -v flock >/dev/null; then
  FETCH_GATEWAY_API_LOCKED=1 exec flock "$cache_root/fetch-gateway-api.lock" "$0" "$@"
fi
if [ -f "$out/.done" ]; then echo "$out"; exit 0; fi

log "downloading sigs.k8s.io/gateway-api@v$GATEWAY_API_VERSION"
json=$(cd "$cache_root" && go mod download -json "sigs.k8s.io/gateway-api@v$GATEWAY_API_VERSION")
dir=$(printf '%s\n' "$json" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",*$/\1/p')
[ -n "$dir" ] && [ -d "$dir/config/crd/standard" ] || { log "no config/crd/standard in the module: $json"; exit 1; }
tmp=$(mktemp -d "$cache_root/.gateway-api.XXXXXX")
n=0
for f in "$dir"/config/crd/standard/*.yaml; do
  if grep -q '^kind: CustomResourceDefinition' "$f"; then cp "$f" "$tmp/"; n=$((n + 1)); fi
done
[ "$n" -gt 0 ] || { log "no CustomResourceDefinition in $dir/config/crd/standard"; exit 1; }
touch "$tmp/.done"
mkdir -p "$(dirname "$out")"
rm -rf "$out"
mv "$tmp" "$out"
log "$n CRDs in $out"
echo "$out"
