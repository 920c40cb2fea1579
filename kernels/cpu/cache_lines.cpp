#include "kernels/cpu/cache_lines.hpp"

#include <cstdint>
#include <cstring>

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

namespace mgt::kernels {

#if defined(__x86_64__)
namespace {

constexpr uintptr_t kLine = 64;

bool has_clflushopt() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) && (ebx & bit_CLFLUSHOPT) != 0;
}

__attribute__((target("clflushopt"))) void clflushopt_lines(uintptr_t first, uintptr_t end) {
  for (uintptr_t line = first; line < end; line += kLine) _mm_clflushopt(reinterpret_cast<void*>(line));
}

}  // namespace

void stream_copy(float* dst, const float* src, size_t n) {
  // Up to the first line boundary, and after the last, ordinary stores: a partial line streamed
  // would go out as a partial write.
  const auto start = reinterpret_cast<uintptr_t>(dst);
  size_t head = ((start + kLine - 1) / kLine * kLine - start) / sizeof(float);
  if (start % sizeof(float) != 0 || head > n) head = n;
  std::memcpy(dst, src, head * sizeof(float));
  constexpr size_t kLineFloats = kLine / sizeof(float);
  size_t at = head;
  for (; at + kLineFloats <= n; at += kLineFloats)
    for (size_t q = 0; q < kLineFloats; q += 4) _mm_stream_ps(dst + at + q, _mm_loadu_ps(src + at + q));
  std::memcpy(dst + at, src + at, (n - at) * sizeof(float));
}

void stream_fence() { _mm_sfence(); }

void evict_lines(const void* p, size_t bytes) {
  static const bool supported = has_clflushopt();
  if (!supported || bytes == 0) return;
  const auto begin = reinterpret_cast<uintptr_t>(p);
  // No fence: coherence does not depend on the flushes, and a store that meets one still under
  // way only loses its benefit.
  clflushopt_lines(begin / kLine * kLine, begin + bytes);
}
#else
void stream_copy(float* dst, const float* src, size_t n) { std::memcpy(dst, src, n * sizeof(float)); }
void stream_fence() {}
void evict_lines(const void*, size_t) {}
#endif

}  // namespace mgt::kernels
