#!/usr/bin/env bash
# Runs a local Kubernetes control plane (etcd + kube-apiserver, no controllers,
# no scheduler, no kubelet) on loopback ports, with all its state in one
# directory. Used by `make cluster-up`, by the Rust end-to-end tests and by CI.
#
#   hack/cluster.sh up DIR               start (or reuse) a cluster; last stdout line: DIR/kubeconfig
#   hack/cluster.sh down DIR             stop both processes, delete what `up` wrote in DIR (idempotent)
#   hack/cluster.sh status DIR           print the state of both processes; exit 0 only if all is up
#   hack/cluster.sh stop-apiserver DIR   stop kube-apiserver only (simulates an API server outage)
#   hack/cluster.sh start-apiserver DIR  start it again, same port/certs/flags; waits for /readyz
#   hack/cluster.sh restart-etcd DIR     stop and start etcd on the same ports and data
#   hack/cluster.sh compact-etcd DIR     compact etcd at its current revision (see docs/control-plane.md)
#
# Files in DIR: cluster.env (sourceable), kubeconfig, pki/ (ca, serving cert, SA key),
# tokens.csv, etcd/ (data), {etcd,apiserver}.{cmd,pid,log}.
#
# Environment:
#   WEBCHECKER_TOOLS_BIN           directory holding etcd, kube-apiserver, kubectl (default: hack/build-tools.sh)
#   CLUSTER_START_TIMEOUT          seconds to wait for readiness (default 90)
#   CLUSTER_STOP_TIMEOUT           seconds between SIGTERM and SIGKILL (default 20)
#   CLUSTER_APISERVER_EXTRA_ARGS   extra kube-apiserver flags for `up`, split on spaces (e.g. --watch-cache=false)
#   CLUSTER_KEEP_LOGS=1            `down` keeps *.log
#   CLUSTER_NODE_IP                for a real node (hack/node.sh): the API server listens on
#                                  this address instead of 127.0.0.1 (pods reach it through
#                                  the kubernetes Service) and runs as a node expects it:
#                                  ServiceAccount admission on, Node authorization, a client
#                                  certificate to reach the kubelet (docs/node.md)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
START_TIMEOUT=${CLUSTER_START_TIMEOUT:-90}
STOP_TIMEOUT=${CLUSTER_STOP_TIMEOUT:-20}

log() { echo "cluster: $*" >&2; }
die() { echo "cluster: error: $*" >&2; exit 1; }
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

usage() {
  sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//' >&2
  exit 2
}

# ---------------------------------------------------------------- helpers

tools_bin() {
  local bin
  if [ -n "${WEBCHECKER_TOOLS_BIN:-}" ]; then
    bin=$WEBCHECKER_TOOLS_BIN
  else
    # Several test processes may call `up` at once on a machine without the
    # tools: only one of them builds, the others wait for it.
    local lock=${WEBCHECKER_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/webchecker-operator}/build-tools.lock
    mkdir -p "$(dirname "$lock")"
    if command -v flock >/dev/null; then
      bin=$(flock "$lock" "$here/build-tools.sh" | tail -n 1)
    else
      bin=$("$here/build-tools.sh" | tail -n 1)
    fi
  fi
  local t
  for t in etcd kube-apiserver; do
    [ -x "$bin/$t" ] || die "$bin/$t not found or not executable (set WEBCHECKER_TOOLS_BIN or run hack/build-tools.sh)"
  done
  (cd "$bin" && pwd)
}

need() { command -v "$1" >/dev/null || die "$1 is required (hack/install-deps.sh installs it)"; }

