// SPDX-License-Identifier: MPL-2.0
//
// A C++ producer of a cudaipc channel (cudaipc.hpp): publishes 4K RGB frames
// whose every byte says which frame it is (byte i of frame n is
// (i + 3n) mod 256), so a consumer can check each one: examples/c/consumer.c,
// `gst-launch-1.0 rscudaipcsrc channel=NAME ! checksumsink`, or
// examples/cpp/gpu_consumer.cu on the GPU.
//
//   c++ -std=c++17 producer.cpp $(pkg-config --cflags --libs cudaipc) -o producer
//   ./producer --channel cam0 --frames 100
//
// Options: --channel NAME (demo), --frames N (100), --size WxH (3840x2160),
// --transport auto|cuda|host (auto), --wait-consumers N (1: the first frame
// waits for a consumer, so it gets every frame).
// On the host transport each frame is written in place into a loaned slot
// (no copy); on the cuda transport it is uploaded from host memory
// (examples/cpp/gpu_producer.cu writes the slot on the GPU instead). Each
// frame carries a small JSON text, {"frame":N,"pts_ns":T}, as a detector
// would attach its boxes: examples/c/consumer.c checks it, Python reads it
// as frame.data, and rscudaipcsrc puts it on the buffer's CudaIpcFrameData
// meta.

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <cudaipc.hpp>

int main(int argc, char** argv) {
  std::string channel = "demo";
  long frames = 100;
  unsigned width = 3840, height = 2160;
  cudaipc::publisher_options options;
  options.wait_for_consumers = 1;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string arg = argv[i], value = argv[i + 1];
    if (arg == "--channel") channel = value;
    else if (arg == "--frames") frames = std::atol(value.c_str());
    else if (arg == "--size" && std::sscanf(value.c_str(), "%ux%u", &width, &height) == 2) {}
    else if (arg == "--wait-consumers") options.wait_for_consumers = std::atoi(value.c_str());
    else if (arg == "--transport" && value == "auto") options.transport = CUDAIPC_TRANSPORT_AUTO;
    else if (arg == "--transport" && value == "cuda") options.transport = CUDAIPC_TRANSPORT_CUDA;
    else if (arg == "--transport" && value == "host") options.transport = CUDAIPC_TRANSPORT_HOST;
    else {
      std::fprintf(stderr, "usage: producer [--channel NAME] [--frames N] [--size WxH] "
                           "[--transport auto|cuda|host] [--wait-consumers N]\n");
      return 2;
    }
  }
  try {
    cudaipc::publisher publisher(channel, cudaipc::default_layout(CUDAIPC_FORMAT_RGB, width, height),
                                 options);
    const std::size_t size = publisher.layout().frame_size;
    // Frame n's pattern starts 3n into a period of 256: one buffer holds
    // every frame's bytes, each a window of it.
    std::vector<uint8_t> pattern(size + 256);
    for (std::size_t i = 0; i < pattern.size(); i++) pattern[i] = static_cast<uint8_t>(i);
    for (long n = 0; n < frames; n++) {
      const uint8_t* bytes = pattern.data() + (3 * n) % 256;
      const int64_t pts_ns = n * 33'333'333;  // 30 fps stream time
      const std::string json =
          "{\"frame\":" + std::to_string(n) + ",\"pts_ns\":" + std::to_string(pts_ns) + "}";
      if (publisher.is_cuda()) {
        publisher.publish_with_json(bytes, size, pts_ns, json);
      } else {
        cudaipc::loan slot = publisher.loan();
        std::memcpy(slot.data(), bytes, size);
        slot.set_app_json(json);
        slot.publish(pts_ns);
      }
    }
    publisher.eos();
    std::printf("producer: %ld frames of %ux%u RGB on channel %s (%s)\n", frames, width, height,
                channel.c_str(), publisher.is_cuda() ? "cuda" : "host");
  } catch (const cudaipc::error& e) {
    std::fprintf(stderr, "producer: %s\n", e.what());
    return 1;
  }
  return 0;  // the publisher's destructor lets consumers take the last frames
}
