#!/usr/bin/env bash
# A real single-node cluster on this machine: the control plane of
# hack/cluster.sh plus kube-controller-manager, kube-scheduler, containerd
# (runc), the kubelet, kube-proxy (nftables) and pod networking through the
# CNI bridge plugin. Used by `make node-up`/`make node-down` and tests/node/main.rs.
# docs/node.md explains every setting.
#
#   hack/node.sh up DIR            start (or reuse) it; last stdout line: DIR/kubeconfig
#   hack/node.sh down DIR          stop every process `up` started and remove what it
#                                  created (pods, mounts, network namespaces, the bridge,
#                                  nftables tables, cgroups, changed sysctls); idempotent
#   hack/node.sh status DIR        state of each process; exit 0 only if all run
#   hack/node.sh load DIR ARCHIVE...  import OCI image archives into the node's containerd
#   hack/node.sh ctr DIR ARGS...   ctr against the node's containerd (namespace k8s.io)
#   hack/node.sh trust-registry DIR HOST:PORT CA_FILE
#                                  let the node's containerd pull from that registry over
#                                  TLS with that CA (certs.d/HOST:PORT/hosts.toml)
#
# Pods get addresses in $NODE_POD_CIDR on the bridge $NODE_BRIDGE, whose own
# address is the node's address (and where the API server listens). Pods have
# routes to that subnet and to the Service range only, and an nftables rule
# drops whatever would be forwarded between the bridge and another interface:
# nothing routes off the machine. One node per machine (the bridge is global).
#
# Environment: NODE_NICE (niceness of every node process and so of the pods,
# default 19), NODE_IMAGES (OCI archives loaded at `up`, default every
# <cargo target dir>/oci/*.oci.tar), NODE_START_TIMEOUT (seconds, default 180),
# and those of hack/cluster.sh.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
. "$here/versions.env"

NODE_NAME=webchecker-node
NODE_BRIDGE=wcnode0
NODE_POD_CIDR=10.213.0.0/24
NODE_IP=10.213.0.1
SERVICE_CIDR=10.0.0.0/24 # hack/cluster.sh's --service-cluster-ip-range
RUN=/run/webchecker-node # short paths: shim sockets must fit in 108 bytes
NICE=${NODE_NICE:-19}
START_TIMEOUT=${NODE_START_TIMEOUT:-180}
NFT_TABLE=webchecker-node
# Kernel settings the kubelet (setupKernelTunables) and the CNI bridge plugin
# (isGateway) change; `up` saves them, `down` puts them back.
SYSCTLS=(vm/overcommit_memory vm/panic_on_oom kernel/panic kernel/panic_on_oops
  kernel/keys/root_maxkeys kernel/keys/root_maxbytes net/ipv4/ip_forward)
PROCS=(kube-proxy kubelet kube-scheduler kube-controller-manager containerd)

log() { echo "node: $*" >&2; }
die() { echo "node: error: $*" >&2; exit 1; }

usage() {
  sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//' >&2
  exit 2
}

# ---------------------------------------------------------------- helpers

need() { command -v "$1" >/dev/null || die "$1 is required (hack/install-deps.sh --node installs it)"; }

node_bin() {
  "$here/build-node-tools.sh" node | tail -n 1
}

pid_alive() { # pid_alive N: DIR/node/N.pid names a live process started for DIR
  local pidfile="$N/$1.pid" pid state
  [ -s "$pidfile" ] || return 1
  pid=$(cat "$pidfile")
  [ -d "/proc/$pid" ] || return 1
  state=$(awk '{ print $3 }' "/proc/$pid/stat" 2>/dev/null) || return 1
  [ "$state" != Z ] && [ "$state" != X ] || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "$N/"
}

launch() { # launch NAME ARGS...: start detached, niced, logging to N/NAME.log
  local name=$1; shift
  { printf '%q ' "$@"; echo; } >"$N/$name.cmd"
  echo "---- $(date -u +%FT%TZ) starting $name" >>"$N/$name.log"
  # shellcheck disable=SC2016 # expanded by the inner shell
  setsid nice -n "$NICE" bash -c 'echo $$ >"$1"; shift; exec "$@"' launch "$N/$name.pid" "$@" \
    </dev/null >>"$N/$name.log" 2>&1 &
  local _
  for _ in $(seq 100); do pid_alive "$name" && return 0; sleep 0.05; done
  tail -n 20 "$N/$name.log" >&2
  die "$name did not start (see $N/$name.log)"
}

