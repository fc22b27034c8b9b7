#!/bin/bash
# Runs every test binary staged by ../shared/gpu-host/stage-build.sh on a GPU
# host, with CUDAIPC_REQUIRE_GPU=1 so that a skipped GPU test fails.
# usage (repo root, GPU host): scripts/gpu-tests.sh [LOGDIR] [test-name-filter]
set -u
logdir=${1:-/tmp/gpu-test-logs}
filter=${2:-}
mkdir -p "$logdir"
source .gpu-host/env.sh
export CUDAIPC_REQUIRE_GPU=1 CUDAIPC_REQUIRE_NVRTC=1 RUST_BACKTRACE=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
failed=0
for t in .gpu-host/build/*; do
  case "$t" in *.so|*/bench|*/demo|*/publisher|*/reader|*/fanout) continue ;; esac
  name=$(basename "$t")
  "$t" --test-threads=1 $filter >"$logdir/$name.log" 2>&1
  rc=$?
  # Children a failed test may have left (stopped or orphaned pipelines)
  # must not load the GPU while the next binary runs.
  pkill -KILL -f "gst-launch-1.0" 2>/dev/null
  pkill -KILL -f ".gpu-host/build/test-" 2>/dev/null
  summary=$(grep -E "^test result" "$logdir/$name.log" | tail -1)
  echo "$name: rc=$rc $summary"
  if [ $rc -ne 0 ]; then
    failed=1
    grep -E "^test .*FAILED|panicked|^---- " "$logdir/$name.log" | head -20
  fi
done
exit $failed
