// This process's resident memory: the peak covers memory touched and freed again, and
// reset_peak_rss() starts it over from what is resident now, which mgtrain bench relies on to
// report the all-rank run's peak apart from rank 0's reference run before it.
#include <gtest/gtest.h>

#include <sys/mman.h>

#include <cstring>

#include "base/resident_memory.hpp"

namespace {

constexpr int64_t kBlockMb = 96;

// Touches kBlockMb of fresh memory and gives it back to the kernel. mmap and munmap, not new and
// delete: an allocator may keep freed memory resident (AddressSanitizer's quarantine does), and
// what is checked here is the kernel's accounting.
void touch_and_free() {
  const auto bytes = static_cast<size_t>(kBlockMb) << 20;
  void* block = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(block, MAP_FAILED);
  std::memset(block, 1, bytes);
  ASSERT_EQ(munmap(block, bytes), 0);
}

TEST(ResidentMemory, PeakCoversFreedMemoryUntilReset) {
  const int64_t before = mgt::current_rss_kib();
  ASSERT_GT(before, 0) << "/proc/self/statm cannot be read";
  ASSERT_NO_FATAL_FAILURE(touch_and_free());
  const int64_t peak = mgt::peak_rss_kib();
  EXPECT_GE(peak, before + (kBlockMb - 8) * 1024) << "the freed block is not in the peak";
  if (!mgt::reset_peak_rss()) GTEST_SKIP() << "/proc/self/clear_refs refused the reset (Linux before 4.0?)";
  const int64_t after = mgt::peak_rss_kib();
  EXPECT_LT(after, peak - kBlockMb / 2 * 1024) << "the reset kept the freed block in the peak";
  EXPECT_GE(after + 1024, mgt::current_rss_kib());
}

}  // namespace