stop_proc() { # stop_proc NAME [TIMEOUT]: SIGTERM, then SIGKILL
  local name=$1 t=${2:-20} pid deadline
  pid_alive "$name" || { rm -f "$N/$name.pid"; return 0; }
  pid=$(cat "$N/$name.pid")
  kill -TERM "$pid" 2>/dev/null || true
  deadline=$(($(date +%s) + t))
  while pid_alive "$name"; do
    if [ "$(date +%s)" -ge "$deadline" ]; then
      log "$name (pid $pid) still running after ${t}s, sending SIGKILL"
      kill -KILL "$pid" 2>/dev/null || true
      sleep 0.2
      break
    fi
    sleep 0.1
  done
  rm -f "$N/$name.pid"
}

wait_for() { # wait_for WHAT SECONDS COMMAND...: poll until COMMAND succeeds
  local what=$1 t=$2 deadline; shift 2
  deadline=$(($(date +%s) + t))
  until "$@" >/dev/null 2>&1; do
    [ "$(date +%s)" -lt "$deadline" ] || return 1
    sleep 0.5
  done
}

kc() { "$BIN/kubectl" --kubeconfig "$DIR/kubeconfig" "$@"; }
ctr_() { "$NBIN/ctr" --address "$RUN/containerd.sock" -n k8s.io "$@"; }

# client_cert NAME CN ORG: a client certificate of the cluster CA and a kubeconfig using it.
client_cert() {
  local name=$1 cn=$2 org=$3 pki="$DIR/pki" subj
  subj="/CN=$cn"
  [ -z "$org" ] || subj="/O=$org/CN=$cn"
  openssl req -newkey rsa:2048 -nodes -sha256 -keyout "$N/pki/$name.key" -out "$N/pki/$name.csr" \
    -subj "$subj" 2>/dev/null
  printf 'basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth\n' \
    >"$N/pki/$name.ext"
  openssl x509 -req -sha256 -days 3650 -in "$N/pki/$name.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" \
    -CAcreateserial -CAserial "$N/pki/ca.srl" -extfile "$N/pki/$name.ext" -out "$N/pki/$name.crt" 2>/dev/null
  rm -f "$N/pki/$name.csr" "$N/pki/$name.ext"
  cat >"$N/$name.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: local
  cluster:
    server: $APISERVER_URL
    certificate-authority: $pki/ca.crt
users:
- name: $name
  user:
    client-certificate: $N/pki/$name.crt
    client-key: $N/pki/$name.key
contexts:
- name: local
  context: {cluster: local, user: $name}
current-context: local
EOF
  chmod 600 "$N/$name.kubeconfig" "$N/pki/$name.key"
}

# free_port: a TCP port nothing listens on now (below the ephemeral range).
free_port() {
  python3 -c '
import random, socket
for _ in range(1000):
    p = random.randint(20000, 32000)
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", p)); s.close(); print(p); break
    except OSError:
        s.close()'
}

load_node_env() {
  # shellcheck disable=SC1091
  . "$DIR/cluster.env"
  [ -f "$N/node.env" ] && . "$N/node.env"
  return 0
}

# ---------------------------------------------------------------- network

net_up() {
  if ! ip link show "$NODE_BRIDGE" >/dev/null 2>&1; then
    ip link add "$NODE_BRIDGE" type bridge
  fi
  ip addr replace "$NODE_IP/${NODE_POD_CIDR#*/}" dev "$NODE_BRIDGE"
  ip link set "$NODE_BRIDGE" up
  # Traffic the host sends to a Service address leaves through the bridge
  # (kube-proxy rewrites it on the way), never through the default route.
  ip route replace "$SERVICE_CIDR" dev "$NODE_BRIDGE"
  nft -f - <<EOF
table inet $NFT_TABLE
delete table inet $NFT_TABLE
table inet $NFT_TABLE {
  chain forward {
    type filter hook forward priority filter - 10; policy accept;
    iifname "$NODE_BRIDGE" oifname != "$NODE_BRIDGE" drop
    oifname "$NODE_BRIDGE" iifname != "$NODE_BRIDGE" drop
  }
}
EOF
}

