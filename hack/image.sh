#!/usr/bin/env bash
# Builds the images of `make image` without a container engine, as OCI image
# archives (a tar of an OCI image layout) in $OUT (default <cargo target dir>/oci):
#
#   webchecker-operator.oci.tar   the operator, as the Dockerfile's final stage
#   chart-test.oci.tar            the chart's `helm test` pod (webchecker-chart-test)
#   pause.oci.tar                 the pod sandbox image of the node (hack/node.sh)
#
#   hack/image.sh [all|operator|chart-test|pause]   (default all)
#
# The base layer stands in for gcr.io/distroless/cc-debian12:nonroot: glibc and
# libgcc from Debian's packages (apt-get download, the versions apt offers),
# Mozilla's CA roots (ca-certificates) as one bundle, tzdata, netbase,
# os-release, users root/nonroot/nobody, /tmp, /home/nonroot; no shell, no
# package manager. base-packages.txt in $OUT lists what went in.
# tests/image.rs checks that the Dockerfile and the archive agree.
#
# Labels: the Dockerfile's (title, description, licenses, version: the crate
# version) and org.opencontainers.image.revision, the commit (`git rev-parse
# HEAD`), when the tracked files are those of that commit; a build from a
# changed tree has no revision label rather than a wrong one. Like the image
# time (the last commit's), it keeps the archives reproducible: the same
# commit gives the same bytes. No source/url labels: the project names no
# repository URL (Cargo.toml, Chart.yaml).
#
# Environment: IMAGE_TAG (default: the crate version, the chart's appVersion),
# CARGO_TARGET_DIR, SOURCE_DATE_EPOCH (file and image times; default the last
# commit's time), SKIP_CARGO_BUILD=1 (use the release binaries as they are),
# IMAGE_PROFILE=dev (the binaries of the test build, target/debug, as they
# are: `make test` builds its images from them instead of compiling the whole
# dependency graph a second time with the release profile; the default,
# release, is what `make image` and the Dockerfile ship).
set -euo pipefail
log() { echo "image: $*" >&2; }
die() { echo "image: error: $*" >&2; exit 1; }
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
. "$here/versions.env"

