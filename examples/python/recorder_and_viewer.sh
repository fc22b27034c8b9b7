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
# 320x240 frames), VIEWER (the viewer's sink: autovideosink), PYTHON
# (python3), TRANSPORT (host; cuda on a GPU host).
set -euo pipefail
channel=${1:-live-demo}
frames=${FRAMES:-300}
python=${PYTHON:-python3}
transport=${TRANSPORT:-host}
viewer_sink=${VIEWER:-autovideosink}

# The batching consumer keeps 8 frames at once (hold=7: 9 slots); the
# recorder and the viewer one each while they read it: 12 slots. The camera
# waits for the three consumers before its first frame.
gst-launch-1.0 -q videotestsrc is-live=true num-buffers="$frames" \
  ! video/x-raw,format=RGB,width=320,height=240,framerate=30/1 \
  ! rscudaipcsink channel="$channel" transport="$transport" slots=12 wait-for-connection=3 &
camera=$!
gst-launch-1.0 -q rscudaipcsrc channel="$channel" frames=every \
  ! video/x-raw ! filesink location="${RECORDING:-recording.rgb}" &
recorder=$!
gst-launch-1.0 -q rscudaipcsrc channel="$channel" frames=latest \
  ! videoconvert ! $viewer_sink &
viewer=$!
# On a failure, the pipelines go too.
trap 'kill "$camera" "$recorder" "$viewer" 2>/dev/null || true' EXIT
"$python" "$(dirname "$0")/batching_consumer.py" --channel "$channel" --batch 8
wait "$camera" "$recorder" "$viewer"
