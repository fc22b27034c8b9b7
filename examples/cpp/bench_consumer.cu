// SPDX-License-Identifier: MPL-2.0
//
// The C++ consumer of the benchmark's row 15c (bench/): takes every frame of
// a channel through cudaipc.hpp on a CUDA stream of its own, as row 15's
// Python consumer does through DLPack: the stream waits for the frame on
// the GPU (stream_wait), and the slot goes back once the stream's work is
// done (release_after); no kernel, no host synchronisation per frame. It
// prints one `RESULT measured=N seconds=S cpu_s=C frames=F` line as the
// benchmark's own processes do (the clock starts at the warm-up's last
// frame).
//
//   nvcc -std=c++17 -O3 bench_consumer.cu $(pkg-config --cflags --libs cudaipc) -o bench_consumer
//   ./bench_consumer --channel bench --warmup 100

#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include <cuda_runtime.h>
#include <cudaipc.hpp>

static double cpu_seconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_utime.tv_sec + usage.ru_stime.tv_sec +
         1e-6 * (usage.ru_utime.tv_usec + usage.ru_stime.tv_usec);
}

int main(int argc, char** argv) {
  std::string channel = "bench";
  long long warmup = 100, timeout_ms = 60000;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--channel")) channel = argv[i + 1];
    else if (!std::strcmp(argv[i], "--warmup")) warmup = std::atoll(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--timeout")) timeout_ms = std::atoll(argv[i + 1]);
    else { std::fprintf(stderr, "usage: bench_consumer [--channel NAME] [--warmup N] [--timeout MS]\n"); return 2; }
  }
  if (cudaSetDevice(0) != cudaSuccess) { std::fprintf(stderr, "bench_consumer: no CUDA device\n"); return 1; }
  cudaStream_t stream;
  if (cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess) return 1;
  long long frames = 0;
  std::chrono::steady_clock::time_point started;
  double cpu_started = 0;
  try {
    cudaipc::subscriber_options options;
    options.timeout_ms = timeout_ms;
    cudaipc::subscriber subscriber(channel, options);
    for (cudaipc::frame& frame : subscriber.frames(std::chrono::milliseconds(timeout_ms))) {
      if (frame.is_cuda()) {
        frame.stream_wait(stream);
        frame.release_after(stream);
      }
      if (++frames == warmup) {
        started = std::chrono::steady_clock::now();
        cpu_started = cpu_seconds();
      }
    }
  } catch (const cudaipc::error& e) {
    std::fprintf(stderr, "bench_consumer: after %lld frames: %s\n", frames, e.what());
    return 1;
  }
  // The clock stops once the work queued on the stream is done.
  cudaStreamSynchronize(stream);
  if (frames <= warmup) {
    std::fprintf(stderr, "bench_consumer: %lld frames, no more than the warm-up\n", frames);
    return 1;
  }
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  std::printf("RESULT measured=%lld seconds=%.6f cpu_s=%.6f frames=%lld\n", frames - warmup, seconds,
              cpu_seconds() - cpu_started, frames);
  cudaStreamDestroy(stream);
  return 0;
}
