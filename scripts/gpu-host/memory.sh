#!/bin/bash
# Device memory per process (docs/performance.md, "Memory per process"):
# each process of a 4K@30 RGB pair, read from nvidia-smi
# --query-compute-apps while they run, beside what splits it: a bare
# context (scripts/gpu-host/context-count.c, no GStreamer), a context of
# GStreamer's CUDA library (cudaupload), and a consumer that loads no
# kernel (rscudaipcsrc ! fakesink; the verifying one less it: the modules).
# Each case runs with the context's stack reservation trimmed (the
# default) and kept at the driver's default (CUDAIPC_KEEP_CONTEXT_LIMITS=1),
# on a legacy and a descriptor channel, MPS off; then MPS on.
# usage (repo root, GPU host, after scripts/gpu-host/stage.sh --gst126):
#   scripts/gpu-host/memory.sh
set -u
# shellcheck source=/dev/null
source .gpu-host126/env126.sh >/dev/null || { echo "memory: sourcing .gpu-host126/env126.sh failed" >&2; exit 2; }
caps="video/x-raw(memory:CUDAMemory),format=RGB,width=3840,height=2160,framerate=30/1"
pids=()
bare=$(mktemp -d)/context-count
nvcc -o "$bare" scripts/gpu-host/context-count.c -lcuda 2>/dev/null || bare=
# mib PID: the device memory of PID in MiB, or "-".
mib() {
  nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits |
    awk -F', *' -v p="$1" '$1 == p { print $2; found = 1 } END { if (!found) print "-" }'
}
stop_all() {
  local p
  for p in "${pids[@]}"; do kill -INT "$p" 2>/dev/null; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
  pids=()
}
# measure LABEL ENV...: a context-only process, a producer and a verifying
# consumer, each process's MiB after 4 s.
measure() {
  local label=$1 ipc=$2 ch="mem-$$-$RANDOM" ref prod cons plain ctx=-
  shift 2
  if [ -n "$bare" ]; then env "$@" "$bare" 8 >/dev/null 2>&1 & ctx=$!; pids+=("$ctx"); fi
  env "$@" gst-launch-1.0 -q videotestsrc is-live=true ! video/x-raw,width=64,height=48 ! cudaupload ! fakesink >/dev/null 2>&1 &
  ref=$!; pids+=("$ref")
  env "$@" gst-launch-1.0 -q cudatestsrc is-live=true ! "$caps" ! rscudaipcsink channel="$ch" ipc-mode="$ipc" >/dev/null 2>&1 &
  prod=$!; pids+=("$prod")
  sleep 1
  env "$@" gst-launch-1.0 -q rscudaipcsrc channel="$ch" ipc-mode="$ipc" ! cudaprocess verify=true ! fakesink >/dev/null 2>&1 &
  cons=$!; pids+=("$cons")
  env "$@" gst-launch-1.0 -q rscudaipcsrc channel="$ch" ipc-mode="$ipc" ! fakesink >/dev/null 2>&1 &
  plain=$!; pids+=("$plain")
  sleep 4
  printf '| %s | %s | %s | %s | %s | %s | %s |\n' "$label" "$ipc" "$(mib $ctx)" "$(mib $ref)" \
    "$(mib $prod)" "$(mib $plain)" "$(mib $cons)"
  stop_all
}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
for mps in off on; do
  if [ $mps = on ]; then
    export CUDA_MPS_PIPE_DIRECTORY=/tmp/mem-mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mem-mps-log
    mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
    nvidia-cuda-mps-control -d || { echo "memory: MPS did not start"; break; }
  fi
  echo "MPS $mps: MiB per process (nvidia-smi used_memory)"
  echo "| case | channel | bare context | GStreamer CUDA context (cudaupload) | producer | consumer, no kernel | verifying consumer |"
  echo "|---|---|---|---|---|---|---|"
  for ipc in legacy fd; do
    measure "trimmed (default)" $ipc
    measure "driver default" $ipc CUDAIPC_KEEP_CONTEXT_LIMITS=1
  done
  measure "trimmed, CUDA_DEVICE_MAX_CONNECTIONS=1" legacy CUDA_DEVICE_MAX_CONNECTIONS=1
  [ $mps = on ] && echo quit | nvidia-cuda-mps-control
done