write_cni_conf() {
  mkdir -p "$N/cni/net.d"
  cat >"$N/cni/net.d/10-webchecker.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "webchecker-node",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$NODE_BRIDGE",
      "isGateway": true,
      "isDefaultGateway": false,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": "$N/cni/ipam",
        "ranges": [[{"subnet": "$NODE_POD_CIDR", "gateway": "$NODE_IP"}]],
        "routes": [{"dst": "$SERVICE_CIDR"}]
      }
    }
  ]
}
EOF
}

# ---------------------------------------------------------------- components

write_containerd_conf() {
  mkdir -p "$RUN" "$N/containerd"
  cat >"$N/containerd/config.toml" <<EOF
version = 3
root = '$N/containerd/root'
state = '$RUN/containerd'
# Plugins that would write outside these directories (/opt, /var/run/nri) or
# that this node does not use.
disabled_plugins = [
  'io.containerd.internal.v1.opt',
  'io.containerd.nri.v1.nri',
  'io.containerd.image-verifier.v1.bindir',
  'io.containerd.snapshotter.v1.blockfile',
  'io.containerd.snapshotter.v1.devmapper',
  'io.containerd.snapshotter.v1.erofs',
  'io.containerd.snapshotter.v1.zfs',
  'io.containerd.snapshotter.v1.native',
  'io.containerd.differ.v1.erofs',
  'io.containerd.mount-handler.v1.erofs',
]

[grpc]
  address = '$RUN/containerd.sock'

[ttrpc]
  address = '$RUN/containerd.sock.ttrpc'

[plugins]
  [plugins.'io.containerd.cri.v1.images']
    snapshotter = 'overlayfs'
    [plugins.'io.containerd.cri.v1.images'.pinned_images]
      sandbox = '$PAUSE_IMAGE'
    # Registries and their CAs, one directory per host with a hosts.toml,
    # as an administrator keeps them in /etc/containerd/certs.d (read at
    # each pull: trust-registry needs no restart).
    [plugins.'io.containerd.cri.v1.images'.registry]
      config_path = '$N/containerd/certs.d'

  [plugins.'io.containerd.cri.v1.runtime']
    netns_mounts_under_state_dir = true
    # This machine's root lacks CAP_SYS_RESOURCE: a process may not lower its
    # oom_score_adj, and runc fails the pod sandbox's -998 ("can't get final
    # child's PID from pipe"). Clamp to containerd's own value instead.
    restrict_oom_score_adj = true
    cdi_spec_dirs = ['$N/cdi']
    enable_criu = false
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = 'io.containerd.runc.v2'
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        BinaryName = '$(command -v runc)'
        Root = '$RUN/runc'
        SystemdCgroup = false
    [plugins.'io.containerd.cri.v1.runtime'.cni]
      bin_dirs = ['/usr/lib/cni']
      conf_dir = '$N/cni/net.d'
      max_conf_num = 1

  [plugins.'io.containerd.grpc.v1.cri']
    stream_server_address = '127.0.0.1'

  [plugins.'io.containerd.shim.v1.manager']
    socket_dir = '$RUN/s'
EOF
}

start_containerd() {
  write_containerd_conf
  launch containerd "$NBIN/containerd" --config "$N/containerd/config.toml"
  wait_for "containerd" 60 ctr_ version || { tail -n 30 "$N/containerd.log" >&2; die "containerd did not answer"; }
}

pause_loaded() { ctr_ images ls -q 2>>"$N/ctr.err" | grep -qxF "$PAUSE_IMAGE"; }

