// SPDX-License-Identifier: MPL-2.0
//
// cudaipc.hpp: a header-only C++17 wrapper over cudaipc.h. RAII handles
// (publisher, subscriber, frame, loan; move-only, freed by their
// destructors), errors as exceptions (cudaipc::error, with the C status and
// the library's message), and range-for over a subscriber's frames:
//
//   cudaipc::subscriber sub("cam0");
//   for (cudaipc::frame& f : sub.frames()) { ... }   // ends at end of stream
//
// Why exceptions: constructors (opening a channel) can fail, range-for has
// no place for an error value, and the applications this is for (OpenCV,
// TensorRT) already throw. The C calls stay available for code built without
// exceptions; every object gives its C handle with .get().
//
// CUDA streams are taken as void* (a CUstream or cudaStream_t converts to
// it), so this header needs no CUDA header. Link with -lcudaipc
// (pkg-config --cflags --libs cudaipc).

#ifndef CUDAIPC_HPP
#define CUDAIPC_HPP

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

#include "cudaipc.h"

namespace cudaipc {

// A failed call: status() is the C status (CUDAIPC_ERROR_TIMEOUT, ...),
// what() the library's message.
class error : public std::runtime_error {
 public:
  error(cudaipc_status status, const std::string& message)
      : std::runtime_error(message), status_(status) {}
  cudaipc_status status() const noexcept { return status_; }

 private:
  cudaipc_status status_;
};

namespace detail {
// Throws for an error status (100 and up); returns outcomes (OK,
// END_OF_STREAM, DROPPED).
inline cudaipc_status check(cudaipc_status status) {
  if (static_cast<int32_t>(status) >= 100) {
    throw error(status, std::string(cudaipc_status_name(status)) + ": " +
                            cudaipc_last_error_message());
  }
  return status;
}

inline int64_t to_ms(std::chrono::milliseconds timeout) {
  return static_cast<int64_t>(timeout.count());
}
}  // namespace detail

// Waits that never time out.
inline constexpr std::chrono::milliseconds forever{-1};

// GStreamer's default layout of a width x height frame of format.
inline cudaipc_layout default_layout(cudaipc_format format, uint32_t width, uint32_t height) {
  cudaipc_layout layout{};
  detail::check(cudaipc_layout_init(format, width, height, &layout));
  return layout;
}

// Publisher options with the defaults filled in; change the public fields.
struct publisher_options : cudaipc_publisher_options {
  publisher_options() : cudaipc_publisher_options{} {
    detail::check(cudaipc_publisher_options_init(this));
  }
};

// Subscriber options with the defaults filled in.
struct subscriber_options : cudaipc_subscriber_options {
  subscriber_options() : cudaipc_subscriber_options{} {
    detail::check(cudaipc_subscriber_options_init(this));
  }
};

// The data published with a frame (frame::app_data()): none, bytes, or
// JSON text. bytes points into the frame: valid until it is released.
struct app_data {
  uint32_t kind = CUDAIPC_FRAME_DATA_NONE;  // a cudaipc_frame_data_kind
  const void* bytes = nullptr;
  std::size_t size = 0;

  bool empty() const noexcept { return kind == CUDAIPC_FRAME_DATA_NONE; }
  bool is_json() const noexcept { return kind == CUDAIPC_FRAME_DATA_JSON; }
  // The JSON text (not parsed); empty unless is_json().
  std::string_view json() const noexcept {
    return is_json() ? std::string_view(static_cast<const char*>(bytes), size) : std::string_view();
  }
};

// A slot lent by publisher::loan(). Write the frame at data() (host
// transport) or device_ptr() (cuda transport), then publish(); destroyed
// unpublished, the slot goes back.
class loan {
 public:
  explicit loan(cudaipc_loan* handle) : handle_(handle), info_{} {
    info_.struct_size = sizeof info_;
    if (cudaipc_status s = cudaipc_loan_get_info(handle_, &info_); s != CUDAIPC_OK) {
      cudaipc_loan_discard(handle_);
      detail::check(s);
    }
  }
  loan(loan&& other) noexcept : handle_(std::exchange(other.handle_, nullptr)), info_(other.info_) {}
  loan& operator=(loan&& other) noexcept {
    if (this != &other) {
      discard();
      handle_ = std::exchange(other.handle_, nullptr);
      info_ = other.info_;
    }
    return *this;
  }
  loan(const loan&) = delete;
  loan& operator=(const loan&) = delete;
  ~loan() { discard(); }