# free_ports N [EXCLUDE...]: N distinct TCP ports that can be bound on 127.0.0.1 now.
# They are drawn at random below the kernel's ephemeral range, so outgoing
# connections (which take ephemeral ports) cannot grab them before we bind.
free_ports() {
  python3 - "$@" <<'EOF'
import random, socket, sys
n, exclude = int(sys.argv[1]), {int(p) for p in sys.argv[2:]}
lo, hi = 20000, 32767
try:
    with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
        eph_lo = int(f.read().split()[0])
    if eph_lo > lo + 1000:
        hi = min(hi, eph_lo - 1)
except OSError:
    pass
ports, socks = [], []
for _ in range(1000):
    p = random.randint(lo, hi)
    if p in exclude or p in ports:
        continue
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.bind(("127.0.0.1", p))
    except OSError:
        s.close()
        continue
    socks.append(s)
    ports.append(p)
    if len(ports) == n:
        break
for s in socks:
    s.close()
if len(ports) < n:
    sys.exit("no free ports found")
print(" ".join(map(str, ports)))
EOF
}

# pid_alive DIR NAME: DIR/NAME.pid names a live process that is our etcd or
# kube-apiserver for DIR (its argv is checked, which guards against pid reuse).
pid_alive() {
  local pidfile="$1/$2.pid" marker pid state cmdline
  case $2 in
    etcd) marker="--data-dir=$1/etcd" ;;
    apiserver) marker="--token-auth-file=$1/tokens.csv" ;;
  esac
  [ -s "$pidfile" ] || return 1
  pid=$(cat "$pidfile")
  [ -d "/proc/$pid" ] || return 1
  state=$(awk '{ print $3 }' "/proc/$pid/stat" 2>/dev/null) || return 1
  [ "$state" != Z ] && [ "$state" != X ] || return 1
  cmdline=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null) || return 1
  [[ $cmdline == *"$marker"* ]]
}

# stop_proc DIR NAME: SIGTERM, wait up to STOP_TIMEOUT, then SIGKILL.
stop_proc() {
  local dir=$1 name=$2 pidfile="$1/$2.pid" pid deadline
  if ! pid_alive "$dir" "$name"; then
    rm -f "$pidfile"
    return 0
  fi
  pid=$(cat "$pidfile")
  kill -TERM "$pid" 2>/dev/null || true
  deadline=$(( $(date +%s) + STOP_TIMEOUT ))
  while pid_alive "$dir" "$name"; do
    if [ "$(date +%s)" -ge "$deadline" ]; then
      log "$name (pid $pid) still running after ${STOP_TIMEOUT}s, sending SIGKILL"
      kill -KILL "$pid" 2>/dev/null || true
      sleep 0.2
      break
    fi
    sleep 0.1
  done
  rm -f "$pidfile"
}

# launch DIR NAME: runs the command line recorded in DIR/NAME.cmd in its own
# session, detached from our stdio; its pid goes to DIR/NAME.pid.
launch() {
  local dir=$1 name=$2
  : >>"$dir/$name.log"
  echo "---- $(date -u +%FT%TZ) starting $name" >>"$dir/$name.log"
  # The inner shell writes its own pid, then execs the program: the pid is the
  # program's, whatever setsid did.
  # shellcheck disable=SC2016 # expanded by the inner shell
  setsid bash -c 'echo $$ >"$1"; cmd=$(cat "$2"); eval "exec $cmd"' \
    launch "$dir/$name.pid" "$dir/$name.cmd" </dev/null >>"$dir/$name.log" 2>&1 &
  # Wait (up to 5 s) until the exec happened, or the process is gone.
  local _ pid
  for _ in $(seq 250); do
    pid_alive "$dir" "$name" && return 0
    pid=$(cat "$dir/$name.pid" 2>/dev/null || true)
    if [ -n "$pid" ]; then
      [ -d "/proc/$pid" ] || return 0
      [[ $(awk '{ print $3 }' "/proc/$pid/stat" 2>/dev/null) != [ZX] ]] || return 0
    fi
    sleep 0.02
  done
}

