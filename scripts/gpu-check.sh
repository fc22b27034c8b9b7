#!/bin/bash
# One device call's worth of checks on the GPU host, for a session whose
# device time is short: the nvcodec interop and sink tests on GStreamer 1.26
# (with the sink's lending debug lines), the core GPU tests on 1.22, and
# the benchmark rows that decide issue 13 (13a, 13b) and the descriptor
# channel (5, 5d), MPS off and on. Output: a summary on stdout, logs in
# $OUT (or /tmp/gpu-check) as logs.tgz.
# usage (repo root, GPU host, after staging with scripts/stage-gpu-host.sh --gst126):
#   scripts/gpu-check.sh
set -u
out=${OUT:-/tmp/gpu-check}
mkdir -p "$out/logs"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
export GST_DEBUG_NO_COLOR=1
echo "== GStreamer 1.26: gstcuda_interop, sink"
CUDAIPC_TEST_TIMEOUT=150 CUDAIPC_TEST_ONLY="gstcuda_interop sink" \
  timeout 330 scripts/gpu-tests.sh --gst126 "$out/logs/t126" 2>&1 | tail -20
echo "== GStreamer 1.22: gstcuda_interop, ipc_elements, gpu_cross_process"
CUDAIPC_TEST_TIMEOUT=150 CUDAIPC_TEST_ONLY="gstcuda_interop ipc_elements gpu_cross_process" \
  timeout 330 scripts/gpu-tests.sh "$out/logs/t122" 2>&1 | tail -20
echo "== bench rows 13a, 13b on 1.26 (MPS off, on)"
timeout 240 scripts/bench-gst126.sh --rows 13a,13b --mps both --gst-cuda-seconds 2 --out "$out/bench126" 2>&1 \
  | grep -E "^13|x upstream" | cut -c1-200
echo "== bench rows 5, 5d on 1.22 (MPS off, on)"
( source .gpu-host/env.sh >/dev/null; timeout 200 .gpu-host/build/bench --rows 5,5d --mps both --out "$out/bench122" 2>&1 \
  | grep -E "^\| 5" | cut -c1-200 )
echo quit | nvidia-cuda-mps-control 2>/dev/null
(cd "$out" && tar czf logs.tgz logs && rm -rf logs)
