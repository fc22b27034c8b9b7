#!/bin/bash
# The benchmark on GStreamer 1.26 (scripts/bench-gst-runtime.sh 1.26).
# usage (repo root, GPU host): scripts/bench-gst126.sh [bench options]
#   e.g. scripts/bench-gst126.sh --gst-cuda --mps both --out bench-13
exec "$(dirname "$0")/bench-gst-runtime.sh" 1.26 "$@"