# trust_registry HOST:PORT CA_FILE: the registry's hosts.toml and CA, where
# containerd's config_path looks for them.
trust_registry() {
  local host=$1 ca=$2 d
  [[ $host =~ ^[A-Za-z0-9.-]+(:[0-9]+)?$ ]] || die "trust-registry: HOST[:PORT], not $host"
  [ -f "$ca" ] || die "trust-registry: $ca not found"
  d="$N/containerd/certs.d/$host"
  mkdir -p "$d"
  cp "$ca" "$d/ca.crt"
  cat >"$d/hosts.toml" <<EOF
server = "https://$host"

[host."https://$host"]
  capabilities = ["pull", "resolve"]
  ca = "$d/ca.crt"
EOF
  log "containerd trusts https://$host (CA $ca)"
}

load_images() {
  local a
  for a in "$@"; do
    [ -f "$a" ] || die "$a not found (make image)"
    ctr_ images import "$a" >/dev/null 2>"$N/ctr.err" ||
      { cat "$N/ctr.err" >&2; die "ctr images import $a failed"; }
    log "loaded $(basename "$a")"
  done
}

start_controllers() {
  launch kube-controller-manager "$NBIN/kube-controller-manager" \
    --kubeconfig="$N/kube-controller-manager.kubeconfig" \
    --authentication-kubeconfig="$N/kube-controller-manager.kubeconfig" \
    --authorization-kubeconfig="$N/kube-controller-manager.kubeconfig" \
    --bind-address=127.0.0.1 --secure-port="$KCM_PORT" --cert-dir="$N/kcm-certs" \
    --leader-elect=false \
    --use-service-account-credentials=true \
    --service-account-private-key-file="$DIR/pki/sa.key" \
    --root-ca-file="$DIR/pki/ca.crt" \
    --cluster-signing-cert-file="$DIR/pki/ca.crt" --cluster-signing-key-file="$DIR/pki/ca.key" \
    --service-cluster-ip-range="$SERVICE_CIDR" \
    --allocate-node-cidrs=false \
    --profiling=false
  launch kube-scheduler "$NBIN/kube-scheduler" \
    --kubeconfig="$N/kube-scheduler.kubeconfig" \
    --authentication-kubeconfig="$N/kube-scheduler.kubeconfig" \
    --authorization-kubeconfig="$N/kube-scheduler.kubeconfig" \
    --bind-address=127.0.0.1 --secure-port="$SCHED_PORT" --cert-dir="$N/scheduler-certs" \
    --leader-elect=false --profiling=false
}

write_kubelet_conf() {
  mkdir -p "$N/kubelet" "$N/pod-logs" "$N/kubelet-plugins"
  # No cluster DNS: pods get this file, whose name server is the node's
  # address, where nothing answers on port 53 (a lookup fails at once, and
  # no query can leave the machine).
  printf 'nameserver %s\noptions ndots:1 timeout:1 attempts:1\n' "$NODE_IP" >"$N/resolv.conf"
  cat >"$N/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# This machine mounts cgroup v1; kubelet 1.35+ refuses it unless told.
failCgroupV1: false
cgroupDriver: cgroupfs
containerRuntimeEndpoint: unix://$RUN/containerd.sock
address: $NODE_IP
port: $KUBELET_PORT
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $KUBELET_HEALTHZ_PORT
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $DIR/pki/ca.crt}
authorization:
  mode: Webhook
clusterDomain: cluster.local
resolvConf: $N/resolv.conf
podLogsDir: $N/pod-logs
volumePluginDir: $N/kubelet-plugins
makeIPTablesUtilChains: false
# Images are loaded by hand (pullPolicy Never) as well as pulled: never
# collect them, and evict nothing because of a machine whose disk is shared
# with other work.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: 100Mi
  nodefs.available: 1Gi
  imagefs.available: 1Gi
  nodefs.inodesFree: 1%
maxPods: 40
serializeImagePulls: false
shutdownGracePeriod: 0s
rotateCertificates: false
registerNode: true
EOF
}

start_kubelet() {
  write_cni_conf
  write_kubelet_conf
  launch kubelet "$NBIN/kubelet" \
    --config="$N/kubelet.yaml" \
    --kubeconfig="$N/kubelet.kubeconfig" \
    --root-dir="$N/kubelet" \
    --cert-dir="$N/kubelet/pki" \
    --hostname-override="$NODE_NAME" \
    --node-ip="$NODE_IP"
}

