#!/usr/bin/env bash
# Every test, each test binary under a deadline, all of them run even when one
# fails (`make test`, .ci/run). Prints one line per binary, a table of their
# times and a summary.
#
# The binaries run in three groups, one after the other:
#   pure   - no control plane, no timing: two binaries at a time;
#   paired - end-to-end, but nothing they assert depends on how fast the
#            machine is: two at a time;
#   alone  - timing-sensitive (probe gaps, failover bounds, lateness): one at
#            a time with nothing beside them (two cores).
# A binary of tests/ that no group names runs alone (the safe default), and
# the run says so: a new test file is classified here.
#
# Environment: TEST_TIMEOUT_MINUTES (per binary, default 25), CHAOS_MINUTES
# (the campaign's length; its binary gets twice that plus 10 minutes),
# CHAOS_SEED (the campaign's schedule; pinned here, random in `make chaos`),
# TEST_ONLY (space-separated binary names, e.g. "ha lib": run just those).
set -uo pipefail
cd "$(dirname "$0")/.."
. hack/versions.env

per_binary=${TEST_TIMEOUT_MINUTES:-25}
chaos_minutes=${CHAOS_MINUTES:-3}
export CHAOS_MINUTES=$chaos_minutes
# The suite replays one pinned schedule (a regression test that fails only when
# behaviour changes); `make chaos` draws a new seed each run to explore.
export CHAOS_SEED=${CHAOS_SEED:-874556080}

# No incremental state: a full run builds each crate once, and the incremental
# caches of ~30 test binaries would double the target directory.
export CARGO_INCREMENTAL=0

PURE=(lib bins kit generated properties ring_chains chart_alerts metric_labels)
PAIRED=(chart chart_test_hook egress spec_limits tenancy self_service_rbac
  protocols observability overload)
# After the release images are built (they build beside the groups above).
IMAGES=(image)
ALONE=(ha failover control_plane chaos foundation node alerts_fire tenancy_dns isolation
  probe reliability)

