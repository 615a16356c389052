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
PAIRED=(chart chart_test_hook image egress spec_limits tenancy self_service_rbac
  protocols observability overload)
ALONE=(ha failover control_plane chaos foundation node alerts_fire tenancy_dns isolation
  probe reliability)

# cargo arguments of a binary's name.
args_of() {
  case $1 in
    lib) echo "--lib" ;;
    bins) echo "--bins" ;;
    kit) echo "-p webchecker-kit --lib" ;;
    *) echo "--test $1" ;;
  esac
}

known=" ${PURE[*]} ${PAIRED[*]} ${ALONE[*]} "
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
for b in ${PURE[@]} ${PAIRED[@]} ${ALONE[@]}; do
  case $b in lib | bins | kit) continue ;; esac
  [ -f "tests/$b.rs" ] || { echo "test.sh: hack/test.sh names tests/$b.rs, which does not exist" >&2; exit 1; }
done

if [ -n "${TEST_ONLY:-}" ]; then
  keep() { local b; for b in "$@"; do case " $TEST_ONLY " in *" $b "*) echo "$b" ;; esac; done; }
  mapfile -t PURE < <(keep "${PURE[@]}")
  mapfile -t PAIRED < <(keep "${PAIRED[@]}")
  mapfile -t ALONE < <(keep "${ALONE[@]}")
fi

# Build everything first (one build, deadlines below cover only the tests),
# the images too (a release build) and the node's binaries (tests/image.rs
# and tests/node.rs use them).
build_start=$(date +%s)
cargo test --locked --all-targets --no-run || exit 1
cargo test --locked -p webchecker-kit --lib --no-run || exit 1
hack/image.sh || exit 1
hack/build-node-tools.sh node >/dev/null || exit 1
build_took=$(( $(date +%s) - build_start ))

logs=target/test-logs
rm -rf "$logs"
mkdir -p "$logs"
results=$logs/results
: >"$results"

# run_one NAME: the binary under its deadline, its output in $logs/NAME.log;
# appends "NAME rc seconds" to $results.
run_one() {
  local b=$1 minutes=$per_binary start rc took
  [ "$b" = chaos ] && minutes=$((chaos_minutes * 2 + 10))
  start=$(date +%s)
  # `timeout` kills the test's process group; the kit's reapers have groups
  # of their own and take its control planes down (kit/src/lib.rs).
  # shellcheck disable=SC2046 # the arguments are several words on purpose
  timeout --kill-after=30s "${minutes}m" cargo test --locked $(args_of "$b") -- --test-threads=1 \
    >"$logs/$b.log" 2>&1
  rc=$?
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

# run_group WIDTH NAME...: at most WIDTH binaries at once.
run_group() {
  local width=$1 b running=()
  shift
  for b in "$@"; do
    while [ "$(jobs -rp | wc -l)" -ge "$width" ]; do wait -n; done
    run_one "$b" &
  done
  wait
  for b in "$@"; do report "$b"; done
}

tests_start=$(date +%s)
run_group 2 "${PURE[@]}"
run_group 2 "${PAIRED[@]}"
run_group 1 "${ALONE[@]}"
tests_took=$(( $(date +%s) - tests_start ))

echo
echo "test.sh: seconds per binary (group: pure and paired run two at a time, alone one at a time)"
for b in "${PURE[@]}"; do printf '  %-20s pure    %5s\n' "$b" "$(awk -v b="$b" '$1==b {print $3}' "$results")"; done
for b in "${PAIRED[@]}"; do printf '  %-20s paired  %5s\n' "$b" "$(awk -v b="$b" '$1==b {print $3}' "$results")"; done
for b in "${ALONE[@]}"; do printf '  %-20s alone   %5s\n' "$b" "$(awk -v b="$b" '$1==b {print $3}' "$results")"; done
echo "test.sh: builds ${build_took}s, tests ${tests_took}s (logs in $logs/)"

passed=$(awk '$2==0' "$results" | wc -l)
failed=$(awk '$2!=0 {print $1}' "$results" | tr '\n' ' ')
[ -n "$failed" ] && echo "test.sh: failed: $failed"
echo "binaries: $passed passed, $(awk '$2!=0' "$results" | wc -l) failed"
[ -z "$failed" ]
