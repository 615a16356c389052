#!/usr/bin/env bash
# Installs the system packages the tests and benchmarks need on a fresh Debian
# machine, only those that are missing: openssl, curl, python3, promtool
# (Debian package prometheus), prometheus-blackbox-exporter, exim (the SMTP
# server with STARTTLS of the TCP-check tests, kit/src/peers.rs), and what the
# real node of hack/node.sh needs (runc, the CNI plugins, nft), skopeo (make
# push) and docker-registry (the node tests' registry). Go and Rust are
# expected to be preinstalled: they are only checked.
#
#   hack/install-deps.sh           all of it
#   hack/install-deps.sh --node    only the node's packages (and skopeo,
#                                  docker-registry: make push, the registry tests)
set -euo pipefail
node_only=
[ "${1:-}" = --node ] && node_only=1

SUDO=
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "install-deps: run as root or install sudo" >&2; exit 1; }
  SUDO=sudo
fi

missing=()
want() { # want COMMAND PACKAGE
  if command -v "$1" >/dev/null 2>&1; then
    echo "install-deps: $1 found ($(command -v "$1"))"
  else
    missing+=("$2")
  fi
}
# The node (hack/node.sh): runc for containerd, the CNI plugins in /usr/lib/cni,
# nft for our forwarding guard and kube-proxy's nftables mode, gcc for the pause program.
want runc runc
want nft nftables
want gcc gcc
# make push copies the image archives to a registry with skopeo; the node
# tests pull from a registry of Debian's docker-registry (the CNCF
# distribution) that the kit starts on the node's address.
want skopeo skopeo
want docker-registry docker-registry
# aws-lc-rs, the operator's TLS provider, builds its C library with cmake (gcc above).
want cmake cmake
if [ -x /usr/lib/cni/bridge ] && [ -x /usr/lib/cni/host-local ] && [ -x /usr/lib/cni/loopback ]; then
  echo "install-deps: CNI plugins found"
else
  missing+=(containernetworking-plugins)
fi
want openssl openssl
want curl curl
want python3 python3
if [ -z "$node_only" ]; then
  want promtool prometheus
  # The probe bench counts the system calls of our prober and of the floor
  # (strace -c) and samples where its CPU goes (perf).
  want strace strace
  want perf linux-perf
  # Part 8 of the bench profiles a replica's heap.
  want heaptrack heaptrack
  # Debian installs the exporter as /usr/bin/prometheus-blackbox-exporter.
  if command -v prometheus-blackbox-exporter >/dev/null 2>&1 || command -v blackbox_exporter >/dev/null 2>&1; then
    echo "install-deps: blackbox exporter found"
  else
    missing+=(prometheus-blackbox-exporter)
  fi
  # The TCP checks' SMTP peer: the tests run exim4 themselves, unprivileged
  # ports on loopback, a config of their own (kit/src/peers.rs). The daemon
  # is in /usr/sbin, which a user's PATH may lack.
  if [ -x /usr/sbin/exim4 ]; then
    echo "install-deps: exim4 found (/usr/sbin/exim4)"
  else
    missing+=(exim4-daemon-light)
  fi
  # tests/examples/main.rs: nginx, the examples' web server (the tests run it with
  # a config of their own, kit/src/nginx.rs; the package's own server is
  # stopped below), and Lua 5.1, which runs the Argo CD health script of
  # examples/ (the Lua that Argo's gopher-lua speaks).
  if [ -x /usr/sbin/nginx ]; then
    echo "install-deps: nginx found (/usr/sbin/nginx)"
  else
    missing+=(nginx)
  fi
  want lua5.1 lua5.1
  # The bench's PNG plots need a TrueType font.
  if [ -d /usr/share/fonts/truetype/dejavu ]; then
    echo "install-deps: DejaVu fonts found"
  else
    missing+=(fonts-dejavu-core)
  fi
fi