known=" ${PURE[*]} ${PAIRED[*]} ${IMAGES[*]} ${ALONE[*]} "
for f in tests/*.rs; do
  b=$(basename "$f" .rs)
  case $known in
    *" $b "*) ;;
    *)
      echo "test.sh: tests/$b.rs is in no group of hack/test.sh: it runs alone"
      ALONE+=("$b")
      ;;
  esac
done
for b in ${PURE[@]} ${PAIRED[@]} ${IMAGES[@]} ${ALONE[@]}; do
  case $b in lib | bins | kit) continue ;; esac
  [ -f "tests/$b.rs" ] || { echo "test.sh: hack/test.sh names tests/$b.rs, which does not exist" >&2; exit 1; }
done

if [ -n "${TEST_ONLY:-}" ]; then
  keep() { local b; for b in "$@"; do case " $TEST_ONLY " in *" $b "*) echo "$b" ;; esac; done; }
  mapfile -t PURE < <(keep "${PURE[@]}")
  mapfile -t PAIRED < <(keep "${PAIRED[@]}")
  mapfile -t IMAGES < <(keep "${IMAGES[@]}")
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
build_start=$(date +%s)
cargo fmt --all -- --check || { echo "test.sh: cargo fmt --all would change files" >&2; exit 1; }
python3 hack/check-structure.py || exit 1
clippy_driver=$(rustup which clippy-driver 2>/dev/null || command -v clippy-driver) \
  || { echo "test.sh: clippy-driver not found (rustup component add clippy)" >&2; exit 1; }
export RUSTC_WORKSPACE_WRAPPER=$clippy_driver
export CLIPPY_ARGS="-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__"
# The tests run their executables directly (not through cargo), so the
# release build below never holds them up on cargo's lock of target/.
executables=$logs/executables
cargo test --locked --workspace --all-targets --no-run --message-format=json-diagnostic-rendered-ansi \
  | python3 hack/test-executables.py "$executables"
status=("${PIPESTATUS[@]}")
[ "${status[0]}" -eq 0 ] && [ "${status[1]}" -eq 0 ] || exit 1
build_took=$(( $(date +%s) - build_start ))

# The release images and the node's binaries (tests/image.rs, tests/node.rs)
# build at the lowest priority while the groups that do not depend on the
# machine's speed run: those mostly wait on control planes, and the build
# takes what they leave.
images_log=$logs/images.log
(
  env -u RUSTC_WORKSPACE_WRAPPER -u CLIPPY_ARGS nice -n 19 hack/image.sh &&
    nice -n 19 hack/build-node-tools.sh node >/dev/null
) >"$images_log" 2>&1 &
images_pid=$!
images_start=$(date +%s)
images_took=
# wait_for_images: the background build's end (once); exits when it failed.
wait_for_images() {
  [ -n "$images_took" ] && return 0
  wait "$images_pid"
  local rc=$?
  images_took=$(( $(date +%s) - images_start ))
  if [ $rc -ne 0 ]; then
    cat "$images_log"
    echo "test.sh: the release images or the node's binaries did not build" >&2
    exit 1
  fi
}

results=$logs/results
: >"$results"

# run_one NAME: the binary under its deadline, its output in $logs/NAME.log;
# appends "NAME rc seconds" to $results.
run_one() {
  local b=$1 minutes=$per_binary start rc took
  [ "$b" = chaos ] && minutes=$((chaos_minutes * 2 + 10))
  start=$(date +%s)
  # `timeout` kills the test's process group; the kit's reapers have groups
  # of their own and take its control planes down (kit/src/lib.rs). Each
  # executable runs in its package's directory, as cargo runs it.
  : >"$logs/$b.log"
  rc=0
  while read -r _ dir exe; do
    (cd "$dir" && timeout --kill-after=30s "${minutes}m" "$exe" --test-threads=1) >>"$logs/$b.log" 2>&1 || rc=$?
  done < <(awk -v b="$b" '$1==b' "$executables")
  grep -q "^$b " "$executables" || { echo "test.sh: no executable of $b was built" >>"$logs/$b.log"; rc=1; }
  took=$(( $(date +%s) - start ))
  [ $rc -eq 124 ] && echo "test.sh: TIMEOUT $b after ${minutes} minutes" >>"$logs/$b.log"
  echo "$b $rc $took" >>"$results"
}

# report NAME: the binary's verdict; its whole output when it failed, else
# the test runner's closing lines.
report() {
  local b=$1 rc took
  read -r _ rc took < <(grep "^$b " "$results" | tail -n 1)
  if [ "$rc" -eq 0 ]; then
    grep -E "^test result:|^running [0-9]+ tests?$" "$logs/$b.log" | grep -v "^running" || true
    echo "test.sh: ok     $b (${took}s)"
  else
    cat "$logs/$b.log"
    echo "test.sh: FAILED $b (${took}s, exit $rc)"
  fi
}

# running PID...: how many of these processes still run.
running() {
  local n=0 p
  for p in "$@"; do kill -0 "$p" 2>/dev/null && n=$((n + 1)); done
  echo "$n"
}

# run_group WIDTH NAME...: at most WIDTH binaries at once (waiting only for
# its own: the image build may run beside it).
run_group() {
  local width=$1 b pids=() p
  shift
  for b in "$@"; do
    while [ "$(running "${pids[@]}")" -ge "$width" ]; do wait -n "${pids[@]}" 2>/dev/null || true; done
    run_one "$b" &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p"; done
  for b in "$@"; do report "$b"; done
}

tests_start=$(date +%s)
run_group 2 "${PURE[@]}"
run_group 2 "${PAIRED[@]}"
wait_for_images
run_group 1 "${IMAGES[@]}"
run_group 1 "${ALONE[@]}"
tests_took=$(( $(date +%s) - tests_start ))

echo
echo "test.sh: seconds per binary (group: pure and paired run two at a time, alone one at a time)"
for b in "${PURE[@]}"; do printf '  %-20s pure    %5s\n' "$b" "$(awk -v b="$b" '$1==b {print $3}' "$results")"; done
for b in "${PAIRED[@]}"; do printf '  %-20s paired  %5s\n' "$b" "$(awk -v b="$b" '$1==b {print $3}' "$results")"; done
for b in "${IMAGES[@]}"; do printf '  %-20s images  %5s\n' "$b" "$(awk -v b="$b" '$1==b {print $3}' "$results")"; done
for b in "${ALONE[@]}"; do printf '  %-20s alone   %5s\n' "$b" "$(awk -v b="$b" '$1==b {print $3}' "$results")"; done
echo "test.sh: lint and test build ${build_took}s; release images and node binaries ${images_took}s beside the first groups; tests ${tests_took}s (logs in $logs/)"

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
