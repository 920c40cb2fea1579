#include "kernels/cpu/tree_outer_products.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define MGT_HAVE_SIMD_KERNELS 1
#endif

namespace mgt::kernels {

namespace {

// Levels of the binary counter that merges leaves into the balanced tree: enough for 2^23 shards.
constexpr int kMaxLevels = 24;

}  // namespace

void tree_outer_products_reference(const float* dy, const float* x, int64_t shards, int64_t rows, int64_t out,
                                   int64_t in, float* dst) {
  for (int64_t o = 0; o < out; ++o) {
    for (int64_t i = 0; i < in; ++i) {
      float level_sum[kMaxLevels];
      bool occupied[kMaxLevels] = {};
      for (int64_t s = 0; s < shards; ++s) {
        const float* dy_s = dy + s * rows * out;
        const float* x_s = x + s * rows * in;
        float sum = 0.0f;
        for (int64_t r = 0; r < rows; ++r) sum = std::fma(dy_s[r * out + o], x_s[r * in + i], sum);
        // A finished subtree merges with the earlier sibling of its size: left + right.
        int level = 0;
        for (; occupied[level]; ++level) {
          sum = level_sum[level] + sum;
          occupied[level] = false;
        }
        level_sum[level] = sum;
        occupied[level] = true;
      }
      int top = 0;
      while (!occupied[top]) ++top;
      dst[o * in + i] = level_sum[top];
    }
  }
}

void tree_column_sums(const float* dy, int64_t shards, int64_t rows, int64_t cols, float* dst) {
  // One buffer per level of the binary counter plus the leaf being summed (kept between calls: this
  // runs every step); per column the order of the additions is fixed, so vectorizing across
  // columns changes nothing.
  thread_local std::vector<std::vector<float>> level_sum;
  thread_local std::vector<float> sum;
  for (auto& level : level_sum) level.resize(static_cast<size_t>(cols));
  sum.resize(static_cast<size_t>(cols));
  bool occupied[kMaxLevels] = {};
  for (int64_t s = 0; s < shards; ++s) {
    std::fill(sum.begin(), sum.end(), 0.0f);
    const float* dy_s = dy + s * rows * cols;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) sum[c] += dy_s[r * cols + c];
    size_t level = 0;
    for (; occupied[level]; ++level) {
      for (int64_t c = 0; c < cols; ++c) sum[c] = level_sum[level][c] + sum[c];
      occupied[level] = false;
    }
    if (level == level_sum.size()) level_sum.emplace_back(static_cast<size_t>(cols));
    level_sum[level].swap(sum);
    occupied[level] = true;
  }
  size_t top = 0;
  while (!occupied[top]) ++top;
  std::copy(level_sum[top].begin(), level_sum[top].end(), dst);
}

#ifdef MGT_HAVE_SIMD_KERNELS
namespace {

// A pass of at most this many rows (all shards together) has the whole tree summed in registers,
// block by block; more rows are summed into leaves in memory a chunk at a time, which keeps the
// rows a block reads in L1 (measured at the gpt's and the MLP's shapes on AVX-512 and AVX2: the
// register tree is the faster up to about 512 rows, the chunks from about 1,024).
constexpr int64_t kRegisterTreeMaxRows = 512;

// The leaves-in-memory strategy's workspace, kept between calls (this runs every step).
float* workspace(int64_t floats) {
  thread_local std::vector<float> buffer;
  if (buffer.size() < static_cast<size_t>(floats)) buffer.resize(static_cast<size_t>(floats));
  return buffer.data();
}

#pragma GCC push_options
#pragma GCC target("avx512f")
namespace avx512 {

struct Vec {
  static constexpr int W = 16;
  using V = __m512;
  using M = __mmask16;
  static M mask(int64_t lanes) { return lanes >= 16 ? M(0xffff) : lanes > 0 ? M((1u << lanes) - 1) : M(0); }
  static V zero() { return _mm512_setzero_ps(); }
  static V load(const float* p) { return _mm512_loadu_ps(p); }
  static V load(const float* p, M m) { return _mm512_maskz_loadu_ps(m, p); }
  static V broadcast(const float* p) { return _mm512_set1_ps(*p); }
  static V fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static V add(V a, V b) { return _mm512_add_ps(a, b); }
  static void store(float* p, V v) { _mm512_storeu_ps(p, v); }
  static void store(float* p, V v, M m) { _mm512_mask_storeu_ps(p, m, v); }
};
// 24 accumulators, a row's three vectors of x and a factor in the 32 registers.
constexpr int kBlockRows = 8;
constexpr int kBlockVectors = 3;
#include "kernels/cpu/tree_outer_products_simd.hpp"

}  // namespace avx512
#pragma GCC pop_options

// AVX2 and FMA, which CPUs without AVX-512 have (AMD's Zen 1-3, Intel's before Skylake-SP).
#pragma GCC push_options
#pragma GCC target("avx2,fma")
namespace avx2 {

struct Vec {
  static constexpr int W = 8;
  using V = __m256;
  using M = __m256i;
  // Lane j is loaded and stored when its sign bit is set: j < lanes.
  static M mask(int64_t lanes) {
    const int n = lanes >= 8 ? 8 : lanes > 0 ? static_cast<int>(lanes) : 0;
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  }
  static V zero() { return _mm256_setzero_ps(); }
  static V load(const float* p) { return _mm256_loadu_ps(p); }
  static V load(const float* p, M m) { return _mm256_maskload_ps(p, m); }
  static V broadcast(const float* p) { return _mm256_broadcast_ss(p); }
  static V fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static V add(V a, V b) { return _mm256_add_ps(a, b); }
  static void store(float* p, V v) { _mm256_storeu_ps(p, v); }
  static void store(float* p, V v, M m) { _mm256_maskstore_ps(p, m, v); }
};
// 12 accumulators, a row's two vectors of x and a factor in the 16 registers.
constexpr int kBlockRows = 6;
constexpr int kBlockVectors = 2;
#include "kernels/cpu/tree_outer_products_simd.hpp"

}  // namespace avx2
#pragma GCC pop_options

}  // namespace

#endif

bool tree_outer_products_avx512(const float* dy, const float* x, int64_t shards, int64_t rows, int64_t out, int64_t in,
                                float* dst) {
#ifdef MGT_HAVE_SIMD_KERNELS
  if (__builtin_cpu_supports("avx512f")) {
    avx512::run(dy, x, shards, rows, out, in, dst);
    return true;
  }
#endif
  (void)dy, (void)x, (void)shards, (void)rows, (void)out, (void)in, (void)dst;
  return false;
}

bool tree_outer_products_avx2(const float* dy, const float* x, int64_t shards, int64_t rows, int64_t out, int64_t in,
                              float* dst) {
#ifdef MGT_HAVE_SIMD_KERNELS
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    avx2::run(dy, x, shards, rows, out, in, dst);
    return true;
  }
#endif
  (void)dy, (void)x, (void)shards, (void)rows, (void)out, (void)in, (void)dst;
  return false;
}

void tree_outer_products(const float* dy, const float* x, int64_t shards, int64_t rows, int64_t out, int64_t in,
                         float* dst) {
  if (tree_outer_products_avx512(dy, x, shards, rows, out, in, dst)) return;
  if (tree_outer_products_avx2(dy, x, shards, rows, out, in, dst)) return;
  tree_outer_products_reference(dy, x, shards, rows, out, in, dst);
}

}  // namespace mgt::kernels
