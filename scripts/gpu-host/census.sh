#!/bin/bash
# The driver-call census (docs/performance.md, "Driver calls per frame"):
# counts the CUDA driver API calls each process of a pair makes per frame,
# to show 0 host synchronisations and 0 frame copies per frame on the
# zero-copy paths. Each process runs under CUPTI's callback API, injected
# with CUDA_INJECTION64_PATH (scripts/gpu-host/census/census.c: the plugin
# loads libcuda with dlopen, which LD_PRELOAD could miss). Every path runs
# twice, N and 2N frames; per frame is (count(2N) - count(N)) / N, which
# cancels start-up and teardown (contexts, imports, kernels compiled).
#
# usage (repo root, GPU host, after scripts/gpu-host/stage.sh --gst126):
#   scripts/gpu-host/census.sh [--quick]
#     --quick: only the legacy channel, MPS off, gst-launch-1.0 consumer
# environment: CENSUS_FRAMES (N, default 300); CENSUS_COPY_MIN_BYTES (a copy
# of this many bytes or more is frame-sized, default 1048576); CENSUS_ONLY (a
# regular expression: only the paths whose names match, e.g. 'fd|upstream');
# CAPI_BUILD (where scripts/gpu-host/c-api.sh built the C API's GPU
# examples, default /tmp/c-api); CENSUS_PYTHON (the Python of the Python consumer, with PyTorch or CuPy;
# default: python3 on PATH); CUPTI_ROOT (a folder with CUPTI's include/ and
# lib64/ or lib/, where the toolkit's is elsewhere); OUT (default /tmp/census:
# the table, table.md, and the raw reports and logs under census-raw/).
#
# Asserted on every zero-copy path, each process (exit 1 naming the path and
# the count when one fails): no host synchronisation (cuStreamSynchronize,
# cuCtxSynchronize, cuEventSynchronize) and no frame-sized copy per frame
# (at most CENSUS_SLACK=2 more in the 2N run than in the N run: the frames in
# flight at the end of a stream vary; a per-frame one makes N more), at most
# one query (cuStreamQuery, cuEventQuery) a frame (the consumer asks once
# whether its reads are done; a polling loop makes more), and at most
# CENSUS_MAX_CALLS (10) driver calls a frame, CENSUS_MAX_CALLS_PYTHON (60)
# for the Python consumer, whose process counts PyTorch's calls too. The other paths sync or
# copy by design: measured, printed, marked "expected" with the reason.
# Exit 2: something to run it with is missing (CUPTI, gcc, the staged
# runtime), said on stderr.
set -u



usage() { echo "usage: $0 [--quick]" >&2; exit 2; }
quick=0
case ${1:-} in
  --quick) quick=1 ;;
  "") ;;
  *) usage ;;
esac
frames=${CENSUS_FRAMES:-300}
case $frames in ''|*[!0-9]*|0) echo "census: CENSUS_FRAMES must be a positive number" >&2; exit 2 ;; esac
only=${CENSUS_ONLY:-}
out=${OUT:-/tmp/census}
raw=$out/census-raw
here=$(cd "$(dirname "$0")" && pwd)
PROCESS_TIMEOUT=60
WIDTH=3840 HEIGHT=2160

[ -f scripts/gpu-host/census.sh ] || { echo "census: run it from the repository root" >&2; exit 2; }
[ -f .gpu-host126/env126.sh ] || {
  echo "census: .gpu-host126/env126.sh is missing: stage the GStreamer 1.26 runtime here with scripts/gpu-host/stage.sh --gst126" >&2
  exit 2
}
python=${CENSUS_PYTHON:-$(command -v python3 || true)}
[ -n "$python" ] || { echo "census: python3 is missing (the table is made by scripts/gpu-host/census/report.py)" >&2; exit 2; }
command -v gcc >/dev/null || { echo "census: gcc is missing (it builds scripts/gpu-host/census/census.c)" >&2; exit 2; }

