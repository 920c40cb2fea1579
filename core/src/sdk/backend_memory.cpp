#include "backend_memory.hpp"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "mgtrain/error.hpp"

namespace mgt {

namespace {

std::atomic<size_t> capped_device_bytes{0};

#ifdef MGTRAIN_TEST_HOOKS
// Test builds only: MGTRAIN_TEST_DEVICE_MEMORY_MB caps the device memory executors may hold in
// this process, on any backend, so that running out of GPU memory is rehearsed on purpose.
size_t test_device_memory_cap() {
  static const size_t cap = [] {
    const char* text = std::getenv("MGTRAIN_TEST_DEVICE_MEMORY_MB");
    return text ? static_cast<size_t>(std::strtod(text, nullptr) * 1048576.0) : size_t{0};
  }();
  return cap;
}

// Throws OutOfMemoryError when `bytes` more counted bytes would pass the test cap.
void check_test_cap(size_t bytes) {
  if (const size_t cap = test_device_memory_cap(); cap != 0 && capped_device_bytes + bytes > cap) {
    char text[160];
    std::snprintf(text, sizeof text,
                  "allocation of %.1f MB with %.1f MB free of %.1f MB (MGTRAIN_TEST_DEVICE_MEMORY_MB)",
                  static_cast<double>(bytes) / 1048576.0, static_cast<double>(cap - capped_device_bytes) / 1048576.0,
                  static_cast<double>(cap) / 1048576.0);
    throw OutOfMemoryError(text);
  }
}
#else
// A build without tests has no cap.
void check_test_cap(size_t) {}
#endif

}  // namespace

namespace {
constexpr unsigned char kGuardPattern = 0xA5;
}  // namespace

bool checked_mode() {
  static const bool on = [] {
    const char* text = std::getenv("MGTRAIN_CHECKED");
    return text && std::strcmp(text, "1") == 0;
  }();
  return on;
}

void* BackendMemory::device_bytes(size_t bytes, std::string label) {
  if (!guarded_ || bytes == 0) return device_bytes(bytes);
  auto* p = static_cast<unsigned char*>(device_bytes(bytes + kGuardBytes));
  std::memset(p + bytes, kGuardPattern, kGuardBytes);
  guarded_regions_.push_back({p, bytes, std::move(label)});
  return p;
}

std::string BackendMemory::damaged_guard() const {
  for (const Guarded& g : guarded_regions_) {
    const unsigned char* guard = g.begin + g.bytes;
    size_t first = kGuardBytes, last = 0;
    for (size_t i = 0; i < kGuardBytes; ++i)
      if (guard[i] != kGuardPattern) {
        first = std::min(first, i);
        last = i;
      }
    if (first == kGuardBytes) continue;
    return g.label + " (" + std::to_string(g.bytes) + " bytes): bytes " + std::to_string(first) + ".." +
           std::to_string(last) + " after its end changed" +
           (last + 1 == kGuardBytes ? " (and perhaps more: the guard is " + std::to_string(kGuardBytes) + " bytes)"
                                    : "");
  }
  return "";
}

void BackendMemory::release_all() noexcept {
  for (const auto& [p, bytes] : device_) {
    backend_.release(p);
    if (counted_) capped_device_bytes -= bytes;
  }
  for (void* p : host_) backend_.release_host(p);
  device_.clear();
  host_.clear();
  guarded_regions_.clear();
}

void* BackendMemory::device_bytes(size_t bytes) {
  if (bytes == 0) return nullptr;
  if (counted_) check_test_cap(bytes);
  void* p = backend_.allocate(bytes);
  device_.emplace_back(p, bytes);
  if (counted_) capped_device_bytes += bytes;
  backend_.zero(p, bytes);
  return p;
}

void* BackendMemory::host_bytes(size_t bytes) {
  if (bytes == 0) return nullptr;
  void* p = backend_.allocate_host(bytes);
  host_.push_back(p);
  std::memset(p, 0, bytes);
  return p;
}

}  // namespace mgt
