// SPDX-License-Identifier: MPL-2.0
//
// A C++ producer that writes each frame on the GPU straight into a loaned
// slot (cudaipc.hpp + a CUDA kernel): no copy, no host synchronisation. The
// stream waits for the slot (loan::stream_wait: the consumers' reads of its
// last frame are done), the kernel writes the frame, and the publication is
// ordered after it (loan::publish_after). The pattern is the examples' (byte
// i of frame n is (i + 3n) mod 256), checked by examples/cpp/gpu_consumer.cu
// or examples/c/consumer.c.
//
//   nvcc -std=c++17 -O3 gpu_producer.cu $(pkg-config --cflags --libs cudaipc) -o gpu_producer
//   ./gpu_producer --channel cam0 --frames 1000
//
// Options: --channel NAME (demo), --frames N (1000), --size WxH (3840x2160,
// RGB; W*H*3 a multiple of 16), --wait-consumers N (1).

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include <cudaipc.hpp>

#include "gpu_pattern.cuh"

int main(int argc, char** argv) {
  std::string channel = "demo";
  long frames = 1000;
  unsigned width = 3840, height = 2160;
  cudaipc::publisher_options options;
  options.transport = CUDAIPC_TRANSPORT_CUDA;
  options.wait_for_consumers = 1;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--channel")) channel = argv[i + 1];
    else if (!std::strcmp(argv[i], "--frames")) frames = std::atol(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--size") && std::sscanf(argv[i + 1], "%ux%u", &width, &height) == 2) {}
    else if (!std::strcmp(argv[i], "--wait-consumers")) options.wait_for_consumers = std::atoi(argv[i + 1]);
    else { std::fprintf(stderr, "usage: gpu_producer [--channel NAME] [--frames N] [--size WxH] [--wait-consumers N]\n"); return 2; }
  }
  CUDA_CHECK(cudaSetDevice(0));
  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  try {
    cudaipc::publisher publisher(channel, cudaipc::default_layout(CUDAIPC_FORMAT_RGB, width, height),
                                 options);
    for (long n = 0; n < frames; n++) {
      cudaipc::loan slot = publisher.loan();
      if (slot.size() % 16 != 0 || slot.device_ptr() % 16 != 0) {
        std::fprintf(stderr, "gpu_producer: a %ux%u RGB frame is not a multiple of 16 bytes\n", width, height);
        return 2;
      }
      slot.stream_wait(stream);
      fill_pattern<<<pattern_blocks(), 256, 0, stream>>>(
          reinterpret_cast<uint8_t*>(slot.device_ptr()), slot.size(), n);
      CUDA_CHECK(cudaGetLastError());
      slot.publish_after(stream);
      slot.publish(n * 33'333'333);
    }
    publisher.eos();
    std::printf("gpu_producer: %ld frames of %ux%u RGB on channel %s\n", frames, width, height, channel.c_str());
  } catch (const cudaipc::error& e) {
    std::fprintf(stderr, "gpu_producer: %s\n", e.what());
    return 1;
  }
  cudaStreamDestroy(stream);
  return 0;
}