# --- CUPTI and cuda.h -------------------------------------------------------
cupti_inc='' cupti_lib=''
roots=()
[ -n "${CUPTI_ROOT:-}" ] && roots+=("$CUPTI_ROOT")
[ -n "${CUDA_HOME:-}" ] && roots+=("$CUDA_HOME/extras/CUPTI" "$CUDA_HOME/targets/x86_64-linux")
roots+=(/usr/local/cuda/extras/CUPTI /usr/local/cuda/targets/x86_64-linux)
# Versioned toolkits, newest first.
versioned=$(printf '%s\n' /usr/local/cuda-* | sort -rV)
for d in $versioned; do
  [ -d "$d" ] && roots+=("$d/extras/CUPTI" "$d/targets/x86_64-linux")
done
roots+=(/usr)
# The wheel of `pip install nvidia-cuda-cupti` (nvidia/cu13) or of the CUDA 12
# one (nvidia/cuda_cupti), as a last resort.
for d in $("$python" -c 'import nvidia, sys; print("\n".join(nvidia.__path__))' 2>/dev/null); do
  roots+=("$d/cu13" "$d/cuda_cupti")
done
for root in "${roots[@]}"; do
  if ! [ -f "$root/include/cupti.h" ] || ! [ -f "$root/include/generated_cuda_meta.h" ]; then continue; fi
  for libdir in "$root/lib64" "$root/lib" "$root/lib/x86_64-linux-gnu"; do
    for lib in "$libdir"/libcupti.so "$libdir"/libcupti.so.[0-9]*; do
      if [ -f "$lib" ]; then cupti_inc=$root/include cupti_lib=$lib; break 3; fi
    done
  done
done
if [ -z "$cupti_lib" ]; then
  {
    echo "census: CUPTI is missing: found no include/cupti.h with include/generated_cuda_meta.h and a lib64/ (or lib/) with libcupti.so under:"
    printf '  %s\n' "${roots[@]}"
    echo "It is the CUDA toolkit's extras/CUPTI (Debian/Ubuntu: cuda-cupti-dev-13-0), or the wheel of"
    echo "'pip install nvidia-cuda-cupti' (this host has no network: bring the wheel, unzip it, and set"
    echo "CUPTI_ROOT to its nvidia/cu13 folder)."
  } >&2
  exit 2
fi
cuda_inc=
for d in "$cupti_inc" ${CUDA_HOME:+"$CUDA_HOME/include"} /usr/local/cuda/include /usr/local/cuda/targets/x86_64-linux/include \
    $(for v in $versioned; do echo "$v/targets/x86_64-linux/include"; done) /usr/include; do
  if [ -f "$d/cuda.h" ] && [ -f "$d/crt/host_defines.h" ]; then cuda_inc=$d; break; fi
done
[ -n "$cuda_inc" ] || {
  echo "census: cuda.h (with crt/host_defines.h) is missing: looked beside CUPTI ($cupti_inc), in /usr/local/cuda/include and /usr/include; it is the CUDA toolkit's include/ (cuda-cudart-dev-13-0, cuda-crt-13-0)" >&2
  exit 2
}
build=/tmp/census-lib
mkdir -p "$build"
lib=$build/libcensus.so
if ! gcc -std=c99 -O2 -Wall -Wextra -shared -fPIC -I"$cupti_inc" -I"$cuda_inc" "$here/census/census.c" \
    "$cupti_lib" -Wl,-rpath,"$(dirname "$cupti_lib")" -o "$lib"; then
  echo "census: building census.c against $cupti_inc failed" >&2
  exit 2
fi
echo "census: $lib (CUPTI $cupti_lib)"