  const cudaipc_layout& layout() const noexcept { return info_.layout; }
  std::size_t size() const noexcept { return static_cast<std::size_t>(info_.layout.frame_size); }
  bool is_cuda() const noexcept { return info_.is_cuda != 0; }
  // Host transport: the slot's bytes; nullptr on the cuda transport.
  uint8_t* data() const noexcept { return info_.host_ptr; }
  // Cuda transport: the slot's device address (a CUdeviceptr).
  uint64_t device_ptr() const noexcept { return info_.device_ptr; }
  // Cuda transport: the slot's own CUstream.
  void* cuda_stream() const noexcept { return info_.cuda_stream; }
  // Makes stream wait (on the GPU) until the slot may be written.
  void stream_wait(void* stream) { detail::check(cudaipc_loan_stream_wait(handle_, stream)); }
  // Orders the publication after the work queued on stream so far.
  void publish_after(void* stream) {
    detail::check(cudaipc_loan_publish_after_stream(handle_, stream));
  }
  // Data that travels with the frame (copied; replaces data set before):
  // bytes, or JSON text. Throws CUDAIPC_ERROR_INVALID_ARGUMENT beyond the
  // channel's frame_data_bound (less 16 bytes).
  void set_app_data(const void* data, std::size_t size) {
    detail::check(cudaipc_loan_set_data(handle_, data, size));
  }
  void set_app_json(const std::string& json) {
    detail::check(cudaipc_loan_set_json(handle_, json.c_str()));
  }
  // Publishes the frame (pts in nanoseconds; negative: none). The loan is
  // spent whatever the result.
  void publish(int64_t pts_ns = -1) {
    detail::check(cudaipc_loan_publish(std::exchange(handle_, nullptr), pts_ns));
  }
  // Gives the slot back unpublished (what the destructor does).
  void discard() noexcept {
    if (handle_ != nullptr) cudaipc_loan_discard(std::exchange(handle_, nullptr));
  }
  cudaipc_loan* get() const noexcept { return handle_; }

 private:
  cudaipc_loan* handle_;
  cudaipc_loan_info info_;
};

// The producer end of a channel (what rscudaipcsink is to a pipeline).
class publisher {
 public:
  publisher(const std::string& channel, const cudaipc_layout& layout,
            const publisher_options& options = publisher_options())
      : handle_(nullptr) {
    detail::check(cudaipc_publisher_create(channel.c_str(), &layout, &options, &handle_));
  }
  publisher(publisher&& other) noexcept : handle_(std::exchange(other.handle_, nullptr)) {}
  publisher& operator=(publisher&& other) noexcept {
    if (this != &other) {
      reset();
      handle_ = std::exchange(other.handle_, nullptr);
    }
    return *this;
  }
  publisher(const publisher&) = delete;
  publisher& operator=(const publisher&) = delete;
  ~publisher() { reset(); }

