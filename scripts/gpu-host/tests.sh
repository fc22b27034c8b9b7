#!/bin/bash
# Runs every test binary staged by scripts/gpu-host/stage.sh on a GPU host,
# with CUDAIPC_REQUIRE_GPU=1 so that a skipped GPU test fails. With --gst126
# (--gst128) the same tests run on the staged GStreamer 1.26 (1.28) runtime,
# with its nvcodec.
# usage (repo root, GPU host): scripts/gpu-host/tests.sh [--gst126|--gst128] [LOGDIR] [test-name-filter]
# CUDAIPC_TEST_TIMEOUT: seconds one test binary may run (default 900).
# CUDAIPC_TEST_ONLY: names of the test binaries to run (elements, processes_and_channels,
# hostile_and_faults, api; the unit tests: "gstcudaipc" of the plugin, "cudaipc_channel" and
# "cudaipc_transport" of the crates; default all); BINARY:MODULE runs one module of a binary
# (e.g. "elements:gstcuda_interop elements:sink"), unless a test-name-filter is given.
set -u
case ${1:-} in
  --gst126|--gst128)
    nnn=${1#--gst}
    shift
    source .gpu-host$nnn/env$nnn.sh
    # Plugins are scanned in a child, as by default: the examples register
    # the plugin statically and must not also get the shared object in-process.
    export GST_PLUGIN_SCANNER=$GST_RT/wrap/gst-plugin-scanner CUDAIPC_EXPECT_GST=${nnn:0:1}.${nnn:1}
    unset GST_REGISTRY_FORK
    build=.gpu-host$nnn/build ;;
  *)
    source .gpu-host/env.sh
    build=.gpu-host/build ;;
esac
logdir=${1:-/tmp/gpu-test-logs}
filter=${2:-}
mkdir -p "$logdir"
export CUDAIPC_PLUGIN_DIR=$(pwd)/$build
export CUDAIPC_REQUIRE_GPU=1 CUDAIPC_REQUIRE_NVRTC=1 RUST_BACKTRACE=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
failed=0
for t in $build/test-* $build/gstcudaipc-* $build/cudaipc_channel-* $build/cudaipc_transport-*; do
  name=$(basename "$t")
  short=${name#test-}
  short=${short%-[0-9a-f]*[0-9a-f]}
  modules=""
  if [ -n "${CUDAIPC_TEST_ONLY:-}" ]; then
    wanted=0
    for only in $CUDAIPC_TEST_ONLY; do
      case $only in
        "$short") wanted=1 ;;
        "$short":*) wanted=1 modules="$modules ${only#*:}::" ;;
      esac
    done
    [ $wanted = 1 ] || continue
  fi
  # Its own process group, so that children a failed test left behind
  # (stopped or orphaned pipelines) are ended before the next binary runs.
  setsid timeout "${CUDAIPC_TEST_TIMEOUT:-900}" "$t" --test-threads=1 ${filter:-$modules} >"$logdir/$name.log" 2>&1 &
  pid=$!
  wait $pid
  rc=$?
  kill -KILL -- -$pid 2>/dev/null
  summary=$(grep -E "^test result" "$logdir/$name.log" | tail -1)
  echo "$name: rc=$rc $summary"
  if [ $rc -ne 0 ]; then
    failed=1
    grep -E "^test .*FAILED|panicked|^---- " "$logdir/$name.log" | sed -n 1,20p
  fi
done
exit $failed