# record DIR NAME ARGS...: writes the shell-quoted command line to DIR/NAME.cmd.
record() {
  local dir=$1 name=$2; shift 2
  { printf '%q ' "$@"; echo; } >"$dir/$name.cmd"
}

load_env() {
  local dir=$1
  [ -f "$dir/cluster.env" ] || die "$dir/cluster.env not found: no cluster was set up in $dir"
  # shellcheck disable=SC1091
  . "$dir/cluster.env"
}

# port_in_use_error DIR NAME: the last start of NAME failed because a port was taken.
port_in_use_error() {
  awk '/^---- .* starting /{hit=0} tolower($0) ~ /address already in use/{hit=1} END{exit !hit}' "$1/$2.log"
}

etcd_healthy() {
  local out
  out=$(curl -fsS --max-time 2 "http://127.0.0.1:$ETCD_PORT/health" 2>/dev/null) || return 1
  [[ $out == *'"health":"true"'* ]]
}

# wait_etcd DIR: 0 when healthy, 1 when the process died, 2 on timeout.
wait_etcd() {
  local dir=$1 deadline=$(( $(date +%s) + START_TIMEOUT ))
  while :; do
    etcd_healthy && return 0
    pid_alive "$dir" etcd || return 1
    [ "$(date +%s)" -lt "$deadline" ] || return 2
    sleep 0.2
  done
}

api() { # api PATH [curl args...]
  local path=$1; shift
  curl -sS --max-time 5 --cacert "$CLUSTER_DIR/pki/ca.crt" -H "Authorization: Bearer $TOKEN" \
    "https://${APISERVER_HOST:-127.0.0.1}:$APISERVER_PORT$path" "$@"
}

apiserver_ready() {
  [ "$(api /readyz 2>/dev/null)" = ok ]
}

# wait_apiserver DIR [namespace]: 0 ready, 1 process died, 2 timeout.
wait_apiserver() {
  local dir=$1 want_ns=${2:-} deadline=$(( $(date +%s) + START_TIMEOUT ))
  while :; do
    if apiserver_ready; then
      if [ -z "$want_ns" ] || [ "$(api /api/v1/namespaces/default -o /dev/null -w '%{http_code}' 2>/dev/null)" = 200 ]; then
        return 0
      fi
    fi
    pid_alive "$dir" apiserver || return 1
    [ "$(date +%s)" -lt "$deadline" ] || return 2
    sleep 0.2
  done
}

write_etcd_cmd() {
  local dir=$1
  record "$dir" etcd "$BIN/etcd" \
    --name=webchecker \
    --data-dir="$dir/etcd" \
    --listen-client-urls="http://127.0.0.1:$ETCD_PORT" \
    --advertise-client-urls="http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls="http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-advertise-peer-urls="http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster="webchecker=http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster-state=new \
    --unsafe-no-fsync=true \
    --quota-backend-bytes=$((2 * 1024 * 1024 * 1024))
}