if [ ${#missing[@]} -gt 0 ]; then
  command -v apt-get >/dev/null || { echo "install-deps: missing ${missing[*]} and no apt-get: install them by hand" >&2; exit 1; }
  echo "install-deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -q
  $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
  # The Debian packages start their daemons (exim4 on port 25); the tests
  # start their own instances, so stop and disable those services if any.
  services=(prometheus prometheus-blackbox-exporter prometheus-node-exporter exim4 docker-registry)
  if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
    for s in "${services[@]}"; do
      $SUDO systemctl disable --now "$s" >/dev/null 2>&1 || true
    done
  else
    for s in "${services[@]}"; do
      [ -x "/etc/init.d/$s" ] || continue
      $SUDO "/etc/init.d/$s" stop >/dev/null 2>&1 || true
      $SUDO update-rc.d "$s" disable >/dev/null 2>&1 || true
    done
  fi
fi
# No exim left listening as a system service (a package started before this
# script knew of it, or an init system that ignored the stop above).
if [ -f /run/exim4/exim.pid ] && kill -0 "$(cat /run/exim4/exim.pid)" 2>/dev/null; then
  echo "install-deps: stopping the system exim4 daemon (pid $(cat /run/exim4/exim.pid)): the tests run their own"
  $SUDO kill "$(cat /run/exim4/exim.pid)" || true
fi
# Nor nginx, which its package starts (and systemd at every boot): on
# 0.0.0.0:80 it would take port 80 from the tests' own servers on loopback
# addresses.
if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ] && systemctl is-enabled nginx >/dev/null 2>&1; then
  $SUDO systemctl disable --now nginx >/dev/null 2>&1 || true
fi
if [ -f /run/nginx.pid ] && kill -0 "$(cat /run/nginx.pid)" 2>/dev/null; then
  echo "install-deps: stopping the system nginx (pid $(cat /run/nginx.pid)): the tests run their own"
  $SUDO kill -QUIT "$(cat /run/nginx.pid)" || true
fi

fail=0
. "$(dirname "$0")/versions.env"
# version_ge A B: is version A >= B (dotted numbers)?
version_ge() { [ "$(printf '%s\n%s\n' "$2" "$1" | sort -V | head -n 1)" = "$2" ]; }
if command -v go >/dev/null 2>&1; then
  gov=$(go env GOVERSION | sed 's/^go//')
  echo "install-deps: go $gov"
  if ! version_ge "$gov" "$GO_MIN_VERSION"; then
    echo "install-deps: error: Go $gov is older than $GO_MIN_VERSION (the go line of k8s.io/kubernetes v$KUBE_VERSION)" >&2
    fail=1
  fi
else
  echo "install-deps: error: Go (>= 1.26, the go line of k8s.io/kubernetes v1.36) is required to build the control plane; it is not on PATH" >&2
  fail=1
fi
# rust-toolchain.toml names the release of hack/versions.env; rustup finds it
# by that name. A machine whose rustup has it only as "stable" gets a link,
# so nothing is downloaded.
if command -v rustup >/dev/null 2>&1 && ! rustup toolchain list | grep -q "^$RUST_VERSION-"; then
  for t in $(rustup toolchain list | awk '{print $1}'); do
    sysroot=$(RUSTUP_TOOLCHAIN=$t rustc --print sysroot 2>/dev/null) || continue
    if [ "$(RUSTUP_TOOLCHAIN=$t rustc --version | awk '{print $2}')" = "$RUST_VERSION" ]; then
      rustup toolchain link "$RUST_VERSION" "$sysroot" && echo "install-deps: rustup toolchain $RUST_VERSION -> $t"
      break
    fi
  done
fi
if command -v cargo >/dev/null 2>&1; then
  if ! rsv=$(rustc --version | awk '{print $2}') || [ -z "$rsv" ]; then
    echo "install-deps: error: rustup has no toolchain $RUST_VERSION (rust-toolchain.toml): install it with 'rustup toolchain install $RUST_VERSION --component clippy rustfmt'" >&2
    exit 1
  fi
  echo "install-deps: rustc $rsv (lints pinned to $RUST_VERSION, minimum $RUST_MIN_VERSION)"
  if ! version_ge "$rsv" "$RUST_MIN_VERSION"; then
    echo "install-deps: error: Rust $rsv is older than $RUST_MIN_VERSION (Cargo.toml rust-version)" >&2
    fail=1
  fi
else
  echo "install-deps: error: Rust (cargo) is required; it is not on PATH (install it with rustup)" >&2
  fail=1
fi
exit $fail
