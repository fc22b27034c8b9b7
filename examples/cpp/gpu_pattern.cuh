// SPDX-License-Identifier: MPL-2.0
//
// The examples' frame pattern on the GPU: byte i of frame n is
// (i + 3n) mod 256 (what examples/cpp/producer.cpp and examples/c/consumer.c
// write and check on the CPU). 16 bytes a thread where the frame allows.

#ifndef CUDAIPC_EXAMPLES_GPU_PATTERN_CUH
#define CUDAIPC_EXAMPLES_GPU_PATTERN_CUH

#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include <cuda_runtime.h>

#define CUDA_CHECK(call)                                                                   \
  do {                                                                                     \
    cudaError_t err_ = (call);                                                             \
    if (err_ != cudaSuccess) {                                                             \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call,                   \
                   cudaGetErrorString(err_));                                              \
      std::exit(1);                                                                        \
    }                                                                                      \
  } while (0)

__device__ inline uint8_t pattern_byte(uint64_t i, uint64_t n) {
  return static_cast<uint8_t>(i + 3 * n);
}

// Fills a frame of `size` bytes (a multiple of 16, 16-aligned) with frame n.
__global__ void fill_pattern(uint8_t* frame, uint64_t size, uint64_t n) {
  uint64_t stride = uint64_t(gridDim.x) * blockDim.x;
  for (uint64_t w = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x; w < size / 16; w += stride) {
    uint32_t word[4];  // little-endian: byte k of a word is bits 8k..8k+7
    for (int q = 0; q < 4; q++) {
      word[q] = 0;
      for (int k = 0; k < 4; k++) word[q] |= uint32_t(pattern_byte(w * 16 + q * 4 + k, n)) << (8 * k);
    }
    reinterpret_cast<uint4*>(frame)[w] = make_uint4(word[0], word[1], word[2], word[3]);
  }
}

// Adds the number of bytes of `frame` that differ from frame n's pattern
// to *wrong, and lowers *first_bad to n if any does.
__global__ void verify_pattern(const uint8_t* frame, uint64_t size, uint64_t n,
                               unsigned long long* wrong, unsigned long long* first_bad) {
  uint64_t stride = uint64_t(gridDim.x) * blockDim.x;
  unsigned bad = 0;
  for (uint64_t w = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x; w < size / 16; w += stride) {
    uint4 v = reinterpret_cast<const uint4*>(frame)[w];
    const uint8_t* b = reinterpret_cast<const uint8_t*>(&v);
    for (int k = 0; k < 16; k++) bad += b[k] != pattern_byte(w * 16 + k, n);
  }
  // The tail that is not a whole 16 bytes.
  for (uint64_t i = size / 16 * 16 + uint64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < size;
       i += stride) {
    bad += frame[i] != pattern_byte(i, n);
  }
  if (bad != 0) {
    atomicAdd(wrong, static_cast<unsigned long long>(bad));
    atomicMin(first_bad, static_cast<unsigned long long>(n));
  }
}

// Blocks for a frame: enough to fill the GPU, each thread looping.
inline unsigned pattern_blocks() { return 1024; }

#endif
