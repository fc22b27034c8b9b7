// SPDX-License-Identifier: MPL-2.0
//
// A C++ consumer that checks every frame on the GPU (cudaipc.hpp + a CUDA
// kernel), with no host synchronisation per frame: each frame is read on the
// consumer's own stream after cudaipc::frame::stream_wait (the stream waits,
// on the GPU, for the producer's writes) and handed back with
// release_after (the slot goes back once the kernel has run). The count of
// wrong bytes stays on the GPU and is read once, at the end.
//
//   nvcc -std=c++17 -O3 gpu_consumer.cu $(pkg-config --cflags --libs cudaipc) -o gpu_consumer
//   ./gpu_consumer --channel cam0 --frames 1000
//
// Options: --channel NAME (demo), --frames N (expected; 0: any), --timeout MS
// (10000). Its producer: examples/cpp/gpu_producer.cu, examples/cpp/producer.cpp
// --transport cuda, or `cargo run --example api_publish -- --transport cuda`,
// whose frames follow the same pattern. Exits 1 on a wrong, missed or
// missing frame; prints the frames a second.

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include <cudaipc.hpp>

#include "gpu_pattern.cuh"

int main(int argc, char** argv) {
  std::string channel = "demo";
  long long expected = 0, timeout_ms = 10000;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--channel")) channel = argv[i + 1];
    else if (!std::strcmp(argv[i], "--frames")) expected = std::atoll(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--timeout")) timeout_ms = std::atoll(argv[i + 1]);
    else { std::fprintf(stderr, "usage: gpu_consumer [--channel NAME] [--frames N] [--timeout MS]\n"); return 2; }
  }
  // The primary context, which libcudaipc's streams belong to too.
  CUDA_CHECK(cudaSetDevice(0));
  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  unsigned long long* counters;  // [0]: wrong bytes, [1]: first wrong frame
  CUDA_CHECK(cudaMalloc(&counters, 2 * sizeof *counters));
  CUDA_CHECK(cudaMemset(counters, 0, sizeof *counters));
  CUDA_CHECK(cudaMemset(counters + 1, 0xff, sizeof *counters));

  uint64_t n = 0, missed = 0, last_seq = 0;
  bool out_of_order = false;
  std::chrono::steady_clock::time_point start;
  try {
    cudaipc::subscriber_options options;
    options.frames = CUDAIPC_FRAMES_EVERY;
    options.timeout_ms = timeout_ms;
    cudaipc::subscriber subscriber(channel, options);
    for (cudaipc::frame& frame : subscriber.frames(std::chrono::milliseconds(timeout_ms))) {
      if (!frame.is_cuda()) {
        std::fprintf(stderr, "gpu_consumer: channel %s is on the host transport\n", channel.c_str());
        return 1;
      }
      if (n == 0) start = std::chrono::steady_clock::now();
      missed += frame.info().missed_before;
      out_of_order |= n > 0 && frame.sequence() != last_seq + 1;
      last_seq = frame.sequence();
      frame.stream_wait(stream);  // our kernel runs after the producer's writes
      verify_pattern<<<pattern_blocks(), 256, 0, stream>>>(
          reinterpret_cast<const uint8_t*>(frame.device_ptr()), frame.size(), n, counters,
          counters + 1);
      CUDA_CHECK(cudaGetLastError());  // the launch's own error; no sync
      frame.release_after(stream);  // the slot goes back once the kernel has run
      n++;
    }  // each frame is released as the loop moves on
  } catch (const cudaipc::error& e) {
    std::fprintf(stderr, "gpu_consumer: after %llu frames: %s\n", (unsigned long long)n, e.what());
    return 1;
  }
  // The one host synchronisation: the counters, at the end.
  unsigned long long result[2];
  CUDA_CHECK(cudaMemcpyAsync(result, counters, sizeof result, cudaMemcpyDeviceToHost, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("gpu_consumer: %llu frames, %.0f frames/s, %llu wrong bytes, %llu missed\n",
              (unsigned long long)n, n > 1 ? (n - 1) / seconds : 0.0, result[0],
              (unsigned long long)missed);
  int rc = 0;
  if (result[0] != 0) {
    std::fprintf(stderr, "gpu_consumer: frame %llu is the first wrong one\n", result[1]);
    rc = 1;
  }
  if (missed != 0 || out_of_order) rc = 1;
  if (expected > 0 && (long long)n != expected) {
    std::fprintf(stderr, "gpu_consumer: %llu frames, %lld expected\n", (unsigned long long)n, expected);
    rc = 1;
  }
  cudaFree(counters);
  cudaStreamDestroy(stream);
  return rc;
}
