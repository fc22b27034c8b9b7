#!/bin/bash
# Packs what scripts/stage-gpu-host.sh staged for the chosen runtimes (122:
# .gpu-host, 126: .gpu-host126, 128: .gpu-host128; default 122 126) into
# .gpu-carry, for a device call's carry (at most 64 MiB): the runtimes as
# they are, NVRTC 12 once, the builds compressed together (they differ
# little). On the GPU host, `source .gpu-carry/unpack.sh` recreates the
# folders.
# usage (repo root, this machine): scripts/pack-gpu-carry.sh [122] [126] [128]
#   e.g. scripts/pack-gpu-carry.sh 126 128   (without the 1.22 runtime)
set -euo pipefail
[ $# -gt 0 ] || set -- 122 126
rm -rf .gpu-carry && mkdir -p .gpu-carry
builds=() nvrtc=
echo "# Sourced from the repo root on the GPU host: recreates the staged folders ($*)." > .gpu-carry/unpack.sh
for nnn in "$@"; do
  case $nnn in
    122)
      dir=.gpu-host
      cp $dir/gst-runtime.tgz $dir/env.sh .gpu-carry/
      echo "mkdir -p $dir && cp .gpu-carry/gst-runtime.tgz .gpu-carry/env.sh $dir/" >> .gpu-carry/unpack.sh ;;
    126|128)
      dir=.gpu-host$nnn
      cp $dir/gst$nnn.tgz $dir/env$nnn.sh .gpu-carry/
      echo "mkdir -p $dir && cp .gpu-carry/gst$nnn.tgz .gpu-carry/env$nnn.sh $dir/" >> .gpu-carry/unpack.sh
      if [ -f $dir/nvrtc12.tar.xz ]; then
        # The same NVRTC 12 for every runtime: carried once.
        [ -n "$nvrtc" ] || { nvrtc=$dir/nvrtc12.tar.xz; cp $nvrtc .gpu-carry/; }
        echo "cp .gpu-carry/nvrtc12.tar.xz $dir/" >> .gpu-carry/unpack.sh
      fi ;;
    *) echo "usage: $0 [122] [126] [128]" >&2; exit 2 ;;
  esac
  [ -d $dir/build ] || { echo "$dir/build missing: run scripts/stage-gpu-host.sh first" >&2; exit 1; }
  builds+=($dir/build)
done
tar cf - "${builds[@]}" | xz -T2 -6 --lzma2=preset=6,dict=192MiB > .gpu-carry/builds.tar.xz
echo "xz -dc .gpu-carry/builds.tar.xz | tar xf -" >> .gpu-carry/unpack.sh
du -sh .gpu-carry
