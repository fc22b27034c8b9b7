#!/bin/bash
# Stages what the GPU host runs (scripts/gpu-tests.sh, the benchmark) into
# .gpu-host: the portable GStreamer 1.22 runtime (once), the release build,
# stripped so that it travels, and gst-plugins-bad's video parsers
# (h264parse, for the NVDEC test), which the runtime lacks.
# usage (repo root, this machine): scripts/stage-gpu-host.sh
set -euo pipefail
shared=../shared/gpu-host
[ -f .gpu-host/gst-runtime.tgz ] || "$shared/make-runtime.sh" .gpu-host
"$shared/stage-build.sh" .gpu-host >/dev/null
strip .gpu-host/build/* 2>/dev/null || true
cp /usr/lib/x86_64-linux-gnu/gstreamer-1.0/libgstvideoparsersbad.so .gpu-host/build/
du -sh .gpu-host
