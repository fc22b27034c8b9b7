#!/bin/bash
# One device call's worth of checks on the GPU host, for a session whose
# device time is short. Output: a summary on stdout, logs in $OUT (or
# /tmp/gpu-check) as logs.tgz, bench tables and plots beside them.
# usage (repo root, GPU host, after staging with scripts/gpu-host/stage.sh --gst126 [--gst128]):
#   scripts/gpu-host/check.sh [STEP...]
# steps (default: tests126 tests122 bench126 bench122, in this order):
#   tests126      gstcuda_interop and sink tests on GStreamer 1.26 (with the
#                 sink's lending debug lines); tests128 the same on 1.28
#   all126        every test binary on GStreamer 1.26 (faults, soak included);
#                 all128 on 1.28
#   fd122         descriptor channels on the cuda transport on 1.22 (unit tests,
#                 descriptor_channels, faults)
#   tests122      gstcuda_interop, ipc_elements, cross_process on 1.22
#   bench126=R    bench rows R (default 13a,13b) on 1.26, MPS off and on;
#                 bench128=R on 1.28
#   bench122=R    bench rows R (default 5,5d) on 1.22, MPS off and on (BENCH_MPS,
#                 BENCH_FRAMES override)
#   nvdec126=N    gstcuda_interop's NVDEC test N times (default 10) in a row on
#                 1.26, and how many passed; nvdec128=N on 1.28
#   sanitize      compute-sanitizer on 1.22 (scripts/gpu-host/sanitize.sh):
#                 memcheck on a producer and a verifying consumer (ipc-mode
#                 legacy and fd), racecheck and synccheck on the consumer, every
#                 kernel of cudatestsrc/cudaprocess under memcheck, racecheck and
#                 synccheck, initcheck on a small consumer; sanitize=P,P runs
#                 those parts only (memcheck racecheck synccheck kernels initcheck)
#   repeat=N      the flake gate (scripts/gpu-host/flake-gate.sh): every test
#                 binary N times (default 3) on 1.22 and on 1.26, then each
#                 failing test with "k of N" and the binaries that crashed or
#                 timed out; repeat122=N, repeat126=N, repeat128=N on one runtime;
#                 CUDAIPC_TEST_ONLY (as for tests.sh) gates some binaries only;
#                 FLAKE_BUDGET_S (seconds) stops each runtime's gate early
#   memory        device memory per process of a 4K pair, the context's stack
#                 reservation trimmed and kept, MPS off and on
#                 (scripts/gpu-host/memory.sh)
#   census        the driver-call census (scripts/gpu-host/census.sh): driver
#                 calls, host syncs and frame copies per frame of each process,
#                 asserted on the zero-copy paths (exit status 1 when it
#                 fails); census=quick: only the legacy channel, MPS off,
#                 gst-launch-1.0 consumer
# sanitize, repeat and census make the exit status 1 when they fail; every
# step does when it ran no test (nothing staged or unpacked here: tests.sh
# exit 2, said in its output).
set -u
out=${OUT:-/tmp/gpu-check}
mkdir -p "$out/logs"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
export GST_DEBUG_NO_COLOR=1
[ $# -gt 0 ] || set -- tests126 tests122 bench126 bench122
# tests STEP LINES tests.sh-ARGS...: tests.sh, the last LINES lines of its
# output; a run that tested nothing (its exit status 2) fails check.sh.
tests() {
  local step=$1 lines=$2 rc
  shift 2
  "$@" 2>&1 | tail -"$lines"
  rc=${PIPESTATUS[0]}
  if [ "$rc" = 2 ]; then
    echo "$step: FAILED: it ran no test (above: why)"
    check_failed=1
  fi
}
# Consumers of another user (nobody: tests, bench rows 5u/5du) must reach
# the builds and runtimes.
d=$(pwd); while [ "$d" != / ]; do chmod o+x "$d"; d=$(dirname "$d"); done
chmod -R o+rX .gpu-host .gpu-host126 .gpu-host128 2>/dev/null
for step in "$@"; do
  rows=${step#*=}
  case $step in
    tests126|tests128)
      v=${step#tests}
      echo "== GStreamer ${v:0:1}.${v:1}: gstcuda_interop, sink"
      CUDAIPC_TEST_TIMEOUT=150 CUDAIPC_TEST_ONLY="elements:gstcuda_interop elements:sink" \
        tests "$step" 40 timeout 330 scripts/gpu-host/tests.sh --gst$v "$out/logs/t$v" ;;
    all126|all128)
      v=${step#all}
      echo "== GStreamer ${v:0:1}.${v:1}: every test binary"
      CUDAIPC_TEST_TIMEOUT=300 tests "$step" 60 timeout 520 scripts/gpu-host/tests.sh --gst$v "$out/logs/a$v" ;;
    nvdec122*|nvdec126*|nvdec128*)
      [ "$rows" != "$step" ] || rows=10
      v=${step%%=*}; v=${v#nvdec}
      runtime=--gst$v; [ "$v" = 122 ] && runtime=
      test=frames_nvdec_decodes_reach_another_process_unchanged
      echo "== GStreamer ${v:0:1}.${v:1}: $test, $rows times"
      passed=0 nothing=0
      for i in $(seq "$rows"); do
        # Passed: exactly this test ran and passed (a skip fails under
        # CUDAIPC_REQUIRE_GPU).
        rc=0
        CUDAIPC_TEST_TIMEOUT=120 CUDAIPC_TEST_ONLY=elements \
          scripts/gpu-host/tests.sh $runtime "$out/logs/nvdec$v-$i" "$test" >"$out/logs/nvdec$v-$i.txt" 2>&1 || rc=$?
        if [ $rc = 0 ] && grep -q "1 passed; 0 failed" "$out/logs/nvdec$v-$i.txt"; then
          passed=$((passed + 1))
        else
          [ $rc = 2 ] && nothing=$((nothing + 1))
          echo "run $i failed:"; grep -E "rc=|panicked|SKIPPED|^tests.sh: " "$out/logs/nvdec$v-$i.txt" | sed -n 1,6p
        fi
      done
      echo "nvdec on ${v:0:1}.${v:1}: $passed of $rows passed"
      if [ "$nothing" = "$rows" ]; then
        echo "$step: FAILED: no run ran the test (above: why)"
        check_failed=1
      fi ;;
    fd122)
      echo "== GStreamer 1.22: descriptor channels on the cuda transport (unit, descriptor_channels, faults)"
      CUDAIPC_TEST_TIMEOUT=240 CUDAIPC_TEST_ONLY="gstcudaipc cudaipc_transport processes_and_channels:descriptor_channels hostile_and_faults:faults" \
        tests "$step" 30 timeout 400 scripts/gpu-host/tests.sh "$out/logs/fd122"
      grep -h "kill cycles\|mapped read-only" "$out"/logs/fd122/*.log 2>/dev/null | sort | uniq -c ;;
    tests122)
      echo "== GStreamer 1.22: gstcuda_interop, ipc_elements, cross_process"
      CUDAIPC_TEST_TIMEOUT=150 CUDAIPC_TEST_ONLY="elements:gstcuda_interop elements:ipc_elements processes_and_channels:cross_process" \
        tests "$step" 20 timeout 330 scripts/gpu-host/tests.sh "$out/logs/t122" ;;
    bench126*|bench128*)
      [ "$rows" != "$step" ] || rows=13a,13b
      v=${step%%=*}; v=${v#bench}
      echo "== bench rows $rows on ${v:0:1}.${v:1} (MPS off, on)"
      timeout 300 scripts/gpu-host/bench.sh "${v:0:1}.${v:1}" --rows "$rows" --mps both --gst-cuda-seconds 2 \
        --out "$out/bench$v" 2>&1 | grep -E "^\| *1|^1[0-9]|x upstream" | cut -c1-220 ;;
    bench122*)
      [ "$rows" != "$step" ] || rows=5,5d
      echo "== bench rows $rows on 1.22 (MPS off, on)"
      # BENCH_MPS=off for rows with a consumer of another user (5u, 5du): an
      # MPS server serves one user, and another user's client waits for it.
      mkdir -p "$out/logs"
      ( source .gpu-host/env.sh >/dev/null; timeout 280 .gpu-host/build/bench --rows "$rows" \
          --frames "${BENCH_FRAMES:-20000}" --mps "${BENCH_MPS:-both}" --out "$out/bench122-$rows" 2>&1 \
          | tee "$out/logs/bench122-$rows.log" | grep -E "^\| *[0-9]" | cut -c1-220 ) ;;
    sanitize|sanitize=*)
      parts=()
      [ "$rows" != "$step" ] && IFS=, read -r -a parts <<<"$rows"
      echo "== compute-sanitizer on GStreamer 1.22${parts[*]:+ (${parts[*]})}"
      timeout 570 scripts/gpu-host/sanitize.sh "$out/logs/sanitize" "${parts[@]}"
      rc=$?
      [ $rc = 124 ] && echo "sanitize: stopped after 570 s"
      [ $rc = 0 ] || check_failed=1 ;;
    repeat|repeat=*|repeat122*|repeat126*|repeat128*)
      [ "$rows" != "$step" ] || rows=3
      versions="122 126"
      case $step in repeat1*) versions=${step%%=*}; versions=${versions#repeat} ;; esac
      for v in $versions; do
        echo "== flake gate on ${v:0:1}.${v:1}: every test binary${CUDAIPC_TEST_ONLY:+ of $CUDAIPC_TEST_ONLY}, $rows times"
        CUDAIPC_TEST_TIMEOUT=${CUDAIPC_TEST_TIMEOUT:-300} scripts/gpu-host/flake-gate.sh "$v" "$rows" "$out/logs/repeat$v" \
          || check_failed=1
      done ;;
    memory)
      echo "== device memory per process (1.26)"
      timeout 200 scripts/gpu-host/memory.sh 2>&1 | tail -20 ;;
    census|census=quick)
      echo "== driver-call census on 1.26 ($step)"
      mkdir -p "$out/logs/census"
      opt=(); [ "$step" = census=quick ] && opt=(--quick)
      OUT="$out/logs/census" timeout 300 scripts/gpu-host/census.sh "${opt[@]}" >"$out/logs/census/census.log" 2>&1 \
        || check_failed=1
      tail -n 50 "$out/logs/census/census.log" | cut -c1-400
      cp "$out/logs/census/table.md" "$out/census-table.md" 2>/dev/null ;;
    *) echo "unknown step $step" ;;
  esac
done
echo quit | nvidia-cuda-mps-control 2>/dev/null
(cd "$out" && tar czf "logs-$(date +%s).tgz" logs && rm -rf logs)
exit "${check_failed:-0}"
