#pragma once
// Memory from a backend, freed with its owner: an executor's activations and its layers' plans,
// a compiled step's buffers. Nothing is allocated after the owner is set up.
#include <cstddef>
#include <string>
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

  // Checked mode (checked_mode()): each device allocation, in host memory (the CPU backend), gets
  // a guard of kGuardBytes after it, filled with a pattern, and what it is for (`label`, say "the
  // output of layer 'fc1' [16, 64]"). damaged_guard() names the first allocation whose guard
  // changed, with the bytes that did, or gives "".
  static constexpr size_t kGuardBytes = 256;
  void guard(bool on) { guarded_ = on && backend_.describe() == "cpu"; }
  void* device_bytes(size_t bytes, std::string label);
  std::string damaged_guard() const;

 private:
  struct Guarded {
    unsigned char* begin;
    size_t bytes;
    std::string label;
  };
  kernels::Backend& backend_;
  bool counted_;
  bool guarded_ = false;
  std::vector<std::pair<void*, size_t>> device_;
  std::vector<void*> host_;
  std::vector<Guarded> guarded_regions_;
};

// Checked mode for plugin authors: MGTRAIN_CHECKED=1 in the environment (read once). The layers'
// memory gets guards that are checked after every layer's forward and backward, so a layer that
// writes past its output or its planned buffers is named at once instead of corrupting the heap.
bool checked_mode();

}  // namespace mgt
