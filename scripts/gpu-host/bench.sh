#!/bin/bash
# Runs the benchmark staged by `scripts/gpu-host/stage.sh --gst126` (--gst128)
# (.gpu-host126/build/bench) on the GStreamer 1.26 (1.28) runtime, set up as
# `scripts/gpu-host/tests.sh --gst126` sets it up.
# usage (repo root, GPU host): scripts/gpu-host/bench.sh 1.26|1.28 [bench options]
#   e.g. scripts/gpu-host/bench.sh 1.28 --gst-cuda --mps both --out bench-13
set -u
case ${1:-} in
  1.26|1.28) nnn=${1/./} ;;
  *) echo "usage: $0 1.26|1.28 [bench options]" >&2; exit 2 ;;
esac
shift
source .gpu-host$nnn/env$nnn.sh
# Plugins are scanned in a child, as by default: the benchmark registers the
# plugin statically and must not also get the shared object in-process.
export GST_PLUGIN_SCANNER=$GST_RT/wrap/gst-plugin-scanner
unset GST_REGISTRY_FORK
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
exec .gpu-host$nnn/build/bench "$@"
