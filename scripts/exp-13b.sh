#!/bin/bash
# Temporary experiment (not committed): where 13b's MPS-on gap goes.
source .gpu-host126/env126.sh >/dev/null
printf '#!/bin/sh\nexec %s --library-path %s /tmp/gst126/root/bin/gst-plugin-scanner "$@"\n' \
  "$GST126_LOADER" "$GST126_LIBS:/usr/lib/x86_64-linux-gnu" > /tmp/gst126/wrap/gst-plugin-scanner
chmod +x /tmp/gst126/wrap/gst-plugin-scanner
export GST_PLUGIN_SCANNER=/tmp/gst126/wrap/gst-plugin-scanner CUDAIPC_ELEMENT_NAMES=rs
unset GST_REGISTRY_FORK
gst-inspect-1.0 rscudaipcsink >/dev/null || echo "no rscudaipcsink"
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps CUDA_MPS_LOG_DIRECTORY=/tmp/mps-log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY
[ "${MPS:-on}" = on ] && nvidia-cuda-mps-control -d
N=${N:-40000}
P="videotestsrc num-buffers=1 pattern=smpte ! video/x-raw,format=RGBA,width=3840,height=2160,framerate=0/1 ! cudaupload ! video/x-raw(memory:CUDAMemory) ! imagefreeze num-buffers=$N ! cudaconvert ! video/x-raw(memory:CUDAMemory),format=BGRx"
t() { local s=$(date +%s.%N); "$@"; local e=$(date +%s.%N); awk -v n=$N -v s=$s -v e=$e 'BEGIN{printf "%d FPS (incl. start)\n", n/(e-s)}'; }
echo "alone:"; t gst-launch-1.0 -q $P ! fakesink sync=false
echo "sink, no consumer (drop):"; t gst-launch-1.0 -q $P ! rscudaipcsink channel=e1 sync=false when-full=drop
for mode in hybrid spin; do
  gst-launch-1.0 -q rscudaipcsrc channel=e-$mode wait-mode=$mode connect-timeout=30000 ! fakesink sync=false &
  c=$!; sleep 1
  echo "pair, consumer $mode:"; t gst-launch-1.0 -q $P ! rscudaipcsink channel=e-$mode sync=false wait-for-connection=1
  wait $c
done
echo "pair, sink wait-mode=spin, consumer spin:"
gst-launch-1.0 -q rscudaipcsrc channel=e-ss wait-mode=spin connect-timeout=30000 ! fakesink sync=false & c=$!; sleep 1
t gst-launch-1.0 -q $P ! rscudaipcsink channel=e-ss sync=false wait-for-connection=1 wait-mode=spin; wait $c
echo "alone, 1 run of N=1 (start cost):"; N=1; P1="videotestsrc num-buffers=1 pattern=smpte ! video/x-raw,format=RGBA,width=3840,height=2160,framerate=0/1 ! cudaupload ! video/x-raw(memory:CUDAMemory) ! imagefreeze num-buffers=1 ! cudaconvert ! video/x-raw(memory:CUDAMemory),format=BGRx"
s=$(date +%s.%N); gst-launch-1.0 -q $P1 ! fakesink; e=$(date +%s.%N); awk -v s=$s -v e=$e 'BEGIN{printf "start: %.2f s\n", e-s}'
echo quit | nvidia-cuda-mps-control 2>/dev/null
