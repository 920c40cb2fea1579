#pragma once
// Memory from a backend, freed with its owner: an executor's activations and its layers' plans,
// a compiled step's buffers. Nothing is allocated after the owner is set up.
#include <cstddef>
#include <utility>
#include <vector>

#include "kernels/backend.hpp"

namespace mgt {

class BackendMemory {
 public:
  // counted: device allocations count against the test builds' cap (MGTRAIN_TEST_DEVICE_MEMORY_MB);
  // host-side executors (the CPU path's model) are not the device being rehearsed.
  explicit BackendMemory(kernels::Backend& backend, bool counted = true) : backend_(backend), counted_(counted) {}
  ~BackendMemory() { release_all(); }
  BackendMemory(const BackendMemory&) = delete;
  BackendMemory& operator=(const BackendMemory&) = delete;
  // Zero-filled.
  template <typename T>
  T* device(size_t count) {
    return static_cast<T*>(device_bytes(count * sizeof(T)));
  }
  template <typename T>
  T* host(size_t count) {
    return static_cast<T*>(host_bytes(count * sizeof(T)));
  }
  void* device_bytes(size_t bytes);
  void* host_bytes(size_t bytes);
  void release_all() noexcept;
  kernels::Backend& backend() { return backend_; }

 private:
  kernels::Backend& backend_;
  bool counted_;
  std::vector<std::pair<void*, size_t>> device_;
  std::vector<void*> host_;
};

}  // namespace mgt
