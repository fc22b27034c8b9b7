#!/bin/bash
# The C API on a GPU (issue 42, item 5): builds examples/cpp/gpu_consumer.cu
# and gpu_producer.cu with nvcc against the staged libcudaipc.so
# (.gpu-host/build, from scripts/gpu-host/stage.sh) and the headers in
# crates/cudaipc-c/include, runs the pair on 4K RGB frames (the consumer's
# kernel checks every byte of every frame; exit 1 on a wrong, missed or
# missing one), then the driver-call census of that pair (census.sh's c-api
# path: 0 host synchronisations and 0 frame copies per frame in the
# consumer) when CUPTI and the GStreamer 1.26 runtime the census needs are
# staged.
# With --bench it then runs the benchmark's row 15c (examples/cpp/
# bench_consumer.cu against rscudaipcsrc ! fakesink, MPS off and on, on the
# staged 1.22 build).
# usage (repo root, GPU host): scripts/gpu-host/c-api.sh [FRAMES] [--bench]   (default 2000)
# environment: NVCC (default /usr/local/cuda/bin/nvcc), CAPI_BUILD (default
# /tmp/c-api), CENSUS_MAX_CALLS (the consumer's driver calls a frame the
# census allows; default here 16: it orders two streams a frame through
# events, each a record and a wait, beside the kernel launch).
set -euo pipefail
frames=2000 bench=0
for arg in "$@"; do
  case $arg in
    --bench) bench=1 ;;
    *[!0-9]* | "") echo "usage: $0 [FRAMES] [--bench]" >&2; exit 2 ;;
    *) frames=$arg ;;
  esac
done
nvcc=${NVCC:-/usr/local/cuda/bin/nvcc}
build=${CAPI_BUILD:-/tmp/c-api}
# Staged by stage.sh into each runtime's build (pack.sh 122 or 126 carries one).
lib=
for candidate in .gpu-host/build/libcudaipc.so .gpu-host126/build/libcudaipc.so; do
  if [ -f "$candidate" ]; then lib=$candidate; break; fi
done
[ -f scripts/gpu-host/c-api.sh ] || { echo "c-api: run it from the repository root" >&2; exit 2; }
[ -x "$nvcc" ] || { echo "c-api: no nvcc at $nvcc (set NVCC)" >&2; exit 2; }
[ -n "$lib" ] || { echo "c-api: libcudaipc.so is missing from .gpu-host/build and .gpu-host126/build: stage with scripts/gpu-host/stage.sh (and unpack the carry)" >&2; exit 2; }
mkdir -p "$build"
# The soname the programs load (libcudaipc.so.0) and the link name, beside
# them; the rpath finds them there.
cp "$lib" "$build/libcudaipc.so.0"
ln -sfn libcudaipc.so.0 "$build/libcudaipc.so"
for program in gpu_consumer gpu_producer bench_consumer; do
  "$nvcc" -std=c++17 -O3 -arch=native "examples/cpp/$program.cu" -I crates/cudaipc-c/include \
    -L"$build" -lcudaipc -Xlinker -rpath="$build" -o "$build/$program"
done
echo "c-api: built $build/gpu_consumer and $build/gpu_producer ($("$nvcc" --version | tail -1))"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1

channel=c-api-$$
pids=()
# Only the processes this script started, by pid.
stop_started() { for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done; }
trap stop_started EXIT
timeout 300 "$build/gpu_consumer" --channel $channel --frames "$frames" --timeout 60000 &
consumer=$!
pids=("$consumer")
sleep 0.3
producer_rc=0 consumer_rc=0
timeout 300 "$build/gpu_producer" --channel $channel --frames "$frames" || producer_rc=$?
wait "$consumer" || consumer_rc=$?
pids=()
echo "c-api: producer exit $producer_rc, consumer exit $consumer_rc"
[ $producer_rc = 0 ] && [ $consumer_rc = 0 ] || exit 1

if [ -f .gpu-host126/env126.sh ]; then
  echo "c-api: the driver-call census of the pair (census.sh, path c-api)"
  CAPI_BUILD=$build CENSUS_ONLY='^c-api$' CENSUS_MAX_CALLS=${CENSUS_MAX_CALLS:-16} \
    OUT=${OUT:-/tmp/census-c-api} scripts/gpu-host/census.sh
else
  echo "c-api: census not run: it needs the GStreamer 1.26 runtime (scripts/gpu-host/stage.sh --gst126)"
fi

if [ $bench = 1 ]; then
  echo "c-api: the benchmark's row 15c (C++ consumer against rscudaipcsrc ! fakesink), MPS off and on"
  # shellcheck source=/dev/null
  ( source .gpu-host/env.sh >/dev/null
    CUDAIPC_BENCH_CPP_CONSUMER=$build/bench_consumer timeout 200 .gpu-host/build/bench --rows 15c \
      --frames "${BENCH_FRAMES:-20000}" --mps both --out "${OUT:-/tmp/census-c-api}/bench15c" 2>&1 |
      grep -E "^\| *15c" | cut -c1-240 ) || true
fi
