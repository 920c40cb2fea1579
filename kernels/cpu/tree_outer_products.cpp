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

constexpr int64_t kBlockRows = 4;  // output rows (o) per block

// Each shard's dy transposed ([shard][out][rows]), so that a block's factors are adjacent.
const float* transposed(const float* dy, int64_t shards, int64_t rows, int64_t out) {
  thread_local std::vector<float> dy_t;
  dy_t.resize(static_cast<size_t>(shards * rows * out));
  for (int64_t s = 0; s < shards; ++s)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t o = 0; o < out; ++o) dy_t[(s * out + o) * rows + r] = dy[(s * rows + r) * out + o];
  return dy_t.data();
}

namespace avx512 {

constexpr int64_t kBlockVectors = 4;  // 16-float vectors of output columns (i) per block

// One block of the output: `Rows` rows (o0 ..) by 64 columns (i0 ..); with Tail, the columns
// past `in` are masked off. The same operations as the reference, 16 outputs per instruction.
// dy_t holds each shard's dy transposed ([shard][out][rows]), so a block's factors are adjacent.
template <int Rows, bool Tail>
__attribute__((target("avx512f"))) void tree_block(const float* dy_t, const float* x, int64_t shards, int64_t rows,
                                                   int64_t out, int64_t in, int64_t o0, int64_t i0, float* dst) {
  __mmask16 mask[kBlockVectors];
  for (int v = 0; v < kBlockVectors; ++v) {
    const int64_t left = in - i0 - 16 * v;
    mask[v] = left >= 16 ? __mmask16(0xffff) : left > 0 ? __mmask16((1u << left) - 1) : __mmask16(0);
  }
  __m512 level_sum[kMaxLevels][Rows][kBlockVectors];
  bool occupied[kMaxLevels] = {};
  for (int64_t s = 0; s < shards; ++s) {
    const float* g_s = dy_t + (s * out + o0) * rows;
    const float* x_s = x + s * rows * in + i0;
    __m512 sum[Rows][kBlockVectors];
    for (int k = 0; k < Rows; ++k)
      for (int v = 0; v < kBlockVectors; ++v) sum[k][v] = _mm512_setzero_ps();
    for (int64_t r = 0; r < rows; ++r) {
      __m512 xv[kBlockVectors];
      for (int v = 0; v < kBlockVectors; ++v)
        xv[v] = Tail ? _mm512_maskz_loadu_ps(mask[v], x_s + r * in + 16 * v) : _mm512_loadu_ps(x_s + r * in + 16 * v);
      for (int k = 0; k < Rows; ++k) {
        const __m512 g = _mm512_set1_ps(g_s[k * rows + r]);
        for (int v = 0; v < kBlockVectors; ++v) sum[k][v] = _mm512_fmadd_ps(g, xv[v], sum[k][v]);
      }
    }
    int level = 0;
    for (; occupied[level]; ++level) {
      for (int k = 0; k < Rows; ++k)
        for (int v = 0; v < kBlockVectors; ++v) sum[k][v] = _mm512_add_ps(level_sum[level][k][v], sum[k][v]);
      occupied[level] = false;
    }
    for (int k = 0; k < Rows; ++k)
      for (int v = 0; v < kBlockVectors; ++v) level_sum[level][k][v] = sum[k][v];
    occupied[level] = true;
  }
  int top = 0;
  while (!occupied[top]) ++top;
  for (int k = 0; k < Rows; ++k)
    for (int v = 0; v < kBlockVectors; ++v) {
      float* d = dst + (o0 + k) * in + i0 + 16 * v;
      if (Tail)
        _mm512_mask_storeu_ps(d, mask[v], level_sum[top][k][v]);
      else
        _mm512_storeu_ps(d, level_sum[top][k][v]);
    }
}

template <bool Tail>
__attribute__((target("avx512f"))) void tree_stripe(const float* dy_t, const float* x, int64_t shards, int64_t rows,
                                                    int64_t out, int64_t in, int64_t i0, float* dst) {
  int64_t o0 = 0;
  for (; o0 + kBlockRows <= out; o0 += kBlockRows)
    tree_block<kBlockRows, Tail>(dy_t, x, shards, rows, out, in, o0, i0, dst);
  switch (out - o0) {
    case 3:
      tree_block<3, Tail>(dy_t, x, shards, rows, out, in, o0, i0, dst);
      break;
    case 2:
      tree_block<2, Tail>(dy_t, x, shards, rows, out, in, o0, i0, dst);
      break;
    case 1:
      tree_block<1, Tail>(dy_t, x, shards, rows, out, in, o0, i0, dst);
      break;
    default:
      break;
  }
}

__attribute__((target("avx512f"))) void run(const float* dy, const float* x, int64_t shards, int64_t rows, int64_t out,
                                            int64_t in, float* dst) {
  const float* dy_t = transposed(dy, shards, rows, out);
  // Column stripes outside, so that the stripe of x (rows x 64 floats per shard) stays in L1
  // while every block of output rows uses it.
  constexpr int64_t kStripe = 16 * kBlockVectors;
  int64_t i0 = 0;
  for (; i0 + kStripe <= in; i0 += kStripe) tree_stripe<false>(dy_t, x, shards, rows, out, in, i0, dst);
  if (i0 < in) tree_stripe<true>(dy_t, x, shards, rows, out, in, i0, dst);
}

}  // namespace avx512

