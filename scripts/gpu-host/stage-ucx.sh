#!/bin/bash
# Stages a CUDA-enabled UCX for the GPU host into .gpu-host-ucx: the shared
# libraries of the libucx-cu12 wheel from PyPI (libucp, libucs, libuct,
# libucm, the CUDA transports in lib/ucx/, their bundled libcudart), one
# file per soname (the wheel's duplicate links and static archives left
# out), and ucx_perftest and ucx_info: 37 MB, 6.5 MB compressed.
# scripts/gpu-host/pack.sh carries it when staged; on the GPU host
# `source .gpu-carry/unpack.sh` unpacks it and .gpu-host-ucx/env.sh points
# the loader (LD_LIBRARY_PATH) and PATH at it, so that cudaipc-bridge and
# the bridge's tests load it instead of no UCX. Debian 12's UCX 1.13 has no
# CUDA transport.
# usage (repo root, this machine): scripts/gpu-host/stage-ucx.sh
set -euo pipefail
wheels=.cache/ucx-wheel
out=.gpu-host-ucx
mkdir -p $wheels
ls $wheels/libucx_cu12-*.whl >/dev/null 2>&1 ||
  python3 -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
    --python-version 3.12 --platform manylinux_2_28_x86_64 libucx-cu12 -d $wheels
wheel=$(ls $wheels/libucx_cu12-*.whl | tail -1)
unpacked=$(mktemp -d)
python3 -m zipfile -e "$wheel" "$unpacked"
rm -rf $out && mkdir -p $out/lib/ucx $out/bin
cp "$unpacked"/libucx/lib/*.so.0 $out/lib/
cp "$unpacked"/libucx/lib/ucx/*.so.0 $out/lib/ucx/
cp "$unpacked"/libucx_cu12.libs/* $out/lib/
cp "$unpacked"/libucx/bin/ucx_perftest "$unpacked"/libucx/bin/ucx_info $out/bin/
rm -rf "$unpacked"
# Sourced from the repo root on the GPU host.
cat > $out/env.sh <<'ENV'
export LD_LIBRARY_PATH=$PWD/.gpu-host-ucx/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PATH=$PWD/.gpu-host-ucx/bin:$PATH
# UCX looks for its transports beside libucs; said outright all the same.
export UCX_MODULE_DIR=$PWD/.gpu-host-ucx/lib/ucx
ENV
echo "staged $(basename "$wheel") into $out ($(du -sh $out | cut -f1))"
