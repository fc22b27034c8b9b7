#!/bin/bash
# SPDX-License-Identifier: MPL-2.0
# One live channel, three consumers, each at its own pace: a camera
# (videotestsrc is-live=true, 30 frames a second whatever its consumers do),
# a recorder that needs every frame (frames=every: the camera waits for it),
# a viewer that wants the newest frame (frames=latest: never holds the
# camera back), and examples/python/batching_consumer.py, batches of 8 at
# its own pace (frames='auto': it misses frames, warned once, if it falls
# behind).
#
# usage (repository root; the plugin on GST_PLUGIN_PATH, the cudaipc
# package installed): examples/python/recorder_and_viewer.sh [CHANNEL]
# Environment: FRAMES (300: 10 s), RECORDING (recording.rgb: raw RGB
# 320x240 frames), VIEWER (the viewer's sink: autovideosink where there is a
# display, DISPLAY or WAYLAND_DISPLAY; fakesink where there is none), PYTHON
# (python3), TRANSPORT (host; cuda on a GPU host).
#
# When one of the four fails (a viewer that crashed, say), the others are
# stopped (Ctrl-C for the pipelines, so that they remove their channel
# files; SIGTERM for the Python one), the script says which one failed and
# why, removes the unfinished recording and exits 1.
set -euo pipefail
channel=${1:-live-demo}
frames=${FRAMES:-300}
python=${PYTHON:-python3}
transport=${TRANSPORT:-host}
recording=${RECORDING:-recording.rgb}
me=$(basename "$0")
if [ -n "${VIEWER:-}" ]; then
  viewer_sink=$VIEWER
elif [ -n "${DISPLAY:-}" ] || [ -n "${WAYLAND_DISPLAY:-}" ]; then
  viewer_sink=autovideosink
else
  # autovideosink crashes where no window can open.
  viewer_sink=fakesink
  echo "$me: no display (neither DISPLAY nor WAYLAND_DISPLAY is set): the viewer shows nothing (fakesink); VIEWER= names its sink" >&2
fi

pids=() camera= viewer=
declare -A names
# start NAME CMD...: CMD in the background; a background job of a script
# ignores Ctrl-C (SIGINT) unless told otherwise, and Ctrl-C is how the
# pipelines stop cleanly.
start() {
  local name=$1
  shift
  (trap - INT; exec "$@") &
  pids+=("$!")
  names[$!]=$name
}
# forget PID: a process that ended.
forget() {
  local left=() p
  for p in "${pids[@]}"; do [ "$p" = "$1" ] || left+=("$p"); done
  pids=("${left[@]}")
}
# stop PID...: Ctrl-C (SIGINT) to those still running, SIGTERM to the
# Python one (which ends on it as quietly as at an end of stream), SIGKILL
# to what is left 5 s later.
stop() {
  local p i left
  for p in "$@"; do
    if [ "${names[$p]}" = batching_consumer.py ]; then kill -TERM "$p" 2>/dev/null || true
    else kill -INT "$p" 2>/dev/null || true; fi
  done
  for i in $(seq 50); do
    left=0
    for p in "$@"; do kill -0 "$p" 2>/dev/null && left=1; done
    [ $left = 1 ] || break
    sleep 0.1
  done
  for p in "$@"; do
    if kill -0 "$p" 2>/dev/null; then
      echo "$me: the ${names[$p]} did not stop: killed" >&2
      kill -KILL "$p" 2>/dev/null || true
    fi
    wait "$p" 2>/dev/null || true
    forget "$p"
  done
}
# stop_all: the consumers first, then the camera (so that no consumer sees
# its producer go), then what a killed camera left of the channel.
stop_all() {
  local p consumers=()
  [ ${#pids[@]} -gt 0 ] || return 0
  for p in "${pids[@]}"; do [ "$p" = "$camera" ] || consumers+=("$p"); done
  [ ${#consumers[@]} -eq 0 ] || stop "${consumers[@]}"
  [ ${#pids[@]} -eq 0 ] || stop "${pids[@]}"
  local shm=${CUDAIPC_SHM_DIR:-/dev/shm}
  if compgen -G "$shm/cudaipc-$channel" >/dev/null || compgen -G "$shm/cudaipc-$channel[.@]*" >/dev/null; then
    if command -v cudaipc-channels >/dev/null; then
      cudaipc-channels remove-stale "$channel" >&2 || true
    else
      echo "$me: files of channel '$channel' are left in $shm: remove them with cudaipc-channels remove-stale $channel" >&2
    fi
  fi
}
# why STATUS: an exit status in words.
why() {
  if [ "$1" -gt 128 ]; then
    local signal
    signal=$(kill -l "$(($1 - 128))" 2>/dev/null || echo "$(($1 - 128))")
    case $signal in
      SEGV) echo "it crashed (SIGSEGV)" ;;
      *) echo "it was killed by SIG$signal" ;;
    esac
  else
    echo "exit status $1"
  fi
}
# Ctrl-C or a failure of this script: the pipelines go too.
trap stop_all EXIT

# The batching consumer keeps 8 frames at once (hold=7: 9 slots); the
# recorder and the viewer one each while they read it: 12 slots. The camera
# waits for the three consumers before its first frame.
start camera gst-launch-1.0 -q videotestsrc is-live=true num-buffers="$frames" \
  ! video/x-raw,format=RGB,width=320,height=240,framerate=30/1 \
  ! rscudaipcsink channel="$channel" transport="$transport" slots=12 wait-for-connection=3
camera=${pids[-1]}
start recorder gst-launch-1.0 -q rscudaipcsrc channel="$channel" frames=every \
  ! video/x-raw ! filesink location="$recording"
# shellcheck disable=SC2086 # the viewer's sink may have properties
start "viewer ($viewer_sink)" gst-launch-1.0 -q rscudaipcsrc channel="$channel" frames=latest \
  ! videoconvert ! $viewer_sink
viewer=${pids[-1]}
start batching_consumer.py "$python" "$(dirname "$0")/batching_consumer.py" --channel "$channel" --batch 8

# Until all four are done, or one fails.
while [ ${#pids[@]} -gt 0 ]; do
  status=0
  wait -n -p ended "${pids[@]}" || status=$?
  forget "$ended"
  [ "$status" = 0 ] && continue
  failed=${names[$ended]}
  stop_all
  rm -f "$recording"
  hint=
  if [ "$ended" = "$viewer" ] && [ -z "${DISPLAY:-}" ] && [ -z "${WAYLAND_DISPLAY:-}" ]; then
    case $viewer_sink in *videosink*|*imagesink*)
      hint="; there is no display (neither DISPLAY nor WAYLAND_DISPLAY is set), which a window such as $viewer_sink's needs: set VIEWER=fakesink" ;;
    esac
  fi
  echo "$me: the $failed died, $(why "$status")$hint; the others were stopped and the unfinished $recording removed" >&2
  exit 1
done
