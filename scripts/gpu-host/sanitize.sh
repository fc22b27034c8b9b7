#!/bin/bash
# compute-sanitizer over the plugin's GPU code on a GPU host, on the staged
# GStreamer 1.22 runtime (.gpu-host/env.sh), each gst-launch-1.0 process under
# its own compute-sanitizer:
#   memcheck   a producer (cudatestsrc, 1080p RGB, 120 frames, into
#              rscudaipcsink) and a consumer (rscudaipcsrc frames=every !
#              cudaprocess verify=true ! fakesink), both sanitized at once,
#              for ipc-mode=legacy and ipc-mode=fd;
#   racecheck, synccheck
#              the consumer sanitized, the producer plain (30 and 60 frames);
#   kernels    every kernel of the test elements in one process, under
#              memcheck and synccheck (racecheck: one frame at 322x242, as
#              every stream at once did not finish): both patterns of cudatestsrc
#              in every format, at 640x360 and 322x242 (strides not 16-byte
#              aligned, odd chroma widths), into each cudaprocess operation in
#              place and out of place (after a tee), with verify=true on intact
#              (counter) and on corrupt (gradient) frames, and the
#              system-memory path of cudatestsrc;
#   initcheck  the kernels run (one frame at 322x242), and the consumer at
#              320x240, 30 frames, with a producer that publishes on until it
#              took them (initcheck's consumer is slower than the producer's
#              bounded wait at the end of a stream), in at most 120 s each (a
#              run that does not finish in time is reported, not failed).
# A consumer passes only when its cudaprocess verified every frame the producer
# sent with none corrupt or missing (its final totals, GST_DEBUG=cudaprocess:5,
# and no cudaprocess-verify message); the kernels run only when each verifying
# element saw every frame, the counter ones none corrupt, the gradient ones all
# corrupt.
# Output: one line per sanitized process, "tool | process | mode | errors |
# result", then "sanitize: N runs, M failed"; exit status 1 if any failed,
# or if none ran (nothing staged here, no run in the parts asked for).
# Logs (sanitizer reports *.san, process output *.out) in LOGDIR.
# usage (repo root, GPU host, after scripts/gpu-host/stage.sh):
#   scripts/gpu-host/sanitize.sh [LOGDIR] [PART...]
# LOGDIR: default $OUT/logs/sanitize (OUT default /tmp/gpu-check); PART: memcheck,
# racecheck, synccheck, kernels, initcheck (default all, in that order);
# kernels-racecheck is the kernels' racecheck run alone.
# SANITIZE_MODES: ipc modes of the producer/consumer runs (default "legacy fd";
# initcheck runs the first). SANITIZE_INITCHECK_SECONDS: initcheck's bound (120).
# SANITIZE_OPTS: more compute-sanitizer options for every run (e.g.
# "--leak-check full"; a leak then counts as an error).
set -u
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=scripts/gpu-host/sanitize-lib.sh
source "$here/sanitize-lib.sh"
logdir=${1:-${OUT:-/tmp/gpu-check}/logs/sanitize}
[ $# -gt 0 ] && shift
parts=${*:-memcheck racecheck synccheck kernels initcheck}
modes=${SANITIZE_MODES:-legacy fd}
read -r -a sanitize_opts <<<"${SANITIZE_OPTS:-}"
kernels_racecheck() {
  local f
  for f in RGB RGBA BGRA RGBx BGRx GRAY8 NV12 I420; do kernels racecheck 120 1 322x242 "$f"; done
}

for part in $parts; do
  case $part in
    memcheck|racecheck|synccheck|kernels|kernels-racecheck|initcheck) ;;
    *) echo "sanitize: unknown part $part (memcheck racecheck synccheck kernels kernels-racecheck initcheck)" >&2; exit 2 ;;
  esac
done
mkdir -p "$logdir"

