#!/bin/bash
# Stages what the GPU host runs (scripts/gpu-host/tests.sh, the benchmark) into
# .gpu-host: the portable GStreamer 1.22 runtime (once), the release build,
# stripped so that it travels, and gst-plugins-bad's video parsers
# (h264parse, for the NVDEC test), which the runtime lacks. With --gst126
# (--gst128) it also stages a GStreamer 1.26 (1.28) runtime with nvcodec and
# NVRTC 12 into .gpu-host126 (.gpu-host128) and a copy of the build given
# that runtime's loader (.gpu-host126/build) for
# `scripts/gpu-host/tests.sh --gst126` (--gst128), with the cudaipc Python package
# (.gpu-host126/python) for the runtime's Python (PYGI=1 of make-runtime.sh):
# `$GST_RT/wrap/python3-gi tests/python/gpu_gst_app_check.py`.
# usage (repo root, this machine): scripts/gpu-host/stage.sh [--gst126] [--gst128]
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
if [ ${#versions[@]} -gt 0 ]; then
  # The cudaipc abi3 wheel, stripped, for the newer runtimes' Python.
  # maturin in the venv of scripts/python-tests.sh, made as it makes it.
  if [ ! -x target/python-venv/bin/maturin ]; then
    [ -x target/python-venv/bin/python ] || /usr/bin/python3 -m venv --system-site-packages target/python-venv
    target/python-venv/bin/pip install --quiet --disable-pip-version-check "maturin>=1.5,<2"
  fi
  rm -rf target/python-release/wheels
  target/python-venv/bin/maturin build --quiet --release --strip -m crates/cudaipc-python/Cargo.toml \
    -i target/python-venv/bin/python --target-dir target/python-release -o target/python-release/wheels
fi
[ -f .gpu-host/gst-runtime.tgz ] || "$shared/make-runtime.sh" .gpu-host
"$shared/stage-build.sh" .gpu-host >/dev/null
# The benchmark (bench/) is staged as build/bench; its unit tests (bench-<hash>)
# need no GPU and stay here.
rm -f .gpu-host/build/bench-*
[ -x .gpu-host/build/bench ] || { echo "the benchmark's binary is missing from .gpu-host/build" >&2; exit 1; }
strip .gpu-host/build/* 2>/dev/null || true
cp /usr/lib/x86_64-linux-gnu/gstreamer-1.0/libgstvideoparsersbad.so .gpu-host/build/
for version in "${versions[@]}"; do
  nnn=${version/./}
  dir=.gpu-host$nnn
  # Made again when it lacks the Python with PyGObject (PYGI=1), which
  # tests/python/gpu_gst_app_check.py runs on (tar reads the whole listing:
  # grep -q would end it early, and pipefail would fail the test).
  if [ ! -f $dir/gst$nnn.tgz ] || ! tar tzf $dir/gst$nnn.tgz | grep '^root/python/bin/' >/dev/null; then
    NVRTC12=1 PYGI=1 scripts/gst-runtime/make-runtime.sh "$version" $dir
  fi
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
  # The cudaipc package for the runtime's Python (its wrap/python3-gi puts
  # $dir/python on sys.path).
  rm -rf $dir/python && python3 -m zipfile -e target/python-release/wheels/cudaipc-*.whl $dir/python
  du -sh $dir
done
du -sh .gpu-host
