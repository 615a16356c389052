#!/usr/bin/env bash
# Every test, each test binary under a deadline, all of them run even when one
# fails (`make test`, .ci/run). Prints one line per binary, a table of their
# times and a summary.
#
# The binaries run in two lanes at once, each one binary at a time:
#   alone  - timing-sensitive (probe gaps, failover bounds, lateness): at the
#            normal priority, so nothing beside them takes a core they want;
#   beside - the rest, at a low CPU and I/O priority (nice 10: when both
#            lanes want the cores, this one gets about a tenth): first the
#            pure ones (no control plane, no Go tool, no timing; the fast
#            lane: each verdict printed as it comes, before the images are
#            built), then the
#            end-to-end ones whose deadlines do not depend on how fast the
#            machine is, in the order the background build makes their
#            tools.
# A binary of tests/ that no group names runs alone (the safe default), and
# the run says so: a new test file is classified here.
#
# One compile of the dependency graph serves lint, tests and images: the
# images the tests load (tests/image.rs, tests/node/main.rs) hold the test build's
# binaries (IMAGE_PROFILE=dev); `make image` builds the release ones. The
# build comes in two parts: first the alone lane's binaries (the suite's
# critical path starts when they and the control plane exist), then, beside
# that lane at a low priority, every other target (its lint included) before
# the other lane's first binary. The control plane's Go binaries build in the
# background from the start; the other Go tools once the first part is built,
# and are waited for only by the binaries that need them.
#
# Environment: TEST_TIMEOUT_MINUTES (per binary, default 25), CHAOS_MINUTES
# (the campaign's length: "deck", every fault kind once, by default; or
# minutes, and its binary gets twice that plus 10 minutes), CHAOS_SEED (the
# campaign's schedule; pinned here, random in `make chaos`), TEST_ONLY
# (space-separated binary names, e.g. "ha lib": run just those).
set -uo pipefail
cd "$(dirname "$0")/.."
. hack/versions.env

per_binary=${TEST_TIMEOUT_MINUTES:-25}
chaos_minutes=${CHAOS_MINUTES:-deck}
export CHAOS_MINUTES=$chaos_minutes
export IMAGE_PROFILE=dev
# The suite replays one pinned schedule (a regression test that fails only when
# behaviour changes); `make chaos` draws a new seed each run to explore.
export CHAOS_SEED=${CHAOS_SEED:-874556080}

# No incremental state: a full run builds each crate once, and the incremental
# caches of ~30 test binaries would double the target directory.
export CARGO_INCREMENTAL=0

PURE=(lib api-lib core-lib plan-lib probe-lib bins bench-bench generated properties ring_chains chart_test_hook overload)
# After the pure ones, the end-to-end ones that need only the control plane;
# then those that need the probe peers or Prometheus 3 (protocols,
# chart_alerts and metric_labels need no control plane but those tools; kit
# those tools and, in kit/tests/, a control plane of its own; the tools are
# built in the background after the control plane's: placed here they find
# them built rather than hold the lane up; examples needs the peers, the
# Gateway API CRDs and flux-health, built after Prometheus 3, and waits for
# first verdicts and one target change, each bounded by the checker's
# interval plus room); self_service_rbac and node run
# the node's binaries: last, so that the background build has the most time.
BESIDE=(image chart egress spec_limits tenancy slo diagnosis kit protocols chart_alerts
  metric_labels observability examples alerts_fire self_service_rbac node)
# The least sensitive first, while the other lane still runs (reliability's
# bounds are generous; probe's are per request, with hundreds of ms to
# spare); the tightest once it is done.
ALONE=(reliability probe ha isolation confirmation failover chaos foundation tenancy_dns)
# Alone binaries that mostly wait (each keeps the machine under a fifth busy)
# run one after the other beside the chaos campaign, which mostly waits too,
# at the normal priority: a slot of their own rather than the alone lane's
# tail. Without chaos in the run they run in the alone lane as listed.
WITH_CHAOS=(foundation tenancy_dns)

