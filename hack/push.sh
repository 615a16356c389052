#!/usr/bin/env bash
# Pushes the images of `make image` and the chart of `make chart-package` to a
# registry (`make push REGISTRY=...` runs both first):
#
#   hack/push.sh REGISTRY          e.g. registry.example.com/team
#
#   REGISTRY/webchecker-operator:<version>              the operator's image
#   REGISTRY/webchecker-operator-chart-test:<version>   the `helm test` pod's image
#   oci://REGISTRY/charts/webchecker-operator:<version> the chart (helm push)
#
# <version> is Cargo.toml's: the chart's version and appVersion, and so the
# chart's default image tag. The chart lives under charts/: pushed to
# REGISTRY itself it would take the operator image's repository and tag.
#
# The images go with skopeo (Debian's package; hack/install-deps.sh): a copy
# of the OCI archive as it is (--preserve-digests: the registry serves the
# manifests and blobs hack/image.sh wrote, digests included). Credentials are
# skopeo's and helm's own (`skopeo login`, `helm registry login`); a private
# CA is trusted through the machine's roots or SSL_CERT_FILE.
#
# Environment: OUT (the archives' directory, as hack/image.sh: default
# <cargo target dir>/oci), CHART_OUT (the packaged chart's directory, default
# target/charts), HELM (the helm binary, default hack/build-tools.sh's).
set -euo pipefail
log() { echo "push: $*" >&2; }
die() { echo "push: error: $*" >&2; exit 1; }
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)

registry=${1:-}
[ -n "$registry" ] || die "no registry given: make push REGISTRY=registry.example.com/team"
registry=${registry%/}
case $registry in
  *://*) die "REGISTRY is a host and path without a scheme (registry.example.com/team), not $registry" ;;
esac
command -v skopeo >/dev/null || die "skopeo is required (hack/install-deps.sh installs it)"

target=${CARGO_TARGET_DIR:-$repo/target}
case $target in /*) ;; *) target=$repo/$target ;; esac
OUT=${OUT:-$target/oci}
chart_out=${CHART_OUT:-$repo/target/charts}
version=$(sed -n 's/^version = "\(.*\)"/\1/p' "$repo/Cargo.toml" | head -n 1)
[ -n "$version" ] || die "no version in $repo/Cargo.toml"
helm=${HELM:-$("$here/build-tools.sh" | tail -n 1)/helm}

for pair in webchecker-operator:webchecker-operator chart-test:webchecker-operator-chart-test; do
  archive=$OUT/${pair%%:*}.oci.tar
  dest=$registry/${pair#*:}:$version
  [ -f "$archive" ] || die "$archive is missing (make image)"
  log "$archive -> $dest"
  skopeo copy --quiet --preserve-digests "oci-archive:$archive" "docker://$dest"
done

tgz=$chart_out/webchecker-operator-$version.tgz
[ -f "$tgz" ] || die "$tgz is missing (make chart-package)"
log "$tgz -> oci://$registry/charts/webchecker-operator:$version"
"$helm" push "$tgz" "oci://$registry/charts"
log "done: helm install wc oci://$registry/charts/webchecker-operator --version $version --set image.repository=$registry/webchecker-operator ..."