write_apiserver_cmd() {
  local dir=$1 extra=() mode=()
  # shellcheck disable=SC2206
  [ -z "${CLUSTER_APISERVER_EXTRA_ARGS:-}" ] || extra=($CLUSTER_APISERVER_EXTRA_ARGS)
  if [ -n "${NODE_IP:-}" ]; then
    # A node's pods need their ServiceAccount tokens mounted (admission plugin
    # ServiceAccount), the kubelet may touch only its own Node and pods (Node
    # authorizer), `kubectl logs/exec` go to the kubelet with a client
    # certificate at the node's address (not its name: no DNS here), and the
    # kubernetes Service's endpoint is this address (the default lease reconciler).
    mode=(--authorization-mode=Node,RBAC
      --kubelet-preferred-address-types=InternalIP
      --kubelet-client-certificate="$dir/pki/apiserver-kubelet-client.crt"
      --kubelet-client-key="$dir/pki/apiserver-kubelet-client.key")
  else
    # No kubelet: nothing would create the default ServiceAccounts, and the
    # kubernetes Service would name a loopback address.
    mode=(--authorization-mode=RBAC --disable-admission-plugins=ServiceAccount --endpoint-reconciler-type=none)
  fi
  # Open watches hold a stopping kube-apiserver until its request timeout
  # (stop-apiserver waited its 20 s and killed it, every outage 20 s longer
  # than asked); with a grace period it closes them and stops in seconds.
  record "$dir" apiserver "$BIN/kube-apiserver" \
    --etcd-servers="http://127.0.0.1:$ETCD_PORT" \
    --bind-address="$APISERVER_HOST" \
    --advertise-address="$APISERVER_HOST" \
    --secure-port="$APISERVER_PORT" \
    --cert-dir="$dir/pki" \
    --tls-cert-file="$dir/pki/apiserver.crt" \
    --tls-private-key-file="$dir/pki/apiserver.key" \
    --client-ca-file="$dir/pki/ca.crt" \
    --token-auth-file="$dir/tokens.csv" \
    "${mode[@]}" \
    --service-account-issuer="https://$APISERVER_HOST:$APISERVER_PORT" \
    --service-account-key-file="$dir/pki/sa.pub" \
    --service-account-signing-key-file="$dir/pki/sa.key" \
    --service-cluster-ip-range=10.0.0.0/24 \
    --allow-privileged=true \
    --profiling=false \
    --shutdown-watch-termination-grace-period=2s \
    ${extra[@]+"${extra[@]}"}
}

gen_pki() {
  local dir=$1 pki="$1/pki"
  mkdir -p "$pki"
  chmod 700 "$pki"
  openssl req -x509 -newkey rsa:2048 -nodes -sha256 -days 3650 \
    -keyout "$pki/ca.key" -out "$pki/ca.crt" -subj "/CN=webchecker-local-ca" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
  openssl req -newkey rsa:2048 -nodes -sha256 -keyout "$pki/apiserver.key" -out "$pki/apiserver.csr" \
    -subj "/CN=kube-apiserver" 2>/dev/null
  cat >"$pki/apiserver.ext" <<EOF
basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth
subjectAltName=DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,IP:127.0.0.1,IP:10.0.0.1${NODE_IP:+,IP:$NODE_IP}
EOF
  openssl x509 -req -sha256 -days 3650 -in "$pki/apiserver.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" \
    -CAcreateserial -extfile "$pki/apiserver.ext" -out "$pki/apiserver.crt" 2>/dev/null
  openssl genrsa -out "$pki/sa.key" 2048 2>/dev/null
  openssl rsa -in "$pki/sa.key" -pubout -out "$pki/sa.pub" 2>/dev/null
  if [ -n "${NODE_IP:-}" ]; then
    # The API server's client identity towards the kubelet (system:masters: the
    # kubelet's webhook authorizer asks the API server, which allows it all).
    openssl req -newkey rsa:2048 -nodes -sha256 -keyout "$pki/apiserver-kubelet-client.key" \
      -out "$pki/apiserver-kubelet-client.csr" -subj "/O=system:masters/CN=kube-apiserver-kubelet-client" 2>/dev/null
    printf 'basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth\n' \
      >"$pki/client.ext"
    openssl x509 -req -sha256 -days 3650 -in "$pki/apiserver-kubelet-client.csr" -CA "$pki/ca.crt" \
      -CAkey "$pki/ca.key" -CAcreateserial -extfile "$pki/client.ext" -out "$pki/apiserver-kubelet-client.crt" 2>/dev/null
    rm -f "$pki/apiserver-kubelet-client.csr" "$pki/client.ext"
  fi
  rm -f "$pki/apiserver.csr" "$pki/apiserver.ext" "$pki/ca.srl"
}

