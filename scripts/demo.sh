#!/bin/bash
# The main job: a two-process demo. A producer process publishes frames on a
# channel and this process reads them: 4K RGB generated on the GPU with CUDA
# when a GPU is there, host memory otherwise. Prints rates, latency and the
# frame check, and saves one received frame as demo-frame.png.
# usage: scripts/demo.sh [frames]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
[ -f "$HOME/.cargo/env" ] && source "$HOME/.cargo/env"
cargo build --quiet --release --example demo
exec target/release/examples/demo "${1:-600}"