known=" ${PURE[*]} ${BESIDE[*]} ${ALONE[*]} "
# Cargo's test binaries: tests/<name>.rs and tests/<name>/main.rs.
binaries() {
  local f
  for f in tests/*.rs tests/*/main.rs; do
    case $f in */main.rs) basename "$(dirname "$f")" ;; *) basename "$f" .rs ;; esac
  done
}
for b in $(binaries); do
  case $known in
    *" $b "*) ;;
    *)
      echo "test.sh: test binary $b is in no group of hack/test.sh: it runs alone"
      ALONE+=("$b")
      ;;
  esac
done
for b in ${PURE[@]} ${BESIDE[@]} ${ALONE[@]}; do
  case $b in lib | api-lib | core-lib | plan-lib | probe-lib | bins | kit | bench-bench) continue ;; esac
  [ -f "tests/$b.rs" ] || [ -f "tests/$b/main.rs" ] ||
    { echo "test.sh: hack/test.sh names test binary $b, which does not exist" >&2; exit 1; }
done

if [ -n "${TEST_ONLY:-}" ]; then
  keep() { local b; for b in "$@"; do case " $TEST_ONLY " in *" $b "*) echo "$b" ;; esac; done; }
  mapfile -t PURE < <(keep "${PURE[@]}")
  mapfile -t BESIDE < <(keep "${BESIDE[@]}")
  mapfile -t ALONE < <(keep "${ALONE[@]}")
fi

logs=target/test-logs
rm -rf "$logs"
mkdir -p "$logs"

# Lint and build in one compile of the dependency graph: clippy's driver
# wraps rustc for the workspace's own crates only (as `cargo clippy` does,
# with the same way of passing -D warnings), so building the tests lints
# them, and the dependencies are compiled once, for the tests. The toolchain
# is the one rust-toolchain.toml pins; `make lint` is the same lint alone.
# The Go tools build in the background from now on, at a lower priority than
# the Rust build (they take the cores it leaves idle): first the control
# plane's (hack/build-tools.sh, under the lock hack/cluster.sh takes); once
# the alone lane's binaries are built, the probe peers (hack/build-probe-peers.sh: grpc-go's health server,
# grpc-health-probe, blackbox_exporter; the kit waits on its lock), the
# Gateway API CRDs (hack/fetch-gateway-api.sh), the Prometheus Operator's
# CRDs (hack/fetch-prometheus-operator-crds.sh), cert-manager's
# (hack/fetch-cert-manager-crds.sh), Prometheus 3
# (hack/build-prometheus.sh: prometheus and promtool, beside Debian's 2.42; the
# tests wait on its lock), Flux's health evaluators (hack/build-flux-health.sh,
# for tests/examples/main.rs), then the node's (only when a binary that needs them
# runs).
tools_log=$logs/tools.log
tools_lock=${WEBCHECKER_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/webchecker-operator}/build-tools.lock
mkdir -p "$(dirname "$tools_lock")"
node_tools=
printf '%s\n' "${BESIDE[@]}" "${ALONE[@]}" | grep -qxE 'node|self_service_rbac' && node_tools=1
# Held while the alone lane's binaries build: the Go tools after the control
# plane's wait for it, so that the critical path has the cores.
first_build_lock=$logs/first-build.lock
exec 8>"$first_build_lock"
flock 8
(
  exec 8>&-
  nice -n 10 flock "$tools_lock" hack/build-tools.sh &&
    flock "$first_build_lock" true &&
    nice -n 10 hack/build-probe-peers.sh >/dev/null &&
    hack/fetch-gateway-api.sh >/dev/null &&
    hack/fetch-prometheus-operator-crds.sh >/dev/null &&
    hack/fetch-cert-manager-crds.sh >/dev/null &&
    nice -n 10 hack/build-prometheus.sh >/dev/null &&
    nice -n 10 hack/build-flux-health.sh >/dev/null &&
    if [ -n "$node_tools" ]; then nice -n 19 hack/build-node-tools.sh node; fi
  rc=$?
  date +%s >"$logs/tools.end"
  exit $rc
) >"$tools_log" 2>&1 &
tools_pid=$!
tools_start=$(date +%s)
tools_took=
# wait_for_control_plane_tools: returns once the background build has them
# (hack/build-tools.sh returns at once when they are built, else waits for
# the lock); exits when they cannot be built.
wait_for_control_plane_tools() {
  flock "$tools_lock" hack/build-tools.sh >/dev/null 2>>"$tools_log" || {
    cat "$tools_log"
    echo "test.sh: the control plane's tools did not build (hack/build-tools.sh)" >&2
    exit 1
  }
}
# wait_for_node_tools: the background build's end (once); exits when it failed.
wait_for_node_tools() {
  [ -n "$tools_took" ] && return 0
  wait "$tools_pid"
  local rc=$?
  tools_took=$(( $(cat "$logs/tools.end" 2>/dev/null || date +%s) - tools_start ))
  if [ $rc -ne 0 ]; then
    cat "$tools_log"
    echo "test.sh: the Go tools did not build (hack/build-tools.sh, hack/build-probe-peers.sh, hack/build-prometheus.sh, hack/build-flux-health.sh, hack/build-node-tools.sh node)" >&2
    exit 1
  fi
}