write_kubeconfig() {
  local dir=$1 ca
  ca=$(base64 -w0 <"$dir/pki/ca.crt")
  umask 077
  cat >"$dir/kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: webchecker-local
  cluster:
    server: https://$APISERVER_HOST:$APISERVER_PORT
    certificate-authority-data: $ca
users:
- name: admin
  user:
    token: $TOKEN
contexts:
- name: webchecker-local
  context:
    cluster: webchecker-local
    user: admin
    namespace: default
current-context: webchecker-local
EOF
}

# Values are single-quoted, so both sh and simple KEY=VALUE readers take them.
write_env() {
  local dir=$1
  q() { printf "%s='%s'\n" "$1" "${2//\'/\'\\\'\'}"; }
  {
    echo "# written by hack/cluster.sh up; sourceable by sh/bash"
    q CLUSTER_DIR "$dir"
    q BIN "$BIN"
    q ETCD_PORT "$ETCD_PORT"
    q ETCD_PEER_PORT "$ETCD_PEER_PORT"
    q ETCD_URL "http://127.0.0.1:$ETCD_PORT"
    q APISERVER_HOST "$APISERVER_HOST"
    q APISERVER_PORT "$APISERVER_PORT"
    q APISERVER_URL "https://$APISERVER_HOST:$APISERVER_PORT"
    q NODE_IP "${NODE_IP:-}"
    q CA_FILE "$dir/pki/ca.crt"
    q TOKEN "$TOKEN"
    q KUBECONFIG "$dir/kubeconfig"
  } >"$dir/cluster.env"
  chmod 600 "$dir/cluster.env"
}

# ---------------------------------------------------------------- subcommands

start_etcd() { # start_etcd DIR: 0 ok, 1 died, 2 timeout
  local dir=$1 rc=0
  launch "$dir" etcd
  wait_etcd "$dir" || rc=$?
  return $rc
}

start_apiserver() { # start_apiserver DIR [want-ns]: 0 ok, 1 died, 2 timeout
  local dir=$1 rc=0
  launch "$dir" apiserver
  wait_apiserver "$dir" "${2:-}" || rc=$?
  return $rc
}

cmd_up() {
  local dir=$1 t0 t1 rc attempt
  need python3; need openssl; need curl; need setsid
  mkdir -p "$dir"
  dir=$(cd "$dir" && pwd)
  if [ -f "$dir/cluster.env" ]; then
    load_env "$dir"
    if pid_alive "$dir" etcd && pid_alive "$dir" apiserver && apiserver_ready; then
      log "already running in $dir (apiserver https://${APISERVER_HOST:-127.0.0.1}:$APISERVER_PORT)"
      echo "$dir/kubeconfig"
      return 0
    fi
  fi
  if [ -e "$dir/cluster.env" ] || [ -e "$dir/etcd.pid" ] || [ -e "$dir/apiserver.pid" ] || [ -e "$dir/etcd" ]; then
    log "stale state in $dir, cleaning it up (logs kept)"
    CLUSTER_KEEP_LOGS=1 cmd_down "$dir"
    mkdir -p "$dir"
  fi
  t0=$(now)
  BIN=$(tools_bin)
  CLUSTER_DIR=$dir
  NODE_IP=${CLUSTER_NODE_IP:-}
  APISERVER_HOST=${NODE_IP:-127.0.0.1}
  TOKEN=$(openssl rand -hex 24)
  gen_pki "$dir"
  umask 077
  printf '%s,admin,admin,"system:masters"\n' "$TOKEN" >"$dir/tokens.csv"
  umask 022

  # etcd: retry with other ports if one was taken between picking and binding.
  for attempt in 1 2 3 4 5; do
    read -r ETCD_PORT ETCD_PEER_PORT < <(free_ports 2) || die "could not pick free ports"
    write_etcd_cmd "$dir"
    t1=$(now)
    rc=0; start_etcd "$dir" || rc=$?
    [ $rc -eq 0 ] && break
    stop_proc "$dir" etcd
    if [ $rc -eq 1 ] && port_in_use_error "$dir" etcd && [ $attempt -lt 5 ]; then
      log "etcd port clash, retrying with other ports"; rm -rf "$dir/etcd"; continue
    fi
    tail -n 30 "$dir/etcd.log" >&2
    die "etcd did not become healthy (see $dir/etcd.log)"
  done
  log "etcd up on 127.0.0.1:$ETCD_PORT in $(elapsed "$t1")s"

  for attempt in 1 2 3 4 5; do
    read -r APISERVER_PORT < <(free_ports 1 "$ETCD_PORT" "$ETCD_PEER_PORT") || die "could not pick a free port"
    write_apiserver_cmd "$dir"
    write_env "$dir"   # the readiness probe reads TOKEN/APISERVER_PORT
    t1=$(now)
    rc=0; start_apiserver "$dir" want-ns || rc=$?
    [ $rc -eq 0 ] && break
    stop_proc "$dir" apiserver
    if [ $rc -eq 1 ] && port_in_use_error "$dir" apiserver && [ $attempt -lt 5 ]; then
      log "apiserver port clash, retrying with another port"; continue
    fi
    tail -n 40 "$dir/apiserver.log" >&2
    stop_proc "$dir" etcd
    die "kube-apiserver did not become ready within ${START_TIMEOUT}s (see $dir/apiserver.log)"
  done
  log "kube-apiserver ready on https://$APISERVER_HOST:$APISERVER_PORT in $(elapsed "$t1")s (total $(elapsed "$t0")s)"
  write_kubeconfig "$dir"
  write_env "$dir"
  echo "$dir/kubeconfig"
}

