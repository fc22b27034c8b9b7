#!/bin/bash
# Packs what scripts/stage-gpu-host.sh --gst126 staged (.gpu-host and
# .gpu-host126, together over the 64 MiB a device call carries) into
# .gpu-carry: the runtimes as they are, the builds compressed together.
# On the GPU host, `source .gpu-carry/unpack.sh` recreates both folders.
# usage (repo root, this machine): scripts/pack-gpu-carry.sh
set -euo pipefail
rm -rf .gpu-carry && mkdir -p .gpu-carry
cp .gpu-host/gst-runtime.tgz .gpu-host/env.sh .gpu-carry/
cp .gpu-host126/gst126.tgz .gpu-host126/env126.sh .gpu-host126/nvrtc12.tar.xz .gpu-carry/
tar cf - .gpu-host/build .gpu-host126/build \
  | xz -T2 -6 --lzma2=preset=6,dict=192MiB > .gpu-carry/builds.tar.xz
cat > .gpu-carry/unpack.sh <<'UNPACK'
# Sourced from the repo root on the GPU host: recreates .gpu-host and .gpu-host126.
mkdir -p .gpu-host .gpu-host126
cp .gpu-carry/gst-runtime.tgz .gpu-carry/env.sh .gpu-host/
cp .gpu-carry/gst126.tgz .gpu-carry/env126.sh .gpu-carry/nvrtc12.tar.xz .gpu-host126/
xz -dc .gpu-carry/builds.tar.xz | tar xf -
UNPACK
du -sh .gpu-carry