what=${1:-all}
target=${CARGO_TARGET_DIR:-$repo/target}
case $target in /*) ;; *) target=$repo/$target ;; esac
OUT=${OUT:-$target/oci}
version=$(sed -n 's/^version = "\(.*\)"/\1/p' "$repo/Cargo.toml" | head -n 1)
[ -n "$version" ] || die "no version in $repo/Cargo.toml"
tag=${IMAGE_TAG:-$version}
epoch=${SOURCE_DATE_EPOCH:-$(git -C "$repo" log -1 --format=%ct 2>/dev/null || echo 0)}
created=$(date -u -d "@$epoch" +%Y-%m-%dT%H:%M:%SZ)
cache_root=${WEBCHECKER_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/webchecker-operator}

for c in dpkg-deb apt-get; do command -v $c >/dev/null || die "$c is required (a Debian machine)"; done
tool=$("$here/build-node-tools.sh" image | tail -n 1)/oci-image
mkdir -p "$OUT"
work=$(mktemp -d "$OUT/.build.XXXXXX")
trap 'rm -rf "$work"' EXIT

# The Debian packages of the base layer, downloaded once per version into the cache.
BASE_PACKAGES=(base-files netbase tzdata ca-certificates libc6 libgcc-s1)

fetch_debs() {
  local debs="$cache_root/debs" p v f
  mkdir -p "$debs"
  : >"$OUT/base-packages.txt"
  for p in "${BASE_PACKAGES[@]}"; do
    v=$(apt-cache policy "$p" | awk '/Candidate:/ { print $2 }')
    if { [ -z "$v" ] || [ "$v" = "(none)" ]; } && [ "$(id -u)" -eq 0 ] && [ -z "${apt_updated:-}" ]; then
      log "apt knows no version of $p: apt-get update"
      apt-get update -q >/dev/null
      apt_updated=1
      v=$(apt-cache policy "$p" | awk '/Candidate:/ { print $2 }')
    fi
    [ -n "$v" ] && [ "$v" != "(none)" ] || die "apt knows no version of $p (run apt-get update)"
    f=$(find "$debs" -maxdepth 1 -name "${p}_${v//:/%3a}_*.deb" | head -n 1)
    if [ -z "$f" ]; then
      log "downloading $p $v"
      (cd "$debs" && apt-get download -q -o APT::Sandbox::User=root "$p=$v" >/dev/null) || die "apt-get download $p=$v failed"
      f=$(find "$debs" -maxdepth 1 -name "${p}_${v//:/%3a}_*.deb" | head -n 1)
    fi
    [ -n "$f" ] || die "no .deb for $p $v in $debs"
    echo "$p $v $(sha256sum "$f" | cut -d' ' -f1)" >>"$OUT/base-packages.txt"
    echo "$f"
  done
}

# base_rootfs DIR: the distroless-like tree.
base_rootfs() {
  local root=$1 x="$work/debs" deb p
  mkdir -p "$root" "$x"
  while read -r deb; do
    p=$(dpkg-deb -f "$deb" Package)
    rm -rf "${x:?}/$p"
    dpkg-deb -x "$deb" "$x/$p"
    # A dpkg status entry per package, as distroless has, for image scanners.
    mkdir -p "$root/var/lib/dpkg/status.d"
    dpkg-deb -f "$deb" >"$root/var/lib/dpkg/status.d/$p"
    # The license (some packages, e.g. libgcc-s1, only link to their source
    # package's documentation, which is not part of the image).
    if [ -f "$x/$p/usr/share/doc/$p/copyright" ]; then
      mkdir -p "$root/usr/share/doc/$p"
      cp "$x/$p/usr/share/doc/$p/copyright" "$root/usr/share/doc/$p/copyright"
    fi
  done < <(fetch_debs)

  # glibc and libgcc: the libraries and the dynamic loader; no documentation.
  for p in libc6 libgcc-s1; do
    (cd "$x/$p" && find . \( -path ./usr/share -prune \) -o \( ! -type d -print \)) |
      while read -r f; do
        mkdir -p "$root/$(dirname "$f")"
        cp -a "$x/$p/$f" "$root/$f"
      done
  done
  # CA roots: the bundle update-ca-certificates would write, in name order.
  mkdir -p "$root/etc/ssl/certs"
  find "$x/ca-certificates/usr/share/ca-certificates/mozilla" -name '*.crt' | LC_ALL=C sort |
    xargs cat >"$root/etc/ssl/certs/ca-certificates.crt"
  mkdir -p "$root/usr/share"
  cp -a "$x/tzdata/usr/share/zoneinfo" "$root/usr/share/zoneinfo"
  for f in services protocols rpc ethertypes; do
    [ -e "$x/netbase/etc/$f" ] && cp -a "$x/netbase/etc/$f" "$root/etc/$f"
  done
  mkdir -p "$root/usr/lib"
  cp -a "$x/base-files/usr/lib/os-release" "$root/usr/lib/os-release"
  ln -s ../usr/lib/os-release "$root/etc/os-release"
  cp -a "$x/base-files/etc/debian_version" "$root/etc/debian_version"

  cat >"$root/etc/passwd" <<'EOF'
root:x:0:0:root:/root:/sbin/nologin
nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin
nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin
EOF
  cat >"$root/etc/group" <<'EOF'
root:x:0:
nobody:x:65534:
nonroot:x:65532:
EOF
  echo 'hosts: files dns' >"$root/etc/nsswitch.conf"
  mkdir -p "$root/tmp" "$root/root" "$root/home/nonroot"
  chmod 1777 "$root/tmp"
  chmod 0700 "$root/root" "$root/home/nonroot"
  chmod 0644 "$root/etc/passwd" "$root/etc/group" "$root/etc/nsswitch.conf"

  # No shell, no package manager.
  local bad
  bad=$(cd "$root" && find . -type f \( -name sh -o -name bash -o -name dash -o -name busybox -o -name dpkg -o -name apt \) | head -n 3)
  [ -z "$bad" ] || die "base layer holds $bad"
  rm -rf "$x"
}

# LABELS: those of both of this project's images, beside title and description.
project_labels() {
  LABELS=(
    --label org.opencontainers.image.licenses=Apache-2.0
    --label "org.opencontainers.image.version=$version"
  )
  local revision
  if revision=$(git -C "$repo" rev-parse --verify -q HEAD 2>/dev/null) &&
    git -C "$repo" diff --quiet HEAD -- 2>/dev/null; then
    LABELS+=(--label "org.opencontainers.image.revision=$revision")
  else
    log "no revision label: not a git checkout, or tracked files differ from HEAD"
  fi
}

# distroless's nonroot variant: working directory and environment of its config.
BASE_CONFIG=(
  --workdir /home/nonroot
  --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
  --env SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt
  --owner home/nonroot=65532:65532
  --created "$created"
)

case ${IMAGE_PROFILE:-release} in
  release) bin_dir=$target/release ;;
  dev) bin_dir=$target/debug SKIP_CARGO_BUILD=1 ;;
  *) die "IMAGE_PROFILE is release or dev, not ${IMAGE_PROFILE}" ;;
esac

release_binaries() {
  [ "${SKIP_CARGO_BUILD:-}" = 1 ] && return
  log "building the release binaries (cargo build --release)"
  (cd "$repo" && CARGO_TARGET_DIR="$target" cargo build --release --locked \
    --bin webchecker-operator --bin webchecker-chart-test)
}

# app_layer DIR BINARY: DIR/usr/local/bin/<binary>.
app_layer() {
  mkdir -p "$1/usr/local/bin"
  [ -x "$bin_dir/$2" ] || die "$bin_dir/$2 is missing (build it first)"
  install -m 0755 "$bin_dir/$2" "$1/usr/local/bin/$2"
}

# The Dockerfile's final stage (tests/image.rs compares the two).
build_operator() {
  app_layer "$work/operator" webchecker-operator
  "$tool" build --out "$OUT/webchecker-operator.oci.tar" \
    --name "docker.io/library/webchecker-operator:$tag" \
    --layer "$work/base" --layer "$work/operator" "${BASE_CONFIG[@]}" \
    --user 65532:65532 \
    --expose 8080/tcp \
    --entrypoint /usr/local/bin/webchecker-operator \
    --label org.opencontainers.image.title=webchecker-operator \
    --label "org.opencontainers.image.description=Kubernetes operator that probes HTTP endpoints described by WebChecker resources" \
    "${LABELS[@]}"
  log "wrote $OUT/webchecker-operator.oci.tar (docker.io/library/webchecker-operator:$tag)"
}

build_chart_test() {
  app_layer "$work/chart-test" webchecker-chart-test
  "$tool" build --out "$OUT/chart-test.oci.tar" \
    --name "docker.io/library/webchecker-operator-chart-test:$tag" \
    --layer "$work/base" --layer "$work/chart-test" "${BASE_CONFIG[@]}" \
    --user 65532:65532 \
    --expose 8080/tcp \
    --entrypoint /usr/local/bin/webchecker-chart-test \
    --label org.opencontainers.image.title=webchecker-operator-chart-test \
    --label "org.opencontainers.image.description=helm test of the webchecker-operator chart" \
    "${LABELS[@]}"
  log "wrote $OUT/chart-test.oci.tar (docker.io/library/webchecker-operator-chart-test:$tag)"
}

# The sandbox image every pod of the node starts first: one static program
# that holds the pod's namespaces (hack/image/pause.c).
build_pause() {
  command -v gcc >/dev/null || die "gcc is required for the pause image"
  mkdir -p "$work/pause"
  gcc -static -Os -s -Wall -Werror -o "$work/pause/pause" "$here/image/pause.c"
  "$tool" build --out "$OUT/pause.oci.tar" --name "$PAUSE_IMAGE" \
    --layer "$work/pause" --user 65535:65535 --entrypoint /pause --created "$created"
  log "wrote $OUT/pause.oci.tar ($PAUSE_IMAGE)"
}

case "$what" in
  all | operator | chart-test) ;;
  pause) build_pause; exit 0 ;;
  *) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2 ;;
esac
project_labels
release_binaries
base_rootfs "$work/base"
case "$what" in
  all) build_operator; build_chart_test; build_pause ;;
  operator) build_operator ;;
  chart-test) build_chart_test ;;
esac
