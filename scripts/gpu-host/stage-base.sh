#!/bin/bash
# Stages the benchmark and plugin of another commit (the "old" side of an
# A/B, scripts/gpu-host/ab.sh) beside what scripts/gpu-host/stage.sh staged:
# .gpu-host-base/build for the GStreamer 1.22 runtime and, where
# .gpu-host126 is staged, .gpu-host126-base/build for 1.26. Built in a
# worktree of its own (target-base), so the checkout's target is untouched.
# usage (repo root, this machine, after stage.sh): scripts/gpu-host/stage-base.sh REV
set -euo pipefail
rev=${1:?usage: $0 REV}
root=$(pwd)
tree=$root/target-base/tree
git worktree remove --force "$tree" 2>/dev/null || rm -rf "$tree"
git worktree add --detach "$tree" "$rev" >/dev/null
(cd "$tree" && CARGO_TARGET_DIR=$root/target-base/target cargo build --release -p cudaipc-bench -p gst-plugin-cudaipc >/dev/null)
for dir in .gpu-host-base .gpu-host126-base; do
  [ "$dir" = .gpu-host-base ] || [ -d .gpu-host126 ] || continue
  rm -rf $dir/build && mkdir -p $dir/build
  cp target-base/target/release/bench target-base/target/release/libgstcudaipc.so $dir/build/
  strip $dir/build/* 2>/dev/null || true
  # As stage.sh: executables get the runtime's loader; the plugin is left.
  [ $dir = .gpu-host-base ] || patchelf --force-rpath --set-interpreter /tmp/gst126/root/lib/ld-linux-x86-64.so.2 \
    --set-rpath /tmp/gst126/root/lib:/tmp/gst126/nvrtc:/usr/lib/x86_64-linux-gnu $dir/build/bench
  echo "$rev" > $dir/build/REV
done
git worktree remove --force "$tree"
du -sh .gpu-host-base .gpu-host126-base 2>/dev/null