# nothing_run WHY: says so and fails (a sanitizer step that ran nothing
# must not pass).
nothing_run() {
  echo "sanitize: $1"
  echo "sanitize: 0 runs, 1 failed"
  exit 1
}
[ -f .gpu-host/env.sh ] || nothing_run ".gpu-host/env.sh is missing, so nothing is staged here: on the GPU host, unpack what was carried (source .gpu-carry/unpack.sh); on the build machine, stage it (scripts/gpu-host/stage.sh, then scripts/gpu-host/pack.sh)"
[ -d .gpu-host/build ] || nothing_run ".gpu-host/build is missing (the build is not unpacked): source .gpu-carry/unpack.sh on the GPU host"
sanitizer=$(find_sanitizer) || {
  echo "sanitize: compute-sanitizer not found: not on PATH, not in /usr/local/cuda/bin," \
    "/usr/local/cuda/compute-sanitizer or /usr/local/cuda-*/bin (install the CUDA toolkit's compute-sanitizer)"
  echo "sanitize: 0 runs, 1 failed"
  exit 1
}
source .gpu-host/env.sh || nothing_run "sourcing .gpu-host/env.sh failed"
# The runtime's LD_LIBRARY_PATH applies to compute-sanitizer too.
if ! version=$("$sanitizer" --version 2>&1); then
  echo "sanitize: $sanitizer --version fails with the runtime's environment (.gpu-host/env.sh):"
  echo "$version" | tail -3
  echo "sanitize: 0 runs, 1 failed"
  exit 1
fi
echo "$sanitizer: $(echo "$version" | grep -i version | tail -1)"
export GST_DEBUG_NO_COLOR=1 GST_DEBUG=2,cudaprocess:5
# A critical of GLib or GStreamer aborts the process (the run fails).
export G_DEBUG=${G_DEBUG:+$G_DEBUG,}fatal-criticals
# The registry is brought up to date here, outside the sanitizer, and not
# scanned again: no gst-plugin-scanner child under it.
if ! gst-inspect-1.0 cudatestsrc >/dev/null 2>&1 || ! gst-inspect-1.0 rscudaipcsink >/dev/null 2>&1; then
  echo "sanitize: the staged plugin is not found (gst-inspect-1.0 cudatestsrc, rscudaipcsink): run scripts/gpu-host/stage.sh"
  echo "sanitize: 0 runs, 1 failed"
  exit 1
fi
export GST_REGISTRY_UPDATE=no