cmd_down() {
  local dir=$1
  [ -d "$dir" ] || return 0
  dir=$(cd "$dir" && pwd)
  stop_proc "$dir" apiserver
  stop_proc "$dir" etcd
  rm -rf "$dir/etcd" "$dir/pki"
  rm -f "$dir"/{cluster.env,kubeconfig,tokens.csv,etcd.cmd,apiserver.cmd,etcd.pid,apiserver.pid}
  [ "${CLUSTER_KEEP_LOGS:-}" = 1 ] || rm -f "$dir"/{etcd.log,apiserver.log}
  rmdir "$dir" 2>/dev/null || true
}

cmd_status() {
  local dir=$1 ok=0
  if [ ! -f "$dir/cluster.env" ]; then echo "no cluster in $dir"; return 1; fi
  dir=$(cd "$dir" && pwd)
  load_env "$dir"
  if pid_alive "$dir" etcd && etcd_healthy; then
    echo "etcd: running (pid $(cat "$dir/etcd.pid"), http://127.0.0.1:$ETCD_PORT)"
  else
    echo "etcd: not running"; ok=1
  fi
  if pid_alive "$dir" apiserver; then
    if apiserver_ready; then
      echo "kube-apiserver: running and ready (pid $(cat "$dir/apiserver.pid"), https://${APISERVER_HOST:-127.0.0.1}:$APISERVER_PORT)"
    else
      echo "kube-apiserver: running, not ready (pid $(cat "$dir/apiserver.pid"), https://${APISERVER_HOST:-127.0.0.1}:$APISERVER_PORT)"; ok=1
    fi
  else
    echo "kube-apiserver: not running"; ok=1
  fi
  echo "kubeconfig: $dir/kubeconfig"
  return $ok
}

cmd_stop_apiserver() {
  local dir=$1
  dir=$(cd "$dir" && pwd)
  load_env "$dir"
  stop_proc "$dir" apiserver
  log "kube-apiserver stopped"
}

