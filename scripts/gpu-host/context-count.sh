#!/bin/bash
# How many processes can hold a CUDA context on the GPU at once, with
# CUDA's default of 8 connections a context and with fewer
# (CUDA_DEVICE_MAX_CONNECTIONS). Processes start one after another, each
# once the last holds its context, until one fails, MAX hold theirs or 60 s
# pass; then every process started here is stopped, by pid.
# usage (repo root, GPU host with nvcc): scripts/gpu-host/context-count.sh [MAX]
# (docs/performance.md, "Streams per GPU")
set -u
max=${1:-200}
probe=$(mktemp -d)/context-count
nvcc -o "$probe" scripts/gpu-host/context-count.c -lcuda || exit 1
# count LABEL [ENV=VALUE...]
count() {
  local label=$1 dir held=0 end="reached $max" pids=() i w
  shift
  dir=$(mktemp -d)
  SECONDS=0
  for i in $(seq "$max"); do
    [ $SECONDS -lt 60 ] || { end="stopped at 60 s"; break; }
    env "$@" "$probe" 300 > "$dir/$i" 2>&1 & pids+=($!)
    for w in $(seq 100); do [ -s "$dir/$i" ] && break; sleep 0.1; done
    if grep -q '^ok' "$dir/$i"; then held=$i; else end="then: $(head -c 200 "$dir/$i")"; [ -s "$dir/$i" ] || end="then: no answer in 10 s"; break; fi
  done
  echo "$label: $held contexts held at once ($end) after $SECONDS s; device memory used $(nvidia-smi --query-gpu=memory.used --format=csv,noheader)"
  kill "${pids[@]}" 2>/dev/null
  wait "${pids[@]}" 2>/dev/null
  rm -rf "$dir"
}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
count "CUDA's default (8 connections)"
count "CUDA_DEVICE_MAX_CONNECTIONS=1" CUDA_DEVICE_MAX_CONNECTIONS=1
count "CUDA_DEVICE_MAX_CONNECTIONS=2" CUDA_DEVICE_MAX_CONNECTIONS=2
