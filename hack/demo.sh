#!/usr/bin/env bash
# `make demo`: a local control plane, the CRD, three operator replicas, demo
# targets, sample checkers and the seed's two manifests unchanged; then shows
# `kubectl get wc` while the states settle. `make demo-down` stops it all.
set -euo pipefail
cd "$(dirname "$0")/.."
state=.local/demo
mkdir -p "$state"

stop() {
  for f in "$state"/*.pid; do
    [ -f "$f" ] || continue
    kill "$(cat "$f")" 2>/dev/null || true
    rm -f "$f"
  done
}
if [ "${1:-}" = down ]; then
  stop
  make -s cluster-down
  echo "demo stopped"
  exit 0
fi
stop

echo "==> building the operator (release)"
cargo build --release --locked --bin webchecker-operator
echo "==> starting the local control plane (first run builds kube-apiserver, etcd, kubectl, helm: many minutes)"
make -s cluster-up >/dev/null
export KUBECONFIG=$PWD/.local/kubeconfig PATH=$PWD/.local/bin:$PATH
kubectl apply --server-side --force-conflicts -f crds/ >/dev/null
# kubectl wait fails at once, instead of waiting, on a CRD the API server has
# given no condition yet (kubernetes#66439): asked again for up to 60 s.
for _ in $(seq 60); do
  kubectl wait --for=condition=Established --timeout=60s crd/webcheckers.test.network.io >/dev/null 2>&1 && break
  sleep 1
done
kubectl wait --for=condition=Established --timeout=1s crd/webcheckers.test.network.io >/dev/null
for ns in webchecker-system demo; do kubectl create namespace "$ns" --dry-run=client -o yaml | kubectl apply -f - >/dev/null; done
# What the chart makes for the replicas: their ServiceAccount (their asks to
# each other carry its tokens) and, as a kubelet would, a Pod object per
# replica process, which those tokens are bound to (a scheduling gate keeps
# it from ever being scheduled: the process plays its container).
kubectl -n webchecker-system create serviceaccount webchecker-operator --dry-run=client -o yaml | kubectl apply -f - >/dev/null
pod_uid() {
  kubectl apply -f - >/dev/null <<EOP
apiVersion: v1
kind: Pod
metadata: {name: $1, namespace: webchecker-system}
spec:
  serviceAccountName: webchecker-operator
  automountServiceAccountToken: false
  schedulingGates: [{name: webchecker.test.network.io/process}]
  containers: [{name: operator, image: webchecker-operator:process}]
EOP
  kubectl -n webchecker-system get pod "$1" -o jsonpath='{.metadata.uid}'
}

echo "==> demo targets on 127.0.0.1:18080-18082"
nohup python3 hack/demo-targets.py >"$state/targets.log" 2>&1 &
echo $! >"$state/targets.pid"
for _ in $(seq 50); do
  grep -q "demo targets on" "$state/targets.log" 2>/dev/null && break
  kill -0 "$(cat "$state/targets.pid")" 2>/dev/null || { cat "$state/targets.log" >&2; echo "demo targets failed to start (ports 18080-18082 in use?)" >&2; exit 1; }
  sleep 0.1
done

echo "==> three operator replicas (metrics on 127.0.0.1:9090-9092, asks on 9190-9192, logs in $state/)"
for i in 0 1 2; do
  uid=$(pod_uid "webchecker-operator-$i")
  # The demo targets listen on loopback, which the operator denies by default
  # (docs/security.md); the API server stays denied.
  POD_NAME=webchecker-operator-$i POD_NAMESPACE=webchecker-system POD_UID=$uid WEBCHECKER_ALLOW_LOOPBACK=true \
    nohup target/release/webchecker-operator --listen "127.0.0.1:909$i" --confirm-listen "127.0.0.1:919$i" \
    >"$state/operator-$i.log" 2>&1 &
  echo $! >"$state/operator-$i.pid"
done

echo "==> sample checkers (examples/demo.yaml) and the seed's manifests (examples/seed/), unchanged"
kubectl apply -n demo -f examples/demo.yaml -f examples/seed/ >/dev/null

end=$((SECONDS + ${DEMO_SECONDS:-25}))
while [ $SECONDS -lt $end ]; do
  clear 2>/dev/null || true
  echo "kubectl get wc -n demo   (refreshing for ${DEMO_SECONDS:-25}s)"
  echo
  kubectl get wc -n demo
  echo
  kubectl get lease -n webchecker-system
  sleep 2
done

cat <<EOM

The operator keeps running. Look further with:
  export KUBECONFIG=$PWD/.local/kubeconfig PATH=$PWD/.local/bin:\$PATH
  kubectl get wc -n demo -w                          # watch the states
  kubectl get wc -n demo -L webchecker.test.network.io/owner
  kubectl describe wc -n demo failing                # condition, events
  kubectl get webcheckers.test.network.io badnews -n demo -o yaml
  kubectl wait --for=condition=Ready wc/healthy -n demo
  curl -s 127.0.0.1:9090/metrics | grep ^webchecker_   # metrics of replica 0
  kill \$(cat $state/operator-0.pid)                  # stop a replica: its checkers move
Stop everything with: make demo-down
EOM