started=()
cleanup() {
  local pid
  for pid in "${started[@]}"; do kill -KILL -- "-$pid" 2>/dev/null; done
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# start NAME LIMIT CMD...: CMD in its own session (process group), at most
# LIMIT seconds, output in $logdir/NAME.out; its pid in $last_pid.
start() {
  local name=$1 limit=$2
  shift 2
  setsid timeout -k 10 "$limit" "$@" >"$logdir/$name.out" 2>&1 &
  last_pid=$!
  started+=("$last_pid")
}
# finish PID: waits for it, ends what is left of its group; its status in $rc.
finish() {
  local pid left=()
  wait "$1"
  rc=$?
  kill -KILL -- "-$1" 2>/dev/null
  for pid in "${started[@]}"; do [ "$pid" = "$1" ] || left+=("$pid"); done
  started=("${left[@]}")
}
# san TOOL NAME: the compute-sanitizer command line in ${san[@]} (none for
# TOOL "plain").
san() {
  san=()
  [ "$1" = plain ] && return
  san=("$sanitizer" --tool "$1" --target-processes all --error-exitcode 99 --print-limit 100
    --log-file "$logdir/$2.san" "${sanitize_opts[@]}")
}

# ipc TOOL MODE FRAMES WIDTHxHEIGHT LIMIT [outlive]: a consumer under TOOL and
# a producer (under TOOL too for memcheck, else plain) on one channel of MODE.
# With "outlive" the producer publishes on until the consumer took FRAMES
# (num-buffers on the source) and is then stopped: a consumer slower than the
# producer's bounded wait at the end of its stream (initcheck's is) still
# reads live slots.
ipc() {
  local tool=$1 mode=$2 frames=$3 size=$4 limit=$5 outlive=${6:-}
  local id=$tool-$mode ch=sanitize-$$-$tool-$mode ptool=plain cpid ppid crc prc
  local produced=$frames consumer_limit=()
  if [ -n "$outlive" ]; then
    produced=$((frames * 1000)) consumer_limit=(num-buffers="$frames")
  fi
  local caps="video/x-raw(memory:CUDAMemory),format=RGB,width=${size%x*},height=${size#*x}"
  [ "$tool" = memcheck ] && ptool=memcheck
  # The consumer first: it waits for the producer. The producer publishes once
  # it is attached (wait-for-connection=1), and is at most 4 frames ahead
  # (slots=4), so that its wait at the end of the stream (5 s) covers the
  # sanitized consumer's last frames.
  san "$tool" "$id-consumer"
  start "$id-consumer" "$limit" "${san[@]}" gst-launch-1.0 -m \
    rscudaipcsrc channel="$ch" ipc-mode="$mode" frames=every connect-timeout=120000 "${consumer_limit[@]}" \
    ! cudaprocess name=verify verify=true ! fakesink
  cpid=$last_pid
  san "$ptool" "$id-producer"
  start "$id-producer" "$limit" "${san[@]}" gst-launch-1.0 \
    cudatestsrc num-buffers="$produced" ! "$caps" \
    ! rscudaipcsink channel="$ch" transport=cuda ipc-mode="$mode" slots=4 wait-for-connection=1 sync=false
  ppid=$last_pid
  finish "$cpid"; crc=$rc
  [ -n "$outlive" ] && kill -INT "$ppid" 2>/dev/null
  finish "$ppid"; prc=$rc
  [ -n "$outlive" ] && prc=0
  if [ "$ptool" = memcheck ]; then
    judge memcheck producer "$mode" "$prc" "$limit" "$logdir/$id-producer.san" "$logdir/$id-producer.out"
  fi
  local extra=
  [ "$ptool" = plain ] && [ "$prc" != 0 ] && extra="the producer (not sanitized) exited $prc ($id-producer.out)"
  judge "$tool" consumer "$mode" "$crc" "$limit" "$logdir/$id-consumer.san" "$logdir/$id-consumer.out" \
    "consumer $frames" "$extra"
}

# kernels TOOL LIMIT [FRAMES [SIZES [FORMATS]]]: every kernel of cudatestsrc
# and cudaprocess in one process (of those formats).
kernels() {
  local tool=$1 limit=$2 frames=${3:-3} sizes=${4:-} formats=${5:-}
  local id=$tool-kernels${formats:+-${formats// /-}}
  kernel_pipeline "$frames" "${sizes:-640x360 322x242}" "${formats:-RGB RGBA BGRA RGBx BGRx GRAY8 NV12 I420}"
  san "$tool" "$id"
  start "$id" "$limit" "${san[@]}" gst-launch-1.0 -m "${kp[@]}"
  finish "$last_pid"
  judge "$tool" kernels "${formats:--}" "$rc" "$limit" "$logdir/$id.san" "$logdir/$id.out" \
    "kernels $frames $kp_ok $kp_bad"
}

for part in $parts; do
  case $part in
    memcheck) for m in $modes; do ipc memcheck "$m" 120 1920x1080 180; done ;;
    racecheck) for m in $modes; do ipc racecheck "$m" 30 1920x1080 150; done ;;
    synccheck) for m in $modes; do ipc synccheck "$m" 60 1920x1080 150; done ;;
    # racecheck over every stream at once lost track of launches and did not
    # finish in 240 s, even with one frame at the small size (H100,
    # 2026-11-28): one process per format.
    kernels) for t in memcheck synccheck; do kernels "$t" 180; done
             kernels_racecheck ;;
    kernels-racecheck) kernels_racecheck ;;
    initcheck) kernels initcheck "${SANITIZE_INITCHECK_SECONDS:-120}" 1 322x242
               ipc initcheck "${modes%% *}" 30 320x240 "${SANITIZE_INITCHECK_SECONDS:-120}" outlive ;;
  esac
done
echo "sanitize: $runs runs, $failed failed (logs in $logdir)"
if [ "$runs" = 0 ]; then
  echo "sanitize: FAILED: no run was made (parts: $parts; SANITIZE_MODES: '$modes')"
  exit 1
fi
[ "$failed" = 0 ]
