#!/bin/bash
# Row 13b (nvcodec's cudaconvert output into this pair, 4K) under variants
# of the sink's or source's properties or of the environment, with the
# sink's time per frame (docs/performance.md, "Where the producer's time
# goes"). Needs the 1.26 runtime staged by scripts/stage-gpu-host.sh --gst126.
# usage (GPU host): [MPS=on|off] [SECONDS_PER_ROW=2] scripts/exp-13b.sh VARIANT...
#   VARIANT: "PROPS" (our sink's properties, "" for none), "src:PROPS" (our
#   source's), "env:NAME=VALUE", "alone" (the producer into fakesink), or
#   "solo" (the producer into fakesink, a queue, or our sink with no
#   consumer: gst-launch, 60,000 frames, start-up subtracted).
set -u
mps=${MPS:-on}
run() {
  echo "== mps=$mps pairs=$1 props='$2'"
  local props=$2 envs=()
  case $props in env:*) envs=("${props#env:}"); props= ;; src:*) envs=("CUDAIPC_BENCH_SRC_PROPS=${props#src:}"); props= ;; esac
  env "${envs[@]}" CUDAIPC_BENCH_SINK_PROPS="$props" timeout 120 scripts/bench-gst126.sh --rows 13b --pairs "$1" \
    --mps "$mps" --gst-cuda-seconds "${SECONDS_PER_ROW:-2}" --out "/tmp/exp-13b" 2>&1 \
    | grep -E '^13b.*FPS' | cut -c1-300
}
solo() {
  ( source .gpu-host126/env126.sh >/dev/null
    export GST_PLUGIN_SCANNER=$GST_RT/wrap/gst-plugin-scanner CUDAIPC_ELEMENT_NAMES=rs
    unset GST_REGISTRY_FORK
    if [ "$mps" = on ]; then
      export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps CUDA_MPS_LOG_DIRECTORY=/tmp/mps-log
      mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY; nvidia-cuda-mps-control -d
    fi
    P="videotestsrc num-buffers=1 pattern=smpte ! video/x-raw,format=RGBA,width=3840,height=2160,framerate=0/1 ! cudaupload ! video/x-raw(memory:CUDAMemory) ! imagefreeze num-buffers=NUM ! cudaconvert ! video/x-raw(memory:CUDAMemory),format=BGRx"
    t() { local s=$(date +%s.%N); gst-launch-1.0 -q ${1//NUM/$2} >/dev/null; local e=$(date +%s.%N); echo "$s $e"; }
    read s1 e1 < <(t "$P ! fakesink" 10)
    ( read s2 e2 < <(t "$P ! fakesink sync=false" 60010); awk -v a=$s1 -v b=$e1 -v c=$s2 -v d=$e2 'BEGIN{printf "two at once, first: %d FPS\n", 60000/((d-c)-(b-a))}' ) &
    ( read s2 e2 < <(t "$P ! fakesink sync=false" 60010); awk -v a=$s1 -v b=$e1 -v c=$s2 -v d=$e2 'BEGIN{printf "two at once, second: %d FPS\n", 60000/((d-c)-(b-a))}' ) &
    wait
    for sink in "fakesink sync=false" "queue max-size-buffers=2 ! fakesink sync=false" "rscudaipcsink channel=solo sync=false" "rscudaipcsink channel=solo2 sync=false slots=4" "rscudaipcsink channel=solo3 sync=false gpu-sync=event"; do
      read s1 e1 < <(t "$P ! $sink" 10)
      read s2 e2 < <(t "$P ! $sink" 60010)
      awk -v a=$s1 -v b=$e1 -v c=$s2 -v d=$e2 -v w="$sink" 'BEGIN{printf "solo mps='$mps' %s: %d FPS (60000 frames, start cost subtracted)\n", w, 60000/((d-c)-(b-a))}'
    done
    [ "$mps" = on ] && echo quit | nvidia-cuda-mps-control )
}
for props in "$@"; do
  case $props in solo) solo ;; alone) run alone "" ;; *) run ours "$props" ;; esac
done
