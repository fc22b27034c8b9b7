#!/bin/bash
# The main job: a two-process demo. A producer process publishes frames on a
# channel and this process reads them: 4K RGB generated on the GPU with CUDA
# when a GPU is there, host memory otherwise. Prints rates, latency and the
# frame check, saves one received frame as demo-frame.png and ends with one
# summary line (frames, corrupt, missing, FPS, latency, zero-copy). Leaves the
# plugin built in target/release and prints the gst-launch lines to try next.
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
plugin_dir="$(pwd)/target/release"
# The rs names: the bare ones are GStreamer's own elements on 1.24+ with
# nvcodec and a GPU.
if [ -e /dev/nvidia0 ] || [ -e /dev/nvidiactl ]; then
  producer="cudatestsrc ! \"video/x-raw(memory:CUDAMemory),format=RGB,width=3840,height=2160\" ! rscudaipcsink channel=cam0"
else
  producer="videotestsrc is-live=true ! video/x-raw,format=RGB,width=1280,height=720 ! rscudaipcsink channel=cam0 transport=host"
fi
cat <<NEXT

The plugin is built: $plugin_dir/libgstcudaipc.so
Next, in two terminals:
  GST_PLUGIN_PATH=$plugin_dir gst-launch-1.0 -e $producer
  GST_PLUGIN_PATH=$plugin_dir gst-launch-1.0 rscudaipcsrc channel=cam0 ! videoconvert ! autovideosink
List channels: GST_PLUGIN_PATH=$plugin_dir gst-device-monitor-1.0 Video/Source/CudaIpc
           or: $plugin_dir/cudaipc-channels   (remove-stale --all: what dead processes left)
Watch each consumer's rate, misses and lag: $plugin_dir/cudaipc-channels watch
NEXT