// The same with 8-float vectors (AVX2 and FMA, which CPUs without AVX-512 have: AMD's Zen 1-3,
// Intel's before Skylake-SP), two vectors a block: 8 accumulators, a row's two vectors of x and a
// factor fit in the 16 registers. Identical bits, operation for operation, to the reference.
namespace avx2 {

constexpr int64_t kBlockVectors = 2;  // 8-float vectors of output columns (i) per block

template <int Rows, bool Tail>
__attribute__((target("avx2,fma"))) void tree_block(const float* dy_t, const float* x, int64_t shards, int64_t rows,
                                                    int64_t out, int64_t in, int64_t o0, int64_t i0, float* dst) {
  __m256i mask[kBlockVectors];
  for (int v = 0; v < kBlockVectors; ++v) {
    const int64_t left = in - i0 - 8 * v;
    const int lanes = left >= 8 ? 8 : left > 0 ? static_cast<int>(left) : 0;
    // Lane j is loaded and stored when its sign bit is set: j < lanes.
    mask[v] = _mm256_cmpgt_epi32(_mm256_set1_epi32(lanes), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  }
  __m256 level_sum[kMaxLevels][Rows][kBlockVectors];
  bool occupied[kMaxLevels] = {};
  for (int64_t s = 0; s < shards; ++s) {
    const float* g_s = dy_t + (s * out + o0) * rows;
    const float* x_s = x + s * rows * in + i0;
    __m256 sum[Rows][kBlockVectors];
    for (int k = 0; k < Rows; ++k)
      for (int v = 0; v < kBlockVectors; ++v) sum[k][v] = _mm256_setzero_ps();
    for (int64_t r = 0; r < rows; ++r) {
      __m256 xv[kBlockVectors];
      for (int v = 0; v < kBlockVectors; ++v)
        xv[v] = Tail ? _mm256_maskload_ps(x_s + r * in + 8 * v, mask[v]) : _mm256_loadu_ps(x_s + r * in + 8 * v);
      for (int k = 0; k < Rows; ++k) {
        const __m256 g = _mm256_broadcast_ss(g_s + k * rows + r);
        for (int v = 0; v < kBlockVectors; ++v) sum[k][v] = _mm256_fmadd_ps(g, xv[v], sum[k][v]);
      }
    }
    int level = 0;
    for (; occupied[level]; ++level) {
      for (int k = 0; k < Rows; ++k)
        for (int v = 0; v < kBlockVectors; ++v) sum[k][v] = _mm256_add_ps(level_sum[level][k][v], sum[k][v]);
      occupied[level] = false;
    }
    for (int k = 0; k < Rows; ++k)
      for (int v = 0; v < kBlockVectors; ++v) level_sum[level][k][v] = sum[k][v];
    occupied[level] = true;
  }
  int top = 0;
  while (!occupied[top]) ++top;
  for (int k = 0; k < Rows; ++k)
    for (int v = 0; v < kBlockVectors; ++v) {
      float* d = dst + (o0 + k) * in + i0 + 8 * v;
      if (Tail)
        _mm256_maskstore_ps(d, mask[v], level_sum[top][k][v]);
      else
        _mm256_storeu_ps(d, level_sum[top][k][v]);
    }
}

template <bool Tail>
__attribute__((target("avx2,fma"))) void tree_stripe(const float* dy_t, const float* x, int64_t shards, int64_t rows,
                                                     int64_t out, int64_t in, int64_t i0, float* dst) {
  int64_t o0 = 0;
  for (; o0 + kBlockRows <= out; o0 += kBlockRows)
    tree_block<kBlockRows, Tail>(dy_t, x, shards, rows, out, in, o0, i0, dst);
  switch (out - o0) {
    case 3:
      tree_block<3, Tail>(dy_t, x, shards, rows, out, in, o0, i0, dst);
      break;
    case 2:
      tree_block<2, Tail>(dy_t, x, shards, rows, out, in, o0, i0, dst);
      break;
    case 1:
      tree_block<1, Tail>(dy_t, x, shards, rows, out, in, o0, i0, dst);
      break;
    default:
      break;
  }
}

__attribute__((target("avx2,fma"))) void run(const float* dy, const float* x, int64_t shards, int64_t rows, int64_t out,
                                             int64_t in, float* dst) {
  const float* dy_t = transposed(dy, shards, rows, out);
  constexpr int64_t kStripe = 8 * kBlockVectors;
  int64_t i0 = 0;
  for (; i0 + kStripe <= in; i0 += kStripe) tree_stripe<false>(dy_t, x, shards, rows, out, in, i0, dst);
  if (i0 < in) tree_stripe<true>(dy_t, x, shards, rows, out, in, i0, dst);
}

}  // namespace avx2

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
