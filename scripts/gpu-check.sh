#!/bin/bash
# One device call's worth of checks on the GPU host, for a session whose
# device time is short. Output: a summary on stdout, logs in $OUT (or
# /tmp/gpu-check) as logs.tgz, bench tables and plots beside them.
# usage (repo root, GPU host, after staging with scripts/stage-gpu-host.sh --gst126):
#   scripts/gpu-check.sh [STEP...]
# steps (default: all, in this order):
#   tests126      gstcuda_interop and sink tests on GStreamer 1.26 (with the
#                 sink's lending debug lines)
#   all126        every test binary on GStreamer 1.26 (faults, soak included)
#   fd122         descriptor channels on the cuda transport on 1.22 (unit tests,
#                 gpu_descriptor_channels, faults)
#   tests122      gstcuda_interop, ipc_elements, gpu_cross_process on 1.22
#   bench126=R    bench rows R (default 13a,13b) on 1.26, MPS off and on
#   bench122=R    bench rows R (default 5,5d) on 1.22, MPS off and on (BENCH_MPS,
#                 BENCH_FRAMES override)
set -u
out=${OUT:-/tmp/gpu-check}
mkdir -p "$out/logs"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
export GST_DEBUG_NO_COLOR=1
[ $# -gt 0 ] || set -- tests126 tests122 bench126 bench122
# Consumers of another user (nobody: tests, bench rows 5u/5du) must reach
# the builds and runtimes.
d=$(pwd); while [ "$d" != / ]; do chmod o+x "$d"; d=$(dirname "$d"); done
chmod -R o+rX .gpu-host .gpu-host126 2>/dev/null
for step in "$@"; do
  rows=${step#*=}
  case $step in
    tests126)
      echo "== GStreamer 1.26: gstcuda_interop, sink"
      CUDAIPC_TEST_TIMEOUT=150 CUDAIPC_TEST_ONLY="gstcuda_interop sink" \
        timeout 330 scripts/gpu-tests.sh --gst126 "$out/logs/t126" 2>&1 | tail -40 ;;
    all126)
      echo "== GStreamer 1.26: every test binary"
      CUDAIPC_TEST_TIMEOUT=300 timeout 520 scripts/gpu-tests.sh --gst126 "$out/logs/a126" 2>&1 | tail -60 ;;
    fd122)
      echo "== GStreamer 1.22: descriptor channels on the cuda transport (unit, gpu_descriptor_channels, faults)"
      CUDAIPC_TEST_TIMEOUT=240 CUDAIPC_TEST_ONLY="gstcudaipc cudaipc_transport gpu_descriptor_channels faults" \
        timeout 400 scripts/gpu-tests.sh "$out/logs/fd122" 2>&1 | tail -30
      grep -h "kill cycles\|mapped read-only" "$out"/logs/fd122/*.log | sort | uniq -c ;;
    tests122)
      echo "== GStreamer 1.22: gstcuda_interop, ipc_elements, gpu_cross_process"
      CUDAIPC_TEST_TIMEOUT=150 CUDAIPC_TEST_ONLY="gstcuda_interop ipc_elements gpu_cross_process" \
        timeout 330 scripts/gpu-tests.sh "$out/logs/t122" 2>&1 | tail -20 ;;
    bench126*)
      [ "$rows" != "$step" ] || rows=13a,13b
      echo "== bench rows $rows on 1.26 (MPS off, on)"
      timeout 300 scripts/bench-gst126.sh --rows "$rows" --mps both --gst-cuda-seconds 2 \
        --out "$out/bench126" 2>&1 | grep -E "^\| *1|^1[0-9]|x upstream" | cut -c1-220 ;;
    bench122*)
      [ "$rows" != "$step" ] || rows=5,5d
      echo "== bench rows $rows on 1.22 (MPS off, on)"
      # BENCH_MPS=off for rows with a consumer of another user (5u, 5du): an
      # MPS server serves one user, and another user's client waits for it.
      mkdir -p "$out/logs"
      ( source .gpu-host/env.sh >/dev/null; timeout 280 .gpu-host/build/bench --rows "$rows" \
          --frames "${BENCH_FRAMES:-20000}" --mps "${BENCH_MPS:-both}" --out "$out/bench122-$rows" 2>&1 \
          | tee "$out/logs/bench122-$rows.log" | grep -E "^\| *[0-9]" | cut -c1-220 ) ;;
    *) echo "unknown step $step" ;;
  esac
done
echo quit | nvidia-cuda-mps-control 2>/dev/null
(cd "$out" && tar czf "logs-$(date +%s).tgz" logs && rm -rf logs)
