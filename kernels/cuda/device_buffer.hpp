#pragma once
// Owned device memory for `count` elements of a trivially copyable T: allocated on construction,
// freed on destruction, movable, not copyable. Copies to and from the host are synchronous.
#include <cstddef>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "kernels/cuda/runtime.hpp"
#include "mgtrain/error.hpp"

namespace mgt::cuda {

template <typename T>
class DeviceBuffer {
  static_assert(std::is_trivially_copyable_v<T>, "device memory holds trivially copyable values");

 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t count) : data_(static_cast<T*>(device_malloc(count * sizeof(T)))), size_(count) {}
  explicit DeviceBuffer(const std::vector<T>& host) : DeviceBuffer(host.size()) { upload(host.data(), host.size()); }
  ~DeviceBuffer() { device_free(data_); }

  DeviceBuffer(DeviceBuffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    if (this != &other) {
      device_free(data_);
      data_ = std::exchange(other.data_, nullptr);
      size_ = std::exchange(other.size_, 0);
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  T* data() { return data_; }
  const T* data() const { return data_; }
  size_t size() const { return size_; }
  size_t bytes() const { return size_ * sizeof(T); }
  bool empty() const { return size_ == 0; }

  // Host to the first `count` elements.
  void upload(const T* host, size_t count) {
    check_count(count, "upload");
    copy_to_device(data_, host, count * sizeof(T));
  }
  // The first `count` elements to the host.
  void download(T* host, size_t count) const {
    check_count(count, "download");
    copy_to_host(host, data_, count * sizeof(T));
  }
  std::vector<T> to_host() const {
    std::vector<T> host(size_);
    download(host.data(), size_);
    return host;
  }
  void fill_zero() { fill_bytes(data_, 0, bytes()); }

 private:
  void check_count(size_t count, const char* what) const {
    MGT_CHECK(count <= size_, Error,
              std::string("device buffer ") + what + " of " + std::to_string(count) + " elements, the buffer holds " +
                  std::to_string(size_));
  }

  T* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace mgt::cuda
