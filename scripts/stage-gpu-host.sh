#!/bin/bash
# Stages what the GPU host runs (scripts/gpu-tests.sh, the benchmark) into
# .gpu-host: the portable GStreamer 1.22 runtime (once), the release build,
# stripped so that it travels, and gst-plugins-bad's video parsers
# (h264parse, for the NVDEC test), which the runtime lacks. With --gst126
# (--gst128) it also stages a GStreamer 1.26 (1.28) runtime with nvcodec and
# NVRTC 12 into .gpu-host126 (.gpu-host128) and a copy of the build given
# that runtime's loader (.gpu-host126/build) for
# `scripts/gpu-tests.sh --gst126` (--gst128).
# usage (repo root, this machine): scripts/stage-gpu-host.sh [--gst126] [--gst128]
set -euo pipefail
versions=()
for arg in "$@"; do
  case $arg in
    --gst126) versions+=(1.26) ;;
    --gst128) versions+=(1.28) ;;
    *) echo "usage: $0 [--gst126] [--gst128]" >&2; exit 2 ;;
  esac
done
shared=../shared/gpu-host
[ -f .gpu-host/gst-runtime.tgz ] || "$shared/make-runtime.sh" .gpu-host
"$shared/stage-build.sh" .gpu-host >/dev/null
strip .gpu-host/build/* 2>/dev/null || true
cp /usr/lib/x86_64-linux-gnu/gstreamer-1.0/libgstvideoparsersbad.so .gpu-host/build/
for version in "${versions[@]}"; do
  nnn=${version/./}
  dir=.gpu-host$nnn
  [ -f $dir/gst$nnn.tgz ] || NVRTC12=1 scripts/gst-runtime/make-runtime.sh "$version" $dir
  rm -rf $dir/build && mkdir -p $dir/build
  cp .gpu-host/build/* $dir/build/
  # The runtime's own parsers come with it.
  rm -f $dir/build/libgstvideoparsersbad.so
  for f in $dir/build/*; do
    [ "${f%.so}" = "$f" ] || continue
    # envNNN.sh unpacks the runtime to /tmp/gstNNN; DT_RPATH also applies
    # to the libraries those load.
    patchelf --force-rpath --set-interpreter /tmp/gst$nnn/root/lib/ld-linux-x86-64.so.2 \
      --set-rpath /tmp/gst$nnn/root/lib:/tmp/gst$nnn/nvrtc:/usr/lib/x86_64-linux-gnu "$f"
  done
  du -sh $dir
done
du -sh .gpu-host
