#!/usr/bin/env bash
# fetch-module-crds.sh NAME MODULE VERSION DIR FILE...: copies FILEs of DIR
# (each a CRD; a FILE with `*` is a pattern, of which the files that hold a
# CRD are taken) in the Go module MODULE at VERSION (fetched from the Go
# module proxy) into
# the tools cache, outside the repository (they are never committed), as
# tools/NAME-vVERSION/crd, and prints that directory. Reuses a finished
# fetch. The scripts that pin a project's CRDs call it
# (hack/fetch-gateway-api.sh, hack/fetch-prometheus-operator-crds.sh,
# hack/fetch-cert-manager-crds.sh).
set -euo pipefail
[ $# -ge 5 ] || { echo "usage: $0 NAME MODULE VERSION DIR FILE..." >&2; exit 2; }
name=$1 module=$2 version=$3 sub=$4
shift 4

cache_root=${WEBCHECKER_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/webchecker-operator}
log() { echo "fetch-module-crds ($name): $*" >&2; }
command -v go >/dev/null || { log "Go is required (it fetches from the Go module proxy)"; exit 1; }

export GOTOOLCHAIN=local GOWORK=off GOFLAGS=-mod=mod
export GOMODCACHE=${GOMODCACHE:-$cache_root/gomod}

out="$cache_root/tools/$name-v$version/crd"
if [ -f "$out/.done" ]; then echo "$out"; exit 0; fi

mkdir -p "$cache_root"
if [ -z "${FETCH_MODULE_CRDS_LOCKED:-}" ] && command -v flock >/dev/null; then
  FETCH_MODULE_CRDS_LOCKED=1 exec flock "$cache_root/fetch-$name-crds.lock" "$0" "$name" "$module" "$version" "$sub" "$@"
fi
if [ -f "$out/.done" ]; then echo "$out"; exit 0; fi

log "downloading $module@v$version"
json=$(cd "$cache_root" && go mod download -json "$module@v$version")
dir=$(printf '%s\n' "$json" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",*$/\1/p')
[ -n "$dir" ] || { log "go mod download gave no directory: $json"; exit 1; }
tmp=$(mktemp -d "$cache_root/.$name.XXXXXX")
n=0
for f in "$@"; do
  case $f in
    *'*'*)
      # A pattern: the files it matches that hold a CRD (others are left out).
      for g in "$dir/$sub"/$f; do
        if [ -f "$g" ] && grep -q '^kind: CustomResourceDefinition' "$g"; then cp "$g" "$tmp/"; n=$((n + 1)); fi
      done
      ;;
    *)
      [ -f "$dir/$sub/$f" ] || { log "no $sub/$f in the module"; rm -rf "$tmp"; exit 1; }
      grep -q '^kind: CustomResourceDefinition' "$dir/$sub/$f" || { log "$sub/$f holds no CustomResourceDefinition"; rm -rf "$tmp"; exit 1; }
      cp "$dir/$sub/$f" "$tmp/"
      n=$((n + 1))
      ;;
  esac
done
[ "$n" -gt 0 ] || { log "no CustomResourceDefinition in $sub matches $*"; rm -rf "$tmp"; exit 1; }
touch "$tmp/.done"
mkdir -p "$(dirname "$out")"
rm -rf "$out"
mv "$tmp" "$out"
log "$n CRDs in $out"
echo "$out"