  // Copies size bytes (the layout's frame_size) into a slot and publishes
  // them; false if the frame was dropped (when_full DROP, every slot held).
  bool publish(const void* data, std::size_t size, int64_t pts_ns = -1) {
    return detail::check(cudaipc_publisher_publish(handle_, data, size, pts_ns)) == CUDAIPC_OK;
  }
  // publish(), with app_size bytes at app (or the JSON text json)
  // travelling with the frame.
  bool publish_with_data(const void* data, std::size_t size, int64_t pts_ns, const void* app,
                         std::size_t app_size) {
    return detail::check(cudaipc_publisher_publish_with_data(handle_, data, size, pts_ns, app,
                                                             app_size)) == CUDAIPC_OK;
  }
  bool publish_with_json(const void* data, std::size_t size, int64_t pts_ns,
                         const std::string& json) {
    return detail::check(cudaipc_publisher_publish_with_json(handle_, data, size, pts_ns,
                                                             json.c_str())) == CUDAIPC_OK;
  }
  // A free slot to write the next frame into in place.
  cudaipc::loan loan() {
    cudaipc_loan* handle = nullptr;
    detail::check(cudaipc_publisher_loan(handle_, &handle));
    return cudaipc::loan(handle);
  }
  cudaipc_layout layout() const {
    cudaipc_layout out{};
    detail::check(cudaipc_publisher_get_layout(handle_, &out));
    return out;
  }
  bool is_cuda() const {
    int32_t cuda = 0;
    detail::check(cudaipc_publisher_is_cuda(handle_, &cuda));
    return cuda != 0;
  }
  uint32_t consumer_count() const {
    uint32_t count = 0;
    detail::check(cudaipc_publisher_consumer_count(handle_, &count));
    return count;
  }
  // Ends the stream after the frames published so far.
  void eos() { detail::check(cudaipc_publisher_eos(handle_)); }
  // Closes the channel from any thread; blocked calls throw CLOSED.
  void close() { detail::check(cudaipc_publisher_close(handle_)); }
  cudaipc_publisher* get() const noexcept { return handle_; }

 private:
  void reset() noexcept {
    if (handle_ != nullptr) cudaipc_publisher_free(std::exchange(handle_, nullptr));
  }
  cudaipc_publisher* handle_;
};

// A frame read by a subscriber. It holds its slot until destroyed or
// released. On the cuda transport, read it on a stream after
// stream_wait(stream) and call release_after(stream) before it goes: the
// slot then goes back once that work has run, with no host sync.
class frame {
 public:
  explicit frame(cudaipc_frame* handle) : handle_(handle), info_{} {
    info_.struct_size = sizeof info_;
    if (cudaipc_status s = cudaipc_frame_get_info(handle_, &info_); s != CUDAIPC_OK) {
      cudaipc_frame_release(handle_);
      detail::check(s);
    }
  }
  frame(frame&& other) noexcept : handle_(std::exchange(other.handle_, nullptr)), info_(other.info_) {}
  frame& operator=(frame&& other) noexcept {
    if (this != &other) {
      release();
      handle_ = std::exchange(other.handle_, nullptr);
      info_ = other.info_;
    }
    return *this;
  }
  frame(const frame&) = delete;
  frame& operator=(const frame&) = delete;
  ~frame() { release(); }

  const cudaipc_frame_info& info() const noexcept { return info_; }
  const cudaipc_layout& layout() const noexcept { return info_.layout; }
  std::size_t size() const noexcept { return static_cast<std::size_t>(info_.layout.frame_size); }
  uint64_t sequence() const noexcept { return info_.sequence; }
  // Nanoseconds; -1: none.
  int64_t pts_ns() const noexcept { return info_.pts_ns; }
  bool is_cuda() const noexcept { return info_.is_cuda != 0; }
  // Host transport: the frame's bytes; nullptr on the cuda transport.
  const uint8_t* data() const noexcept { return info_.host_ptr; }
  // Cuda transport: the frame's device address (a CUdeviceptr).
  uint64_t device_ptr() const noexcept { return info_.device_ptr; }
  void* cuda_stream() const noexcept { return info_.cuda_stream; }
  // The data the producer published with the frame (empty(): none).
  cudaipc::app_data app_data() const {
    cudaipc::app_data out;
    detail::check(cudaipc_frame_get_data(handle_, &out.bytes, &out.size, &out.kind));
    return out;
  }
  // Copies the frame to host memory (size: the frame's), downloading it on
  // the cuda transport.
  void copy_to_host(void* dst, std::size_t size) const {
    detail::check(cudaipc_frame_copy_to_host(handle_, dst, size));
  }
  // Makes stream wait, on the GPU, for the producer's writes.
  void stream_wait(void* stream) const {
    detail::check(cudaipc_frame_stream_wait(handle_, stream));
  }
  // Orders the release after the work queued on stream so far.
  void release_after(void* stream) const {
    detail::check(cudaipc_frame_release_after_stream(handle_, stream));
  }
  // Gives the slot back now (what the destructor does).
  void release() noexcept {
    if (handle_ != nullptr) cudaipc_frame_release(std::exchange(handle_, nullptr));
  }
  cudaipc_frame* get() const noexcept { return handle_; }