build_start=$(date +%s)
cargo fmt --all -- --check || { echo "test.sh: cargo fmt --all would change files" >&2; exit 1; }
python3 hack/check-structure.py || exit 1
clippy_driver=$(rustup which clippy-driver 2>/dev/null || command -v clippy-driver) \
  || { echo "test.sh: clippy-driver not found (rustup component add clippy)" >&2; exit 1; }
export RUSTC_WORKSPACE_WRAPPER=$clippy_driver
export CLIPPY_ARGS="-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__"
# The tests run their executables directly (not through cargo), so the
# second part of the build never holds them up on cargo's lock of target/.
# test_build NICE OUT ARGS...: the test build of ARGS at that priority,
# linted; its executables in OUT.
test_build() {
  local prio=$1 out=$2 status
  shift 2
  nice -n "$prio" cargo test --locked --no-run --message-format=json-diagnostic-rendered-ansi "$@" |
    python3 hack/test-executables.py "$out"
  status=("${PIPESTATUS[@]}")
  [ "${status[0]}" -eq 0 ] && [ "${status[1]}" -eq 0 ]
}
alone_targets=()
for b in "${ALONE[@]}"; do alone_targets+=(--test "$b"); done
executables=$logs/executables.alone
: >"$executables"
if [ ${#ALONE[@]} -gt 0 ]; then
  test_build 0 "$executables" --workspace "${alone_targets[@]}" || exit 1
fi
first_build_took=$(( $(date +%s) - build_start ))
flock -u 8
exec 8>&-

results=$logs/results
: >"$results"
# cpu_jiffies: "busy total" of the whole machine, from /proc/stat.
cpu_jiffies() {
  local _c u n s i w q sq st
  read -r _c u n s i w q sq st _ </proc/stat
  echo "$((u + n + s + q + sq + st)) $((u + n + s + i + w + q + sq + st))"
}

# run_one NAME NICE: the binary under its deadline at that priority, its
# output in $logs/NAME.log; appends "NAME rc seconds machine-cpu%" to
# $results (the share of both cores busy while it ran, the other lane's work
# included).
run_one() {
  local b=$1 prio=$2 minutes=$per_binary start rc st took busy0 total0 busy1 total1
  if [ "$b" = chaos ]; then
    case $chaos_minutes in
      deck) minutes=20 ;;
      *) minutes=$(( ${chaos_minutes%.*} * 2 + 10 )) ;;
    esac
  fi
  start=$(date +%s)
  read -r busy0 total0 < <(cpu_jiffies)
  # `timeout` kills the test's process group; the kit's reapers have groups
  # of their own and take its control planes down (kit/src/lib.rs). Each
  # executable runs in its package's directory, as cargo runs it.
  : >"$logs/$b.log"
  rc=0
  while read -r _ dir exe; do
    (cd "$dir" && nice -n "$prio" ionice -c 2 -n $((prio > 0 ? 7 : 4)) \
      timeout --kill-after=30s "${minutes}m" "$exe" --test-threads=1) 2>&1 |
      perl hack/test-times.pl >>"$logs/$b.log"
    st=${PIPESTATUS[0]}
    [ "$st" -eq 0 ] || rc=$st
  done < <(awk -v b="$b" '$1==b' "$executables")
  grep -q "^$b " "$executables" || { echo "test.sh: no executable of $b was built" >>"$logs/$b.log"; rc=1; }
  took=$(( $(date +%s) - start ))
  read -r busy1 total1 < <(cpu_jiffies)
  [ $rc -eq 124 ] && echo "test.sh: TIMEOUT $b after ${minutes} minutes" >>"$logs/$b.log"
  echo "$b $rc $took $(( (busy1 - busy0) * 100 / (total1 - total0 + 1) ))" >>"$results"
}

