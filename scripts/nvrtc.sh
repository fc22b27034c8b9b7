#!/bin/bash
# Source this: fetches NVRTC from PyPI's nvidia-cuda-nvrtc-cu12 wheel (no GPU
# or CUDA toolkit needed) into .cache/nvrtc and points the plugin at it, so
# that every kernel can be compiled to PTX on a machine without a GPU.
nvrtc_dir="$(pwd)/.cache/nvrtc"
if ! ls "$nvrtc_dir"/nvidia/cuda_nvrtc/lib/libnvrtc.so.12 >/dev/null 2>&1; then
  mkdir -p "$nvrtc_dir"
  python3 -m pip download --quiet --no-deps --only-binary=:all: --platform manylinux2014_x86_64 \
    -d "$nvrtc_dir/wheel" "nvidia-cuda-nvrtc-cu12>=12.4,<13" &&
    python3 -c 'import sys, zipfile, glob; zipfile.ZipFile(glob.glob(sys.argv[1] + "/wheel/*.whl")[0]).extractall(sys.argv[1])' "$nvrtc_dir"
fi
if ls "$nvrtc_dir"/nvidia/cuda_nvrtc/lib/libnvrtc.so.12 >/dev/null 2>&1; then
  export CUDAIPC_NVRTC_LIB="$nvrtc_dir/nvidia/cuda_nvrtc/lib/libnvrtc.so.12"
  export LD_LIBRARY_PATH="$nvrtc_dir/nvidia/cuda_nvrtc/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  echo "NVRTC: $CUDAIPC_NVRTC_LIB"
else
  echo "NVRTC could not be fetched: kernel compilation tests will fail" >&2
fi
