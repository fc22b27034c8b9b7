#!/bin/bash
# The flake gate: every staged GPU test binary N times on one GStreamer
# runtime, through scripts/gpu-host/tests.sh (CUDAIPC_REQUIRE_GPU=1,
# --test-threads=1), each run's logs in LOGDIR/runI. Then each test that
# failed, with in how many runs ("k of N"), and the binaries that crashed or
# timed out (their exit status, the test they were in), and a last line
# "flake gate on 1.26: N runs, F failing tests"; exit status 1 when a test
# failed or a binary crashed or timed out.
# usage (repo root, GPU host, after scripts/gpu-host/stage.sh --gst126 [--gst128]):
#   scripts/gpu-host/flake-gate.sh 122|126|128 N LOGDIR [test-name-filter]
#   scripts/gpu-host/flake-gate.sh --count 122|126|128 LOGDIR   (only the count, over LOGDIR/run*/)
# CUDAIPC_TEST_ONLY (one binary or module, e.g. "elements:gstcuda_interop") and
# CUDAIPC_TEST_TIMEOUT (seconds per binary) pass through to tests.sh.
# FLAKE_BUDGET_S: no run is started that would, at the pace of the longest run
# so far, end later than this many seconds after the first began (to fit a
# device call); the count is then over the runs made.
set -u

# binary_short FILE: the test binary's short name, as tests.sh makes it
# (test-elements-0123abcd.log -> elements).
binary_short() {
  local short
  short=$(basename "$1" .log)
  short=${short#test-}
  echo "${short%-[0-9a-f]*[0-9a-f]}"
}

# failed_tests LOG: the names of the tests that failed in one binary's log
# ("test NAME ... FAILED", "---- NAME stdout ----"), once each.
failed_tests() {
  sed -n -e 's/^test \(.*\) \.\.\. FAILED[[:space:]]*$/\1/p' -e 's/^---- \(.*\) stdout ----[[:space:]]*$/\1/p' "$1" | sort -u
}

# count LOGDIR VERSION: the report over LOGDIR/run*/ (tests.sh's logs, and
# its output in tests.txt); status 1 when anything failed.
count() {
  local logdir=$1 v=$2 run log short nruns=0 nfailing ncrashed
  local failing=$logdir/failing.txt crashed=$logdir/crashed.txt
  for run in "$logdir"/run*/; do
    [ -d "$run" ] && nruns=$((nruns + 1))
  done
  for run in "$logdir"/run*/; do
    [ -d "$run" ] || continue
    for log in "$run"*.log; do
      [ -e "$log" ] || continue
      short=$(binary_short "$log")
      failed_tests "$log" | sed "s|^|$short: |"
    done
  done | sort | uniq -c | sort -k1,1nr -k2 >"$failing"
  for run in "$logdir"/run*/; do
    [ -f "$run/tests.txt" ] || continue
    # tests.sh's line per binary: "NAME: rc=RC test result: ..."
    sed -n 's/^\([^ :]*\): rc=\([0-9]*\).*/\1 \2/p' "$run/tests.txt" | while read -r name rc; do
      case $rc in
        0) continue ;;
        101) [ -n "$(failed_tests "$run$name.log")" ] && continue
             why="failed with no test named failing" ;;
        124) why="timed out" ;;
        137) why="killed (SIGKILL)" ;;
        134) why="aborted (SIGABRT)" ;;
        139) why="segmentation fault" ;;
        *) why="exit $rc" ;;
      esac
      # The test it was in: the last "test NAME ... " without a result.
      last=$(grep -E '^test .* \.\.\. *$' "$run$name.log" 2>/dev/null | tail -1 | sed 's/^test \(.*\) \.\.\. *$/\1/')
      echo "$(binary_short "$name"): $(basename "$run") rc=$rc $why${last:+, in $last}"
    done
  done >"$crashed"
  nfailing=$(wc -l <"$failing")
  ncrashed=$(wc -l <"$crashed")
  if [ "$nfailing" -gt 0 ]; then
    echo "failing tests (runs failed of $nruns):"
    awk -v n="$nruns" '{ k = $1; $1 = ""; sub(/^ /, ""); printf "  %s: %d of %d\n", $0, k, n }' "$failing"
  fi
  if [ "$ncrashed" -gt 0 ]; then
    echo "binaries that crashed or timed out:"
    sed 's/^/  /' "$crashed"
  fi
  echo "flake gate on ${v:0:1}.${v:1}: $nruns runs, $nfailing failing tests$([ "$ncrashed" -gt 0 ] && echo ", $ncrashed binary runs crashed or timed out")"
  [ "$nfailing" = 0 ] && [ "$ncrashed" = 0 ]
}

if [ "${1:-}" = --count ]; then
  count "$3" "$2"
  exit
fi
case ${1:-} in
  122) runtime=() ;;
  126|128) runtime=(--gst"$1") ;;
  *) echo "usage: $0 122|126|128 N LOGDIR [test-name-filter] | --count 122|126|128 LOGDIR" >&2; exit 2 ;;
esac
v=$1 n=${2:-3} logdir=${3:?LOGDIR} filter=${4:-}
rm -rf "$logdir" && mkdir -p "$logdir"
here=$(cd "$(dirname "$0")" && pwd)
start=$(date +%s) longest=0
for i in $(seq "$n"); do
  t0=$(date +%s)
  if [ -n "${FLAKE_BUDGET_S:-}" ] && [ $((t0 - start + longest)) -gt "$FLAKE_BUDGET_S" ]; then
    echo "run $i of $n not started: with runs of up to $longest s it would end after FLAKE_BUDGET_S=$FLAKE_BUDGET_S s"
    break
  fi
  mkdir -p "$logdir/run$i"
  "$here/tests.sh" "${runtime[@]}" "$logdir/run$i" ${filter:+"$filter"} >"$logdir/run$i/tests.txt" 2>&1
  rc=$?
  # tests.sh's failing lines, for this run alone.
  bad=$(grep -cE ': rc=[1-9]' "$logdir/run$i/tests.txt")
  took=$(($(date +%s) - t0))
  [ "$took" -gt "$longest" ] && longest=$took
  echo "run $i of $n: $took s, tests.sh exit $rc, $bad binaries failed"
done
count "$logdir" "$v"