# --- GStreamer 1.26 -----------------------------------------------------------
# shellcheck source=/dev/null
source .gpu-host126/env126.sh >/dev/null || { echo "census: sourcing .gpu-host126/env126.sh failed" >&2; exit 2; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
# The registry is made now, outside the census: a run that scanned plugins
# would not cancel against one that did not.
gst-inspect-1.0 rscudaipcsink >/dev/null 2>&1 || {
  echo "census: gst-inspect-1.0 finds no rscudaipcsink (GST_PLUGIN_PATH=${GST_PLUGIN_PATH:-}): stage with scripts/gpu-host/stage.sh --gst126" >&2
  exit 2
}
rm -rf "$raw" && mkdir -p "$raw"
paths=$raw/paths.tsv
: >"$paths"

pids=()
mps_pipe='' mps_log=''
# shellcheck disable=SC2317 # the EXIT trap's
cleanup() {
  for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null; done
  stop_mps
}
trap cleanup EXIT

# start DIR LOG CMD...: CMD in the background under the census, its report
# into DIR, its output into LOG; its pid in $started.
start() {
  local dir=$1 log=$2
  shift 2
  mkdir -p "$dir"
  CUDA_INJECTION64_PATH=$lib CUDAIPC_CENSUS_DIR=$dir timeout "$PROCESS_TIMEOUT" "$@" >"$log" 2>&1 &
  started=$!
  pids+=("$started")
}

# finish PID GRACE [PARTNER]: waits for PID; past GRACE seconds (5 once
# PARTNER, the other process of the pair, is gone) it gets SIGINT (a
# gst-launch-1.0 and a Python stop cleanly on it and write their report),
# 5 s later SIGKILL. Its exit status in $rc.
finish() {
  local pid=$1 grace=$2 partner=${3:-} i left
  left=$((grace * 10))
  for ((i = 0; i < left; i++)); do
    kill -0 "$pid" 2>/dev/null || break
    if [ -n "$partner" ] && ! kill -0 "$partner" 2>/dev/null && [ $left -gt $((i + 50)) ]; then
      left=$((i + 50))
    fi
    sleep 0.1
  done
  if kill -0 "$pid" 2>/dev/null; then
    kill -INT "$pid" 2>/dev/null
    for ((i = 0; i < 50; i++)); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    kill -KILL "$pid" 2>/dev/null
  fi
  wait "$pid"
  rc=$?
  # Waited for: its pid is no longer ours to signal.
  local kept=() q
  for q in "${pids[@]}"; do [ "$q" = "$pid" ] || kept+=("$q"); done
  pids=("${kept[@]}")
}

# pair NAME N PRODUCER CONSUMER [GRACE]: one run of N frames. PRODUCER is a
# gst-launch-1.0 pipeline; CONSUMER one, or "python ARGS" for
# census/python_consumer.py. @CH@ is the run's channel (or socket), @N@ the
# frames. The consumer starts first and waits for the producer; GRACE: the
# seconds the consumer may take after the producer's end (default 30).
# Appends its failure, if any, to $status.
pair() {
  local name=$1 n=$2 producer=$3 consumer=$4 grace=${5:-30}
  local dir=$raw/$name/$n ch="census-$name-$n-$$" c p
  producer=${producer//@CH@/$ch} producer=${producer//@N@/$n}
  consumer=${consumer//@CH@/$ch} consumer=${consumer//@N@/$n}
  mkdir -p "$dir"
  echo "$producer" >"$dir/producer.cmd"
  echo "$consumer" >"$dir/consumer.cmd"
  set -f
  # shellcheck disable=SC2086 # pipelines are words
  case $consumer in
    python\ *) PYTHONPATH=$PWD/.gpu-host126/python${PYTHONPATH:+:$PYTHONPATH} \
                 start "$dir/consumer" "$dir/consumer.log" "$python" "$here/census/python_consumer.py" ${consumer#python } ;;
    exec\ *) start "$dir/consumer" "$dir/consumer.log" ${consumer#exec } ;;
    *) start "$dir/consumer" "$dir/consumer.log" gst-launch-1.0 -q $consumer ;;
  esac
  c=$started
  sleep 0.3
  # shellcheck disable=SC2086
  case $producer in
    exec\ *) start "$dir/producer" "$dir/producer.log" ${producer#exec } ;;
    *) start "$dir/producer" "$dir/producer.log" gst-launch-1.0 -q $producer ;;
  esac
  p=$started
  set +f
  finish "$p" "$PROCESS_TIMEOUT" "$c"
  if [ "$rc" != 0 ]; then
    status+="producer of $n frames exited $rc; "
    tail -n 3 "$dir/producer.log" | sed 's/^/   producer: /'
  fi
  finish "$c" "$grace"
  local crc=$rc
  if [ "$crc" != 0 ]; then
    status+="consumer of $n frames exited $crc; "
    tail -n 3 "$dir/consumer.log" | sed 's/^/   consumer: /'
  fi
}

# path NAME ASSERTED LABEL NOTE PRODUCER CONSUMER [GRACE]: N and 2N frames.
path() {
  local name=$1 asserted=$2 label=$3 note=$4
  if [ -n "$only" ] && ! [[ $name =~ $only ]]; then return; fi
  status=
  echo "== $name: $label"
  pair "$name" "$frames" "$5" "$6" "${7:-30}"
  pair "$name" $((2 * frames)) "$5" "$6" "${7:-30}"
  [ -z "$status" ] || status="run failed: ${status}logs in $raw/$name"
  printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$name" "$asserted" "$label" "$note" "${PROCESSES:-producer,consumer}" "${status:-ok}" >>"$paths"
  [ -z "$status" ] || echo "   $status"
}

skipped() { # NAME ASSERTED LABEL WHY: a path that could not run
  if [ -n "$only" ] && ! [[ $1 =~ $only ]]; then return; fi
  printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "" producer,consumer "not run: $4" >>"$paths"
  echo "== $1: not run: $4"
}

start_mps() {
  mps_pipe=$(mktemp -d) mps_log=$(mktemp -d)
  export CUDA_MPS_PIPE_DIRECTORY=$mps_pipe CUDA_MPS_LOG_DIRECTORY=$mps_log
  if ! nvidia-cuda-mps-control -d; then
    unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
    rm -rf "$mps_pipe" "$mps_log"
    mps_pipe=
    return 1
  fi
  sleep 0.5
}

stop_mps() {
  [ -n "$mps_pipe" ] || return 0
  echo quit | CUDA_MPS_PIPE_DIRECTORY=$mps_pipe nvidia-cuda-mps-control >/dev/null 2>&1
  sleep 0.3
  rm -rf "$mps_pipe" "$mps_log"
  mps_pipe=
  unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
}

caps="video/x-raw(memory:CUDAMemory),format=RGB,width=$WIDTH,height=$HEIGHT"
# wait-for-connection=1: the first frame waits for the consumer, so both runs
# carry every frame. enable-last-sample=false: a fakesink keeping its last
# buffer holds a slot, and with MPS (a ring of 2) the source then copies
# frames by design (docs/elements.md; measured below as its own path).
sink="fakesink sync=false enable-last-sample=false"

# zero-copy paths, asserted: MODE MPS-SUFFIX MPS-LABEL
zero_copy() {
  local mode=$1 suffix=$2 mps=$3
  path "$mode-gst$suffix" 1 "$mode channel, $mps, gst-launch-1.0 consumer" "" \
    "cudatestsrc num-buffers=@N@ ! $caps ! rscudaipcsink channel=@CH@ ipc-mode=$mode wait-for-connection=1 sync=false" \
    "rscudaipcsrc channel=@CH@ ipc-mode=$mode frames=every connect-timeout=60000 ! $sink"
  [ $quick = 1 ] && return
  path "$mode-python$suffix" 1 "$mode channel, $mps, Python consumer (cudaipc, DLPack)" "" \
    "cudatestsrc num-buffers=@N@ ! $caps ! rscudaipcsink channel=@CH@ ipc-mode=$mode wait-for-connection=1 sync=false" \
    "python --channel @CH@ --ipc-mode $mode --expect @N@"
}

zero_copy legacy "" "MPS off"
if [ $quick = 0 ]; then
  # The C API's consumer (examples/cpp/gpu_consumer.cu: a kernel checks each
  # frame on its own stream, ordered with cudaipc_frame_stream_wait and
  # cudaipc_frame_release_after_stream) fed by its GPU producer; built by
  # scripts/gpu-host/c-api.sh into $CAPI_BUILD. The consumer is asserted; the
  # producer's loans are the Rust API's, measured by the paths above.
  capi=${CAPI_BUILD:-/tmp/c-api}
  if [ -x "$capi/gpu_consumer" ] && [ -x "$capi/gpu_producer" ]; then
    PROCESSES=consumer path c-api 1 "C API: C++ consumer (cudaipc.hpp, a verifying kernel), C++ GPU producer, MPS off" "" \
      "exec $capi/gpu_producer --channel @CH@ --frames @N@" \
      "exec $capi/gpu_consumer --channel @CH@ --frames @N@ --timeout 60000"
  else
    skipped c-api 1 "C API: C++ consumer" "not built: run scripts/gpu-host/c-api.sh"
  fi
  zero_copy fd "" "MPS off"

  # Measured, expected to sync or copy.
  path host-transport 0 "transport=host, MPS off" \
    "the producer downloads each frame into shared host memory (a device-to-host copy)" \
    "cudatestsrc num-buffers=@N@ ! $caps ! rscudaipcsink channel=@CH@ transport=host wait-for-connection=1 sync=false" \
    "rscudaipcsrc channel=@CH@ frames=every connect-timeout=60000 ! $sink"
  # A conversion, so that videoconvert reads the frame (RGB to RGB would
  # pass it through unread, and nothing would be downloaded).
  path system-memory-out 0 "system memory out (rscudaipcsrc ! videoconvert to BGRx), MPS off" \
    "the consumer downloads each frame (a device-to-host copy)" \
    "cudatestsrc num-buffers=@N@ ! $caps ! rscudaipcsink channel=@CH@ wait-for-connection=1 sync=false" \
    "rscudaipcsrc channel=@CH@ frames=every connect-timeout=60000 ! videoconvert ! video/x-raw,format=BGRx ! $sink"
  # Paced at 500 frames a second (sync=true) so that the consumer takes
  # (nearly) every frame; figures per frame produced.
  path latest 0 "frames=latest, producer paced at 500 fps, MPS off" \
    "the consumer copies each frame it takes out of its slot (one device-to-device copy); per frame produced" \
    "cudatestsrc num-buffers=@N@ ! video/x-raw(memory:CUDAMemory),format=RGB,width=$WIDTH,height=$HEIGHT,framerate=500/1 ! rscudaipcsink channel=@CH@ wait-for-connection=1 sync=true" \
    "rscudaipcsrc channel=@CH@ frames=latest connect-timeout=60000 ! $sink"

  # Upstream's pair (nvcodec): must be GStreamer's own, not shadowed by ours.
  upstream=$(gst-inspect-1.0 cudaipcsink 2>/dev/null | awk '/Plugin Details/ { p = 1 } p && $1 == "Name" { print $2; exit }')
  case $upstream in
    nvcodec)
      # videotestsrc pattern=black: the CPU fills 4K frames fast enough.
      # Upstream's sink does not wait for a consumer, and its source may
      # miss the first frames: figures per frame produced.
      path upstream 0 "upstream's cudaipcsink/cudaipcsrc io-mode=import (nvcodec), MPS off" \
        "videotestsrc ! cudaupload uploads each frame (a host-to-device copy); per frame produced" \
        "videotestsrc num-buffers=@N@ pattern=black ! video/x-raw,format=RGB,width=$WIDTH,height=$HEIGHT ! cudaupload ! cudaipcsink address=/tmp/@CH@.sock sync=false" \
        "cudaipcsrc address=/tmp/@CH@.sock io-mode=import connection-timeout=60 ! $sink" 15 ;;
    "")
      skipped upstream 0 "upstream's cudaipcsink/cudaipcsrc (nvcodec)" "no cudaipcsink here (GStreamer's needs nvcodec and a CUDA device)" ;;
    *)
      # Asserted: ours must never take GStreamer's names where it has its own.
      skipped upstream 1 "upstream's cudaipcsink/cudaipcsrc (nvcodec)" "cudaipcsink is plugin $upstream's, not nvcodec's: GStreamer's own is shadowed (docs/troubleshooting.md, names)" ;;
  esac

  # MPS on.
  if start_mps; then
    zero_copy legacy -mps "MPS on"
    zero_copy fd -mps "MPS on"
    path last-sample-mps 0 "legacy channel, MPS on, fakesink keeping its last sample" \
      "with MPS the ring has 2 slots; the sink's last sample holds one, so the source copies each frame (docs/elements.md)" \
      "cudatestsrc num-buffers=@N@ ! $caps ! rscudaipcsink channel=@CH@ wait-for-connection=1 sync=false" \
      "rscudaipcsrc channel=@CH@ frames=every connect-timeout=60000 ! fakesink sync=false"
    stop_mps
  else
    for mode in legacy fd; do
      for consumer in gst python; do
        skipped "$mode-$consumer-mps" 1 "$mode channel, MPS on, $consumer consumer" "the MPS daemon did not start (nvidia-cuda-mps-control -d)"
      done
    done
  fi
fi

echo
echo "== driver calls per frame: N=$frames and 2N frames, (count(2N) - count(N)) / N; $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)"
"$python" "$here/census/report.py" "$raw" "$frames" "$paths" "$out/table.md"
result=$?
echo "census: table in $out/table.md, reports and logs under $raw"
exit $result
