#!/bin/bash
# Soak on a GPU host: one producer (cudatestsrc pattern=counter, 4K RGB, CUDA
# memory, as fast as it goes) and two verifying consumers (rscudaipcsrc !
# cudaprocess verify=true ! fakesink) for SECONDS (default 600). Samples the
# processes' resident memory, descriptors and GPU memory every
# SAMPLE_SECONDS (default 30) and fails on any corrupt, missing or lost frame
# or on growth. The figures are the SOAK-SAMPLE and SOAK-RESULT lines.
#
# usage (repo root, GPU host, after ../shared/gpu-host/stage-build.sh .gpu-host):
#   scripts/soak.sh [SECONDS] [SAMPLE_SECONDS]
# CUDAIPC_SOAK_PRODUCER_PROPS adds properties to the producer's cudatestsrc
# (output-memory=gstcuda: GstCudaMemory that the sink lends as slots).
# or, where cargo and GStreamer are installed:
#   CUDAIPC_SOAK_SECONDS=600 cargo test --release --test processes_and_channels soak:: -- --nocapture
set -u
seconds=${1:-600}
every=${2:-30}
source .gpu-host/env.sh
export CUDAIPC_SOAK_SECONDS=$seconds CUDAIPC_SOAK_SAMPLE_SECONDS=$every CUDAIPC_REQUIRE_GPU=1 RUST_BACKTRACE=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
.gpu-host/build/test-processes_and_channels soak::soak_one_producer_two_verifying_consumers --exact --nocapture --test-threads=1
