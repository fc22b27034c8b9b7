#!/bin/bash
# The main job: a two-process demo. A producer process publishes frames on a
# channel and this process reads them: 4K RGB generated on the GPU with CUDA
# when a GPU is there, host memory otherwise. Prints rates, latency and the
# frame check, saves one received frame as demo-frame.png and ends with one
# summary line (frames, corrupt, missing, FPS, latency, zero-copy). Leaves the
# plugin built in target/release and prints the gst-launch lines to try next
# (examples/demo.rs --next-steps: without a display, a consumer that prints
# its frame rate instead of a window).
# usage: scripts/demo.sh [frames]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
[ -f "$HOME/.cargo/env" ] && source "$HOME/.cargo/env"
# The plugin itself (target/release/libgstcudaipc.so), for README's commands,
# and the channel tool beside it (target/release/cudaipc-channels).
cargo build --quiet --release --lib --bin cudaipc-channels
cargo build --quiet --release --example demo
target/release/examples/demo "${1:-600}"
# What to try next: a pair for two terminals (a consumer that needs no
# display where there is none) and the channel tool.
target/release/examples/demo --next-steps "$(pwd)/target/release"