 private:
  cudaipc_frame* handle_;
  cudaipc_frame_info info_;
};

class subscriber;

// The frames of a subscriber for range-for, until the end of the stream;
// a timeout or any other error throws.
class frame_range {
 public:
  class iterator {
   public:
    using iterator_category = std::input_iterator_tag;
    using value_type = cudaipc::frame;
    using difference_type = std::ptrdiff_t;
    using pointer = cudaipc::frame*;
    using reference = cudaipc::frame&;

    iterator() = default;
    reference operator*() { return *current_; }
    pointer operator->() { return &*current_; }
    inline iterator& operator++();
    bool operator==(const iterator& other) const { return done() == other.done(); }
    bool operator!=(const iterator& other) const { return !(*this == other); }

   private:
    friend class frame_range;
    iterator(subscriber* source, std::chrono::milliseconds timeout)
        : source_(source), timeout_(timeout) {
      ++*this;
    }
    bool done() const { return !current_.has_value(); }
    subscriber* source_ = nullptr;
    std::chrono::milliseconds timeout_{forever};
    std::optional<cudaipc::frame> current_;
  };

  frame_range(subscriber& source, std::chrono::milliseconds timeout)
      : source_(&source), timeout_(timeout) {}
  iterator begin() { return iterator(source_, timeout_); }
  iterator end() { return iterator(); }

 private:
  subscriber* source_;
  std::chrono::milliseconds timeout_;
};

// The consumer end of a channel (what rscudaipcsrc is to a pipeline).
class subscriber {
 public:
  explicit subscriber(const std::string& channel,
                      const subscriber_options& options = subscriber_options())
      : handle_(nullptr) {
    detail::check(cudaipc_subscriber_open(channel.c_str(), &options, &handle_));
  }
  subscriber(subscriber&& other) noexcept : handle_(std::exchange(other.handle_, nullptr)) {}
  subscriber& operator=(subscriber&& other) noexcept {
    if (this != &other) {
      reset();
      handle_ = std::exchange(other.handle_, nullptr);
    }
    return *this;
  }
  subscriber(const subscriber&) = delete;
  subscriber& operator=(const subscriber&) = delete;
  ~subscriber() { reset(); }

  // The next frame, or nullopt at the end of the stream (and at once on
  // every later call, until the producer starts a new stream: then its
  // first frame); throws on a timeout (status CUDAIPC_ERROR_TIMEOUT) and on
  // a close (CLOSED).
  std::optional<frame> next(std::chrono::milliseconds timeout = forever) {
    cudaipc_frame* handle = nullptr;
    if (detail::check(cudaipc_subscriber_next_frame(handle_, detail::to_ms(timeout), &handle)) ==
        CUDAIPC_END_OF_STREAM) {
      return std::nullopt;
    }
    return std::optional<frame>(std::in_place, handle);
  }
  // Range-for over the frames until the end of the stream; each frame is
  // released when the loop moves on.
  frame_range frames(std::chrono::milliseconds timeout = forever) {
    return frame_range(*this, timeout);
  }
  uint64_t frames_missed() const {
    uint64_t missed = 0;
    detail::check(cudaipc_subscriber_frames_missed(handle_, &missed));
    return missed;
  }
  bool is_cuda() const {
    int32_t cuda = 0;
    detail::check(cudaipc_subscriber_is_cuda(handle_, &cuda));
    return cuda != 0;
  }
  // Wakes a next() blocked on another thread (it throws CLOSED).
  void close() { detail::check(cudaipc_subscriber_close(handle_)); }
  cudaipc_subscriber* get() const noexcept { return handle_; }

 private:
  void reset() noexcept {
    if (handle_ != nullptr) cudaipc_subscriber_free(std::exchange(handle_, nullptr));
  }
  cudaipc_subscriber* handle_;
};

inline frame_range::iterator& frame_range::iterator::operator++() {
  // The previous frame goes back before the next is asked for.
  current_.reset();
  current_ = source_->next(timeout_);
  return *this;
}

}  // namespace cudaipc

#endif  // CUDAIPC_HPP