start_proxy() {
  cat >"$N/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: nftables
clientConnection:
  kubeconfig: $N/kube-proxy.kubeconfig
hostnameOverride: $NODE_NAME
bindAddress: $NODE_IP
healthzBindAddress: 127.0.0.1:$PROXY_HEALTHZ_PORT
metricsBindAddress: 127.0.0.1:$PROXY_METRICS_PORT
nodePortAddresses: ["$NODE_IP/32"]
clusterCIDR: $NODE_POD_CIDR
# Masquerade what goes to a Service: a pod that reaches another pod on the
# same bridge through a Service gets the answer back through the host (no
# br_netfilter sysctl needed).
masqueradeAll: true
# 0 = leave the machine's conntrack sysctls as they are.
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
EOF
  launch kube-proxy "$NBIN/kube-proxy" --config="$N/kube-proxy.yaml"
}

node_ready() {
  [ "$(kc get node "$NODE_NAME" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" = True ]
}

# ---------------------------------------------------------------- subcommands

save_sysctls() {
  [ -f "$RUN/sysctl.saved" ] && return 0
  local s
  for s in "${SYSCTLS[@]}"; do echo "$s $(cat "/proc/sys/$s")"; done >"$RUN/sysctl.saved"
}

claim_machine() {
  mkdir -p "$RUN"
  if [ -f "$RUN/owner" ] && [ "$(cat "$RUN/owner")" != "$DIR" ]; then
    local other
    other=$(cat "$RUN/owner")
    if [ -f "$other/node/kubelet.pid" ] || [ -f "$other/node/containerd.pid" ]; then
      die "a node of $other runs on this machine (hack/node.sh down $other first)"
    fi
  fi
  echo "$DIR" >"$RUN/owner"
  [ -d /var/log/containers ] || touch "$RUN/created-var-log-containers"
}

