#!/bin/bash
# The flake gate: every staged GPU test binary N times on one GStreamer
# runtime, through scripts/gpu-host/tests.sh (CUDAIPC_REQUIRE_GPU=1,
# --test-threads=1), each run's logs in LOGDIR/runI. Then each test that
# failed, with in how many runs ("k of N"), and the binaries that crashed or
# timed out (their exit status, the test they were in), and a last line
# "flake gate on 1.26: N runs, T tests run, F failing tests"; exit status 1
# when a test failed or a binary crashed or timed out, and when the gate ran
# nothing: nothing staged to run (tests.sh --list fails), no run made, a run
# in which fewer binaries ran than tests.sh selects (or tests.sh failed with
# no binary failing), or no test at all.
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

# tests_ran LOG: how many tests one binary's log says ran (passed and
# failed of its "test result" line).
tests_ran() {
  sed -n 's/^test result: .* \([0-9]*\) passed; \([0-9]*\) failed;.*/\1 \2/p' "$1" | tail -1 |
    awk '{ n = $1 + $2 } END { print n + 0 }'
}

# count LOGDIR VERSION: the report over LOGDIR/run*/ (tests.sh's logs, and
# its output in tests.txt; LOGDIR/problems.txt: the runs that ran less than
# tests.sh selects); status 1 when anything failed or nothing ran.
count() {
  local logdir=$1 v=$2 run log short nruns=0 nfailing ncrashed ntests=0 nproblems=0
  local failing=$logdir/failing.txt crashed=$logdir/crashed.txt problems=$logdir/problems.txt
  for run in "$logdir"/run*/; do
    [ -d "$run" ] || continue
    nruns=$((nruns + 1))
    for log in "$run"*.log; do
      [ -e "$log" ] && ntests=$((ntests + $(tests_ran "$log")))
    done
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
  [ -f "$problems" ] && nproblems=$(wc -l <"$problems")
  if [ "$nruns" = 0 ]; then
    echo "no run was made in $logdir"
  elif [ "$ntests" = 0 ]; then
    echo "no test ran in $nruns runs (tests.sh's output: $logdir/run*/tests.txt)"
  fi
  if [ "$nproblems" -gt 0 ]; then
    echo "runs that ran less than they should:"
    sed 's/^/  /' "$problems"
  fi
  if [ "$nfailing" -gt 0 ]; then
    echo "failing tests (runs failed of $nruns):"
    awk -v n="$nruns" '{ k = $1; $1 = ""; sub(/^ /, ""); printf "  %s: %d of %d\n", $0, k, n }' "$failing"
  fi
  if [ "$ncrashed" -gt 0 ]; then
    echo "binaries that crashed or timed out:"
    sed 's/^/  /' "$crashed"
  fi
  local verdict=
  { [ "$nruns" = 0 ] || [ "$ntests" = 0 ]; } && verdict=": FAILED, nothing was tested"
  echo "flake gate on ${v:0:1}.${v:1}: $nruns runs, $ntests tests run, $nfailing failing tests$([ "$ncrashed" -gt 0 ] && echo ", $ncrashed binary runs crashed or timed out")$([ "$nproblems" -gt 0 ] && echo ", $nproblems runs incomplete")$verdict"
  [ "$nfailing" = 0 ] && [ "$ncrashed" = 0 ] && [ "$nproblems" = 0 ] && [ "$nruns" -gt 0 ] && [ "$ntests" -gt 0 ]
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
# What each run must run: the binaries tests.sh selects. None (nothing
# staged, CUDAIPC_TEST_ONLY naming none): the gate fails at once.
if ! "$here/tests.sh" "${runtime[@]}" --list >"$logdir/expected.txt" 2>"$logdir/list.err"; then
  cat "$logdir/list.err"
  echo "flake gate on ${v:0:1}.${v:1}: 0 runs: FAILED, nothing to run"
  exit 1
fi
expected=$(wc -l <"$logdir/expected.txt")
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
  binaries=$(grep -cE '^[^ :]*: rc=[0-9]' "$logdir/run$i/tests.txt")
  took=$(($(date +%s) - t0))
  [ "$took" -gt "$longest" ] && longest=$took
  echo "run $i of $n: $took s, tests.sh exit $rc, $binaries of $expected binaries ran, $bad failed"
  # A run that ran fewer binaries than selected, or that failed with none
  # failing (it could not start them, no test ran): said, and the gate fails.
  why=
  if [ "$binaries" -lt "$expected" ]; then
    why="$binaries of $expected binaries ran"
  elif [ "$rc" != 0 ] && [ "$bad" = 0 ]; then
    why="tests.sh exit $rc with no binary failing"
  fi
  if [ -n "$why" ]; then
    # What tests.sh said of it: binaries that ran no test, its own lines.
    last=$(grep -E '^[^ :]*: ran no test|^tests.sh: ' "$logdir/run$i/tests.txt" | sed -n 1,4p | paste -sd ';' - | sed 's/;/; /g')
    [ -n "$last" ] || last=$(grep -v '^[[:space:]]*$' "$logdir/run$i/tests.txt" | tail -1)
    echo "run$i: $why (tests.sh exit $rc${last:+; $last})" | tee -a "$logdir/problems.txt"
  fi
done
count "$logdir" "$v"