cmd_start_apiserver() {
  local dir=$1 t0 rc=0
  dir=$(cd "$dir" && pwd)
  load_env "$dir"
  [ -f "$dir/apiserver.cmd" ] || die "$dir/apiserver.cmd not found"
  if pid_alive "$dir" apiserver; then
    log "kube-apiserver already running"
  else
    t0=$(now)
    launch "$dir" apiserver
  fi
  wait_apiserver "$dir" || rc=$?
  if [ $rc -ne 0 ]; then
    tail -n 40 "$dir/apiserver.log" >&2
    die "kube-apiserver did not become ready (see $dir/apiserver.log)"
  fi
  [ -z "${t0:-}" ] || log "kube-apiserver ready in $(elapsed "$t0")s"
}

cmd_restart_etcd() {
  local dir=$1 t0 rc=0
  dir=$(cd "$dir" && pwd)
  load_env "$dir"
  [ -f "$dir/etcd.cmd" ] || die "$dir/etcd.cmd not found"
  stop_proc "$dir" etcd
  t0=$(now)
  start_etcd "$dir" || rc=$?
  if [ $rc -ne 0 ]; then
    tail -n 30 "$dir/etcd.log" >&2
    die "etcd did not become healthy (see $dir/etcd.log)"
  fi
  log "etcd restarted in $(elapsed "$t0")s"
}

# etcd's gRPC gateway (JSON over HTTP on the client port) speaks base64 keys
# and int64-as-string numbers.
etcd_post() { # etcd_post PATH JSON
  curl -fsS --max-time 10 -X POST "http://127.0.0.1:$ETCD_PORT$1" -H 'Content-Type: application/json' -d "$2"
}

cmd_compact_etcd() {
  local dir=$1 key resp rev ver crev attempt
  dir=$(cd "$dir" && pwd)
  load_env "$dir"
  etcd_healthy || die "etcd is not running"
  # Like kube-apiserver's own compactor (k8s.io/apiserver/pkg/storage/etcd3/compact.go):
  # store the revision in compact_rev_key (a CAS on the key's version), then
  # compact. kube-apiserver watches that key to learn the compacted revision.
  key=$(printf compact_rev_key | base64 -w0)
  for attempt in 1 2 3 4 5; do
    resp=$(etcd_post /v3/kv/range "{\"key\":\"$key\"}")
    read -r rev ver < <(python3 -c '
import json, sys
r = json.load(sys.stdin)
kvs = r.get("kvs") or []
print(r["header"]["revision"], kvs[0].get("version", "0") if kvs else "0")' <<<"$resp")
    resp=$(etcd_post /v3/kv/txn "{\"compare\":[{\"target\":\"VERSION\",\"result\":\"EQUAL\",\"key\":\"$key\",\"version\":\"$ver\"}],\"success\":[{\"requestPut\":{\"key\":\"$key\",\"value\":\"$(printf %s "$rev" | base64 -w0)\"}}]}")
    # Compact at the revision of that put (now the current one): it touches no
    # object, so no watch event sits at the compacted revision with a lost prevKV.
    crev=$(python3 -c 'import json,sys; r=json.load(sys.stdin); print(r["header"]["revision"] if r.get("succeeded") else "")' <<<"$resp")
    [ -z "$crev" ] || break
    [ $attempt -lt 5 ] || die "could not update compact_rev_key (concurrent compactions?)"
  done
  etcd_post /v3/kv/compaction "{\"revision\":\"$crev\",\"physical\":true}" >/dev/null
  log "etcd compacted at revision $crev"
  echo "$crev"
}

# ---------------------------------------------------------------- main

[ $# -eq 2 ] || usage
sub=$1 dir=$2
[ -n "$dir" ] || usage
case "$sub" in
  up) cmd_up "$dir" ;;
  down) cmd_down "$dir" ;;
  status) cmd_status "$dir" ;;
  stop-apiserver) cmd_stop_apiserver "$dir" ;;
  start-apiserver) cmd_start_apiserver "$dir" ;;
  restart-etcd) cmd_restart_etcd "$dir" ;;
  compact-etcd) cmd_compact_etcd "$dir" ;;
  *) usage ;;
esac
