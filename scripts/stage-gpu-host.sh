#!/bin/bash
# Stages what the GPU host runs (scripts/gpu-tests.sh, the benchmark) into
# .gpu-host: the portable GStreamer 1.22 runtime (once), the release build,
# stripped so that it travels, and gst-plugins-bad's video parsers
# (h264parse, for the NVDEC test), which the runtime lacks. With --gst126 it
# also stages a GStreamer 1.26 runtime with nvcodec and NVRTC 12 into
# .gpu-host126 and a copy of the build given that runtime's loader
# (.gpu-host126/build) for `scripts/gpu-tests.sh --gst126`.
# usage (repo root, this machine): scripts/stage-gpu-host.sh [--gst126]
set -euo pipefail
shared=../shared/gpu-host
[ -f .gpu-host/gst-runtime.tgz ] || "$shared/make-runtime.sh" .gpu-host
"$shared/stage-build.sh" .gpu-host >/dev/null
strip .gpu-host/build/* 2>/dev/null || true
cp /usr/lib/x86_64-linux-gnu/gstreamer-1.0/libgstvideoparsersbad.so .gpu-host/build/
if [ "${1:-}" = --gst126 ]; then
  [ -f .gpu-host126/gst126.tgz ] || NVRTC12=1 scripts/gst126/make-runtime.sh .gpu-host126
  rm -rf .gpu-host126/build && mkdir -p .gpu-host126/build
  cp .gpu-host/build/* .gpu-host126/build/
  # 1.26's own parsers come with its runtime.
  rm -f .gpu-host126/build/libgstvideoparsersbad.so
  for f in .gpu-host126/build/*; do
    [ "${f%.so}" = "$f" ] || continue
    # env126.sh unpacks the runtime to /tmp/gst126; DT_RPATH also applies
    # to the libraries those load.
    patchelf --force-rpath --set-interpreter /tmp/gst126/root/lib/ld-linux-x86-64.so.2 \
      --set-rpath /tmp/gst126/root/lib:/tmp/gst126/nvrtc:/usr/lib/x86_64-linux-gnu "$f"
  done
  du -sh .gpu-host126
fi
du -sh .gpu-host
