#!/bin/bash
# Runs the benchmark staged by `scripts/stage-gpu-host.sh --gst126`
# (.gpu-host126/build/bench) on the GStreamer 1.26 runtime, set up as
# `scripts/gpu-tests.sh --gst126` sets it up.
# usage (repo root, GPU host): scripts/bench-gst126.sh [bench options]
#   e.g. scripts/bench-gst126.sh --gst-cuda --mps both --out bench-13
set -u
source .gpu-host126/env126.sh
# Plugins are scanned in a child, as by default: the benchmark registers the
# plugin statically and must not also get the shared object in-process.
printf '#!/bin/sh\nexec %s --library-path %s /tmp/gst126/root/bin/gst-plugin-scanner "$@"\n' \
  "$GST126_LOADER" "$GST126_LIBS:/usr/lib/x86_64-linux-gnu" > /tmp/gst126/wrap/gst-plugin-scanner
chmod +x /tmp/gst126/wrap/gst-plugin-scanner
export GST_PLUGIN_SCANNER=/tmp/gst126/wrap/gst-plugin-scanner
unset GST_REGISTRY_FORK
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
exec .gpu-host126/build/bench "$@"
