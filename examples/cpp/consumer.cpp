// SPDX-License-Identifier: MPL-2.0
//
// The C consumer (examples/c/consumer.c) in C++ with cudaipc.hpp: range-for
// over the frames until the end of the stream, each checked against the
// examples' pattern (byte i of frame n is (i + 3n) mod 256); exit 1 on a
// wrong, missed or missing frame. Host transport, or the cuda transport
// through a download (examples/cpp/gpu_consumer.cu checks on the GPU). A
// frame's data, when it has some, must be examples/cpp/producer.cpp's JSON
// text; --data json: every frame must have it.
//
//   c++ -std=c++17 consumer.cpp $(pkg-config --cflags --libs cudaipc) -o consumer
//   ./consumer --channel cam0 --frames 100

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <cudaipc.hpp>

int main(int argc, char** argv) {
  std::string channel = "demo";
  long long expected = 0, timeout_ms = 10000;
  bool need_data = false;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string arg = argv[i];
    if (arg == "--channel") channel = argv[i + 1];
    else if (arg == "--frames") expected = std::atoll(argv[i + 1]);
    else if (arg == "--timeout") timeout_ms = std::atoll(argv[i + 1]);
    else if (arg == "--data" && std::string(argv[i + 1]) == "any") need_data = false;
    else if (arg == "--data" && std::string(argv[i + 1]) == "json") need_data = true;
    else {
      std::fprintf(stderr, "usage: consumer [--channel NAME] [--frames N] [--timeout MS] [--data any|json]\n");
      return 2;
    }
  }
  long long n = 0;
  try {
    cudaipc::subscriber_options options;
    options.frames = CUDAIPC_FRAMES_EVERY;
    options.timeout_ms = timeout_ms;
    cudaipc::subscriber subscriber(channel, options);
    std::vector<uint8_t> copy;
    for (cudaipc::frame& frame : subscriber.frames(std::chrono::milliseconds(timeout_ms))) {
      const uint8_t* bytes = frame.data();
      if (frame.is_cuda()) {
        copy.resize(frame.size());
        frame.copy_to_host(copy.data(), copy.size());
        bytes = copy.data();
      }
      for (std::size_t i = 0; i < frame.size(); i++) {
        if (bytes[i] != static_cast<uint8_t>(i + 3 * n)) {
          std::fprintf(stderr, "consumer: frame %lld is corrupt at byte %zu\n", n, i);
          return 1;
        }
      }
      const cudaipc::app_data data = frame.app_data();  // points into the frame
      const std::string want = "{\"frame\":" + std::to_string(n) +
                               ",\"pts_ns\":" + std::to_string(frame.pts_ns()) + "}";
      if (data.empty() ? need_data : data.json() != want) {
        std::fprintf(stderr, "consumer: frame %lld's data is not %s\n", n, want.c_str());
        return 1;
      }
      if (frame.info().missed_before != 0) {
        std::fprintf(stderr, "consumer: frames missed before frame %lld\n", n);
        return 1;
      }
      n++;
    }
  } catch (const cudaipc::error& e) {
    std::fprintf(stderr, "consumer: after %lld frames: %s\n", n, e.what());
    return 1;
  }
  if (expected > 0 && n != expected) {
    std::fprintf(stderr, "consumer: %lld frames before the end of the stream, %lld expected\n", n, expected);
    return 1;
  }
  std::printf("consumer: %lld frames, every one as written%s\n", n,
              need_data ? ", each with its JSON" : "");
  return 0;
}