# report NAME: the binary's verdict; its whole output when it failed, else
# the test runner's closing lines.
report() {
  local b=$1 rc took
  read -r _ rc took _ < <(grep "^$b " "$results" | tail -n 1)
  if [ "$rc" -eq 0 ]; then
    grep -E "^test result:|^running [0-9]+ tests?$" "$logs/$b.log" | grep -v "^running" || true
    echo "test.sh: ok     $b (${took}s)"
  else
    cat "$logs/$b.log"
    echo "test.sh: FAILED $b (${took}s, exit $rc)"
  fi
}

tests_start=$(date +%s)
# Held while the rest builds. A full run starts the alone lane beside that
# build (reliability first: its bounds allow it); a run of TEST_ONLY may
# start with any alone binary, whose bounds a compile beside it breaks, so
# it waits for the build's end.
rest_build_lock=$logs/rest-build.lock
exec 9>"$rest_build_lock"
flock 9
# The other lane: the rest of the build (every other target, linted), the
# images from its binaries, then its binaries; a failed build fails the run
# as a pseudo-binary `build` and skips them.
(
  rest_start=$(date +%s)
  executables=$logs/executables.all
  if ! test_build 10 "$executables" --workspace --all-targets 2>"$logs/build.log"; then
    echo "build 1 $(( $(date +%s) - rest_start )) 0" >>"$results"
    exit 0
  fi
  flock -u 9
  exec 9>&-
  echo "$(( $(date +%s) - rest_start ))" >"$logs/rest-build.took"
  # A test executable no group names (a new crate's unit tests) would never run.
  if [ -z "${TEST_ONLY:-}" ]; then
    for b in $(awk '{print $1}' "$executables" | sort -u); do
      case $known in
        *" $b "*) ;;
        *)
          echo "test.sh: the test executable $b is in no group of hack/test.sh" >"$logs/unclassified.log"
          echo "unclassified 1 0 0" >>"$results"
          ;;
      esac
    done
  fi
  # The fast lane: the unit and pure tests first, each verdict printed as it
  # comes (the rest are printed at the end), before the images.
  built=$(date +%s)
  for b in "${PURE[@]}"; do
    run_one "$b" 10
    report "$b"
  done
  [ ${#PURE[@]} -gt 0 ] &&
    echo "test.sh: the unit and pure tests ended $(( $(date +%s) - built ))s after the build's end"
  images_start=$(date +%s)
  env -u RUSTC_WORKSPACE_WRAPPER -u CLIPPY_ARGS hack/image.sh >"$logs/images.log" 2>&1 || {
    echo "test.sh: the images did not build (hack/image.sh)" >>"$logs/images.log"
    echo "images 1 $(( $(date +%s) - images_start )) 0" >>"$results"
    exit 0
  }
  echo "$(( $(date +%s) - images_start ))" >"$logs/images.took"
  for b in "${BESIDE[@]}"; do run_one "$b" 10; done
) &
beside_pid=$!
exec 9>&-
[ -n "${TEST_ONLY:-}" ] && [ ${#ALONE[@]} -gt 0 ] && flock "$rest_build_lock" true
paired=()
case " ${ALONE[*]} " in *" chaos "*) mapfile -t paired < <(printf '%s\n' "${WITH_CHAOS[@]}" | grep -xF -f <(printf '%s\n' "${ALONE[@]}")) ;; esac
for b in "${ALONE[@]}"; do
  case " ${paired[*]} " in *" $b "*) continue ;; esac
  if [ "$b" = chaos ] && [ ${#paired[@]} -gt 0 ]; then
    run_one chaos 0 &
    chaos_pid=$!
    for w in "${paired[@]}"; do run_one "$w" 0; done
    wait "$chaos_pid"
  else
    run_one "$b" 0
  fi
done
alone_took=$(( $(date +%s) - tests_start ))
wait "$beside_pid"
tests_took=$(( $(date +%s) - tests_start ))
rest_build_took=$(cat "$logs/rest-build.took" 2>/dev/null || echo "?")
images_took=$(cat "$logs/images.took" 2>/dev/null || echo "?")
for b in build images unclassified; do
  grep -q "^$b " "$results" && { cat "$logs/$b.log"; echo "test.sh: FAILED $b"; }
done
# The pure ones were reported as they ended; a failure is repeated here.
for b in "${PURE[@]}"; do grep -q "^$b 0 " "$results" || report "$b"; done
for b in "${BESIDE[@]}" "${ALONE[@]}"; do report "$b"; done

echo
echo "test.sh: seconds per binary and how busy the two cores were meanwhile (both lanes)"
row() { awk -v b="$2" -v g="$1" '$1==b {printf "  %-20s %-7s %5s s %4s%%\n", b, g, $3, $4}' "$results"; }
for b in "${PURE[@]}"; do row pure "$b"; done
for b in "${BESIDE[@]}"; do row beside "$b"; done
for b in "${ALONE[@]}"; do row alone "$b"; done
wait_for_node_tools
echo "test.sh: lint and test build of the alone lane ${first_build_took}s, of the rest ${rest_build_took}s beside it; images ${images_took}s; the Go tools ${tools_took}s in the background from the build's start; tests ${tests_took}s from the first build's end, of which the alone lane ${alone_took}s (logs in $logs/)"

# No control plane outlives its test binary (the kit's reapers take each one
# down once its test process is gone, a timeout included): a leaked one would
# slow every later run. Each is in target/e2e/<name>-<pid>/ with pid files.
leaked=
for _ in $(seq 60); do
  leaked=
  for f in target/e2e/*/*.pid; do
    [ -f "$f" ] || continue
    pid=$(cat "$f" 2>/dev/null) || continue
    [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && leaked+="$f "
  done
  [ -z "$leaked" ] && break
  sleep 1
done
if [ -n "$leaked" ]; then
  echo "test.sh: processes outlived their test binary by 60 s (killed now): $leaked"
  for f in $leaked; do kill -9 "$(cat "$f")" 2>/dev/null; done
  echo "leaked 1 0" >>"$results"
fi

passed=$(awk '$2==0' "$results" | wc -l)
failed=$(awk '$2!=0 {print $1}' "$results" | tr '\n' ' ')
[ -n "$failed" ] && echo "test.sh: failed: $failed"
echo "binaries: $passed passed, $(awk '$2!=0' "$results" | wc -l) failed"
[ -z "$failed" ]
