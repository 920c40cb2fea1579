// The cost of a data row's CRC-32 (datasets/crc32.hpp, libdeflate's) against zlib's, on rows of 784
// bytes (a Fashion-MNIST sample as uint8): us a row, medians of 5 passes over 60,000 rows.
// Build and run: benchmarks/row_crc32.sh
#include <zlib.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "datasets/crc32.hpp"

namespace {

constexpr size_t kRows = 60000, kRowBytes = 784;

template <typename Crc>
double us_per_row(const std::vector<unsigned char>& rows, Crc crc_of) {
  std::vector<double> passes;
  uint32_t sink = 0;
  for (int pass = 0; pass < 5; ++pass) {
    const auto t0 = std::chrono::steady_clock::now();
    for (size_t r = 0; r < kRows; ++r) sink ^= crc_of(rows.data() + r * kRowBytes);
    passes.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / kRows);
  }
  std::sort(passes.begin(), passes.end());
  static volatile uint32_t kept;
  kept = sink;  // the sums are used: the loops stay
  return passes[2];
}

}  // namespace

int main() {
  std::vector<unsigned char> rows(kRows * kRowBytes);
  uint32_t state = 1;
  for (unsigned char& b : rows) b = static_cast<unsigned char>((state = state * 1103515245u + 12345u) >> 24);
  const double zlib =
      us_per_row(rows, [](const unsigned char* row) { return static_cast<uint32_t>(crc32(0, row, kRowBytes)); });
  const double deflate =
      us_per_row(rows, [](const unsigned char* row) { return mgt::crc32_update(0, row, kRowBytes); });
  std::printf("CRC-32 of a %zu-byte row: zlib %.3f us, libdeflate %.3f us (medians of 5 passes)\n", kRowBytes, zlib,
              deflate);
  return 0;
}
