#!/bin/bash
# The test suite on GStreamer 1.26 (scripts/test-gst-runtime.sh 1.26).
# usage (repo root): scripts/test-gst126.sh [test-name-filter]
exec "$(dirname "$0")/test-gst-runtime.sh" 1.26 "$@"