cmd_up() {
  [ "$(id -u)" -eq 0 ] || die "a node needs root (mounts, network namespaces, cgroups)"
  need ip; need nft; need runc; need openssl; need python3; need setsid
  [ -x /usr/lib/cni/bridge ] && [ -x /usr/lib/cni/host-local ] && [ -x /usr/lib/cni/loopback ] ||
    die "the CNI plugins are missing in /usr/lib/cni (hack/install-deps.sh --node)"
  mkdir -p "$DIR"
  DIR=$(cd "$DIR" && pwd)
  N="$DIR/node"
  if [ -f "$N/node.env" ]; then
    load_node_env
    local all=1 p
    for p in "${PROCS[@]}"; do pid_alive "$p" || all=0; done
    if [ $all = 1 ] && node_ready; then
      log "already running in $DIR"
      echo "$DIR/kubeconfig"
      return 0
    fi
    log "a node of $DIR is partly up: taking it down first"
    cmd_down >/dev/null
    mkdir -p "$DIR"
  fi
  local t0
  t0=$(date +%s)
  NBIN=$(node_bin)
  claim_machine
  save_sysctls
  net_up

  CLUSTER_NODE_IP=$NODE_IP "$here/cluster.sh" up "$DIR" >/dev/null
  load_node_env
  mkdir -p "$N/pki"
  client_cert kubelet "system:node:$NODE_NAME" system:nodes
  client_cert kube-controller-manager system:kube-controller-manager ""
  client_cert kube-scheduler system:kube-scheduler ""
  client_cert kube-proxy system:kube-proxy ""
  KCM_PORT=$(free_port); SCHED_PORT=$(free_port); KUBELET_PORT=$(free_port)
  KUBELET_HEALTHZ_PORT=$(free_port); PROXY_HEALTHZ_PORT=$(free_port); PROXY_METRICS_PORT=$(free_port)
  {
    for v in NBIN KCM_PORT SCHED_PORT KUBELET_PORT KUBELET_HEALTHZ_PORT PROXY_HEALTHZ_PORT PROXY_METRICS_PORT; do
      printf "%s='%s'\n" "$v" "${!v}"
    done
    printf "NODE_NAME='%s'\nNODE_IP='%s'\nNODE_POD_CIDR='%s'\n" "$NODE_NAME" "$NODE_IP" "$NODE_POD_CIDR"
  } >"$N/node.env"

  start_containerd
  local images=()
  if [ -n "${NODE_IMAGES:-}" ]; then
    read -r -a images <<<"$NODE_IMAGES"
  else
    local target=${CARGO_TARGET_DIR:-$repo/target}
    case $target in /*) ;; *) target=$repo/$target ;; esac
    [ -f "$target/oci/pause.oci.tar" ] || "$here/image.sh" pause
    shopt -s nullglob
    images=("$target"/oci/*.oci.tar)
    shopt -u nullglob
  fi
  load_images "${images[@]}"
  # A listing can fail while containerd is busy (one CI run saw the image
  # missing right after its import): look again for a while, then show what
  # containerd holds.
  wait_for "the pause image" 20 pause_loaded || {
    echo "node: ctr images ls:" >&2
    ctr_ images ls >&2 || true
    tail -n 20 "$N/containerd.log" >&2 2>/dev/null || true
    die "the pause image $PAUSE_IMAGE is not loaded (hack/image.sh pause)"
  }

  start_controllers
  start_kubelet
  wait_for "node" "$START_TIMEOUT" node_ready || {
    tail -n 40 "$N/kubelet.log" >&2
    die "node $NODE_NAME not Ready within ${START_TIMEOUT}s (see $N/kubelet.log)"
  }
  start_proxy
  wait_for "kube-proxy" 60 curl -fsS "http://127.0.0.1:$PROXY_HEALTHZ_PORT/healthz" || {
    tail -n 30 "$N/kube-proxy.log" >&2
    die "kube-proxy not healthy (see $N/kube-proxy.log)"
  }
  # Pods of namespace default need its ServiceAccount (the controller makes it).
  wait_for "serviceaccount" 60 kc get serviceaccount default -n default ||
    die "no default ServiceAccount (see $N/kube-controller-manager.log)"
  log "node $NODE_NAME Ready at $NODE_IP in $(($(date +%s) - t0))s (state in $DIR)"
  echo "$DIR/kubeconfig"
}

# Deletes every pod through the API and waits until the kubelet has torn them
# down (containers stopped, volumes unmounted, network namespaces removed).
drain_pods() {
  pid_alive kubelet || return 0
  [ -f "$DIR/kubeconfig" ] || return 0
  kc get --raw /readyz >/dev/null 2>&1 || return 0
  # Nothing may create pods again meanwhile.
  stop_proc kube-controller-manager
  stop_proc kube-scheduler
  kc delete pods --all --all-namespaces --grace-period=1 --wait=false >/dev/null 2>&1 || true
  if ! wait_for "pods" 90 no_pods; then
    log "pods still present after 90s; forcing"
    kc delete pods --all --all-namespaces --grace-period=0 --force >/dev/null 2>&1 || true
  fi
  # The kubelet stops sandboxes (and their network namespaces) after the pods are gone.
  wait_for "sandboxes" 60 no_netns || log "some network namespaces remain; removing them by hand"
}

no_pods() { [ -z "$(kc get pods -A -o name 2>/dev/null)" ]; }
no_netns() { [ -z "$(find "$RUN" -path '*/netns/cni-*' 2>/dev/null)" ]; }

# Stops whatever runs in containerd, then containerd.
stop_runtime() {
  if pid_alive containerd; then
    local t
    for t in $(ctr_ tasks ls -q 2>/dev/null); do
      ctr_ tasks kill -s SIGKILL "$t" >/dev/null 2>&1 || true
    done
    for t in $(ctr_ tasks ls -q 2>/dev/null); do
      ctr_ tasks delete -f "$t" >/dev/null 2>&1 || true
    done
  fi
  stop_proc containerd
  # Shims outlive containerd: end the ones of this node.
  local pid
  for pid in $(pgrep -f "containerd-shim-runc-v2 .*-address $RUN/containerd.sock" || true); do
    kill -KILL "$pid" 2>/dev/null || true
  done
}

unmount_under() { # unmount_under A B: every mount at or below A or B, deepest first
  local m
  for m in $(awk -v a="$1" -v b="$2" '{ p = $5; if (p == a || p == b || index(p, a "/") == 1 || index(p, b "/") == 1) print p }' /proc/self/mountinfo | sort -r); do
    umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || log "could not unmount $m"
  done
}

remove_cgroups() {
  local c d
  for c in /sys/fs/cgroup/*/; do
    [ -d "$c/kubepods" ] || continue
    # Depth first; a cgroup with a process left in it stays (reported).
    while read -r d; do
      rmdir "$d" 2>/dev/null || log "cgroup $d not removed"
    done < <(find "$c/kubepods" -depth -type d)
  done
}

restore_sysctls() {
  [ -f "$RUN/sysctl.saved" ] || return 0
  local s v
  while read -r s v; do
    [ "$(cat "/proc/sys/$s")" = "$v" ] || echo "$v" >"/proc/sys/$s"
  done <"$RUN/sysctl.saved"
}

cmd_down() {
  [ -d "$DIR" ] || return 0
  DIR=$(cd "$DIR" && pwd)
  N="$DIR/node"
  if [ -f "$DIR/cluster.env" ]; then load_node_env; fi
  BIN=${BIN:-} NBIN=${NBIN:-$(node_bin)}
  if [ -d "$N" ]; then
    [ -n "$BIN" ] && drain_pods
    stop_proc kube-proxy
    stop_proc kubelet
    stop_proc kube-scheduler
    stop_proc kube-controller-manager
    stop_runtime
    unmount_under "$N" "$RUN"
    remove_cgroups
    # The API server before its address goes away with the bridge (it says
    # goodbye to itself there on the way out).
    "$here/cluster.sh" down "$DIR"
    # kube-proxy's tables (mode nftables) and ours.
    nft delete table ip kube-proxy 2>/dev/null || true
    nft delete table ip6 kube-proxy 2>/dev/null || true
    nft delete table inet "$NFT_TABLE" 2>/dev/null || true
    ip link del "$NODE_BRIDGE" 2>/dev/null || true
    # The kubelet's legacy log links (into our pod log directory).
    local l
    for l in /var/log/containers/*.log; do
      [ -L "$l" ] && [[ $(readlink "$l") == "$N/"* ]] && rm -f "$l"
    done
    if [ -f "$RUN/created-var-log-containers" ]; then rmdir /var/log/containers 2>/dev/null || true; fi
    # The CNI library's result cache (libcni keeps it in /var/lib/cni).
    rm -f /var/lib/cni/results/webchecker-node-* 2>/dev/null || true
    rmdir /var/lib/cni/results /var/lib/cni 2>/dev/null || true
    restore_sysctls
    rm -rf "$N"
  fi
  if [ -f "$RUN/owner" ] && [ "$(cat "$RUN/owner")" = "$DIR" ]; then rm -rf "$RUN"; fi
  "$here/cluster.sh" down "$DIR"
}

cmd_status() {
  [ -f "$DIR/node/node.env" ] || { echo "no node in $DIR"; return 1; }
  DIR=$(cd "$DIR" && pwd)
  N="$DIR/node"
  load_node_env
  local ok=0 p
  "$here/cluster.sh" status "$DIR" || ok=1
  for p in "${PROCS[@]}"; do
    if pid_alive "$p"; then echo "$p: running (pid $(cat "$N/$p.pid"))"; else echo "$p: not running"; ok=1; fi
  done
  if node_ready; then echo "node $NODE_NAME: Ready ($NODE_IP)"; else echo "node $NODE_NAME: not Ready"; ok=1; fi
  return $ok
}

# ---------------------------------------------------------------- main

[ $# -ge 2 ] || usage
sub=$1 DIR=$2
shift 2
[ -n "$DIR" ] || usage
case "$sub" in
  up) cmd_up ;;
  down) cmd_down ;;
  status) cmd_status ;;
  load)
    DIR=$(cd "$DIR" && pwd); N="$DIR/node"; load_node_env
    load_images "$@" ;;
  ctr)
    DIR=$(cd "$DIR" && pwd); N="$DIR/node"; load_node_env
    ctr_ "$@" ;;
  trust-registry)
    [ $# -eq 2 ] || usage
    DIR=$(cd "$DIR" && pwd); N="$DIR/node"; load_node_env
    trust_registry "$@" ;;
  *) usage ;;
esac
