#!/bin/bash
# Packs what scripts/gpu-host/stage.sh staged for the chosen runtimes (122:
# .gpu-host, 126: .gpu-host126, 128: .gpu-host128; default 122 126) into
# .gpu-carry, for a device call's carry (at most 64 MiB): the runtimes
# recompressed with xz (a quarter smaller than gzip), NVRTC 12 once, the
# builds compressed together (they differ little), and the CUDA-enabled UCX
# of scripts/gpu-host/stage-ucx.sh where it was staged. On the GPU host, `source .gpu-carry/unpack.sh` recreates the
# folders.
# usage (repo root, this machine): scripts/gpu-host/pack.sh [122] [126] [128]
#   e.g. scripts/gpu-host/pack.sh 126 128   (without the 1.22 runtime)
set -euo pipefail
[ $# -gt 0 ] || set -- 122 126
rm -rf .gpu-carry && mkdir -p .gpu-carry
builds=() nvrtc=
echo "# Sourced from the repo root on the GPU host: recreates the staged folders ($*)." > .gpu-carry/unpack.sh
# runtime NAME: $dir/NAME.tgz and its env script, recreated by unpack.sh.
runtime() {
  [ -d $dir/build ] || { echo "$dir/build missing: run scripts/gpu-host/stage.sh first" >&2; exit 1; }
  local env=env${1#gst}.sh
  [ "$1" != gst-runtime ] || env=env.sh
  gzip -dc $dir/$1.tgz | xz -T2 -9 > .gpu-carry/$1.tar.xz
  cp $dir/$env .gpu-carry/
  echo "mkdir -p $dir && xz -dc .gpu-carry/$1.tar.xz | gzip -1 > $dir/$1.tgz && cp .gpu-carry/$env $dir/" >> .gpu-carry/unpack.sh
}
for nnn in "$@"; do
  case $nnn in
    122)
      dir=.gpu-host
      runtime gst-runtime ;;
    126|128)
      dir=.gpu-host$nnn
      runtime gst$nnn
      if [ -f $dir/nvrtc12.tar.xz ]; then
        # The same NVRTC 12 for every runtime: carried once.
        [ -n "$nvrtc" ] || { nvrtc=$dir/nvrtc12.tar.xz; cp $nvrtc .gpu-carry/; }
        echo "cp .gpu-carry/nvrtc12.tar.xz $dir/" >> .gpu-carry/unpack.sh
      fi ;;
    *) echo "usage: $0 [122] [126] [128]" >&2; exit 2 ;;
  esac
  builds+=($dir/build)
  # The cudaipc package gpu-host/stage.sh unpacked for the runtime's Python.
  [ ! -d $dir/python ] || builds+=($dir/python)
done
# The base of an A/B (scripts/gpu-host/stage-base.sh) of each runtime
# packed, where staged.
for dir in "${builds[@]}"; do
  base=${dir%/build}-base/build
  [ "$base" = "$dir-base/build" ] || [ ! -d "$base" ] || builds+=("$base")
done
tar cf - "${builds[@]}" | xz -T2 -6 --lzma2=preset=6,dict=192MiB > .gpu-carry/builds.tar.xz
echo "xz -dc .gpu-carry/builds.tar.xz | tar xf -" >> .gpu-carry/unpack.sh
# A CUDA-enabled UCX for the bridge (scripts/gpu-host/stage-ucx.sh), where
# staged: 6.5 MB.
if [ -d .gpu-host-ucx ]; then
  tar cf - .gpu-host-ucx | xz -T2 -9 > .gpu-carry/ucx.tar.xz
  echo "xz -dc .gpu-carry/ucx.tar.xz | tar xf - && source .gpu-host-ucx/env.sh" >> .gpu-carry/unpack.sh
fi
# What a device call carries: the tracked files and every untracked file git
# does not ignore (leave the staged .gpu-host* folders out of the tree then).
carry=$(du -sb .gpu-carry | cut -f1)
tracked=$(git ls-files -z | xargs -0 du -cb 2>/dev/null | tail -1 | cut -f1)
echo ".gpu-carry: $((carry / 1048576)) MiB; with the tracked files: $(((carry + tracked) / 1048576)) MiB of the 64 MiB a device call carries"
[ $((carry + tracked)) -le $((64 * 1048576)) ] || echo "over the 64 MiB carry: pack fewer runtimes" >&2
