#include "kernels/cpu/pointwise.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "kernels/elementwise.hpp"
#include "mgtrain/error.hpp"

namespace mgt::kernels {

// No __restrict on the ReLU loops: the layer executor runs ReLU in place (y == x, dx == dy).
MGT_TARGET_CLONES void relu_forward(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

MGT_TARGET_CLONES void relu_backward(const float* y, const float* dy, float* dx, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = dy[i];  // loaded unconditionally so the select vectorizes
    dx[i] = y[i] > 0.0f ? g : 0.0f;
  }
}

void broadcast_rows(const float* __restrict bias, float* __restrict y, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) std::memcpy(y + r * cols, bias, sizeof(float) * cols);
}

MGT_TARGET_CLONES void add_column_sums(const float* __restrict x, float* __restrict acc, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = x + r * cols;
    for (int64_t c = 0; c < cols; ++c) acc[c] += row[c];
  }
}

MGT_TARGET_CLONES void multiply(const float* __restrict x, const float* __restrict s, float* __restrict y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * s[i];
}

MGT_TARGET_CLONES void dropout_scales(float* u, int64_t n, float p) {
  const float keep_scale = 1.0f / (1.0f - p);
  for (int64_t i = 0; i < n; ++i) u[i] = u[i] < p ? 0.0f : keep_scale;
}

MGT_TARGET_CLONES bool all_finite(const float* data, size_t n) {
  uint32_t bad = 0;
  for (size_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, data + i, sizeof(bits));
    bad |= static_cast<uint32_t>((bits & 0x7f800000u) == 0x7f800000u);
  }
  return bad == 0;
}

MGT_TARGET_CLONES double global_norm(const float* x, size_t n) {
  double total = 0.0;
  for (size_t begin = 0; begin < n; begin += kNormChunk) {
    const size_t end = std::min(n, begin + kNormChunk);
    // Each lane's chain is independent of the others: four vectors of four lanes, each element
    // rounded as the scalar loop rounds it, so the order is kept and the loop runs vectorized.
    using Floats4 = float __attribute__((vector_size(16)));
    using Doubles4 = double __attribute__((vector_size(32)));
    static_assert(kNormLanes == 16, "four vectors of four lanes");
    Doubles4 acc[4] = {};
    size_t i = begin;
    for (; i + kNormLanes <= end; i += kNormLanes)
      for (size_t k = 0; k < 4; ++k) {
        Floats4 f;
        std::memcpy(&f, x + i + 4 * k, sizeof(f));
        const Doubles4 v = __builtin_convertvector(f, Doubles4);
        acc[k] += v * v;
      }
    double lanes[kNormLanes];
    for (size_t lane = 0; lane < kNormLanes; ++lane) lanes[lane] = acc[lane / 4][lane % 4];
    for (size_t lane = 0; i < end; ++i, ++lane) {
      const double v = x[i];
      lanes[lane] += v * v;
    }
    double chunk = 0.0;
    for (const double lane : lanes) chunk += lane;
    total += chunk;
  }
  return std::sqrt(total);
}

MGT_TARGET_CLONES void sum_terms(const float* const* terms, size_t count, float* out, size_t n) {
  // Four vectors of 16 lanes held in registers across the terms; each lane adds its element's
  // terms in order, as the scalar loop below does.
  using Floats16 = float __attribute__((vector_size(64)));
  constexpr size_t kRun = 64;
  size_t i = 0;
  for (; i + kRun <= n; i += kRun) {
    Floats16 acc[4];
    std::memcpy(acc, terms[0] + i, sizeof(acc));
    for (size_t t = 1; t < count; ++t) {
      Floats16 term[4];
      std::memcpy(term, terms[t] + i, sizeof(term));
      for (size_t k = 0; k < 4; ++k) acc[k] += term[k];
    }
    std::memcpy(out + i, acc, sizeof(acc));
  }
  for (; i < n; ++i) {
    float sum = terms[0][i];
    for (size_t t = 1; t < count; ++t) sum += terms[t][i];
    out[i] = sum;
  }
}

void clip_global_norm(float* x, size_t n, float max_norm, double* norm) {
  *norm = global_norm(x, n);
  const float factor = clip_factor(*norm, max_norm);
  if (factor == 1.0f) return;
  for (size_t i = 0; i < n; ++i) x[i] *= factor;
}

// One loop per op, so each vectorizes without a switch inside.
template <typename F>
void map_elements(const float* x, float* y, int64_t n, F f) {
  for (int64_t i = 0; i < n; ++i) y[i] = f(x[i]);
}

void unary(UnaryOp op, const float* x, float* y, int64_t n) {
  switch (op) {
#define MGT_UNARY_CASE(name) \
  case UnaryOp::name:        \
    return map_elements(x, y, n, [](float v) { return apply_unary(UnaryOp::name, v); });
    MGT_UNARY_CASE(relu)
    MGT_UNARY_CASE(sigmoid)
    MGT_UNARY_CASE(tanh)
    MGT_UNARY_CASE(exp)
    MGT_UNARY_CASE(log)
    MGT_UNARY_CASE(sqrt)
    MGT_UNARY_CASE(reciprocal)
    MGT_UNARY_CASE(square)
    MGT_UNARY_CASE(abs)
    MGT_UNARY_CASE(erf)
    MGT_UNARY_CASE(sin)
    MGT_UNARY_CASE(cos)
#undef MGT_UNARY_CASE
  }
}

// One loop per op, with the switch outside. y may be a or b (ops.hpp), which g++ would guard
// against with a run-time overlap check that sends exactly that case down the scalar loop; an
// element is read before it is written, so ivdep is exact for it.
template <BinaryOp op>
MGT_TARGET_CLONES void binary_loop(const float* a, const float* b, float* y, int64_t n) {
#pragma GCC ivdep
  for (int64_t i = 0; i < n; ++i) y[i] = apply_binary(op, a[i], b[i]);
}

void binary(BinaryOp op, const float* a, const float* b, float* y, int64_t n) {
  switch (op) {
#define MGT_BINARY_CASE(name) \
  case BinaryOp::name:        \
    return binary_loop<BinaryOp::name>(a, b, y, n);
    MGT_BINARY_CASE(add)
    MGT_BINARY_CASE(subtract)
    MGT_BINARY_CASE(multiply)
    MGT_BINARY_CASE(divide)
    MGT_BINARY_CASE(maximum)
    MGT_BINARY_CASE(minimum)
#undef MGT_BINARY_CASE
  }
}

MGT_TARGET_CLONES void affine(const float* x, float* y, int64_t n, float scale, float shift) {
  for (int64_t i = 0; i < n; ++i) y[i] = scale * x[i] + shift;
}

namespace {

using Floats8 = float __attribute__((vector_size(32)));
using Doubles8 = double __attribute__((vector_size(64)));
constexpr int64_t kPlaneLanes = 16;  // two vectors of eight doubles

// a where mask > 0, else 0: the gradient a ReLU whose output is `mask` lets through (relu_backward's
// expression, so a fused ReLU gives its bits).
inline Floats8 masked(Floats8 a, const float* mask) {
  Floats8 m;
  std::memcpy(&m, mask, sizeof(m));
  const Floats8 zero = {};
  return m > zero ? a : zero;
}

// One channel's sums over its `batch` planes (`stride` floats apart): element i of a plane goes to
// lane i % 16, each lane adds its elements plane after plane, and the lanes are added in order
// at the end. A fixed order, with 16 independent chains instead of one, so the loop runs
// vectorized; each element is rounded as a scalar loop would round it.
template <bool with_b, bool with_mask, bool b_is_a>
MGT_TARGET_CLONES void one_channel_sums(const float* a, const float* b, const float* mask, double mid, int64_t batch,
                                        int64_t plane, int64_t stride, double* total, double* product) {
  Doubles8 sum[2] = {}, prod[2] = {};
  const Doubles8 center = {mid, mid, mid, mid, mid, mid, mid, mid};
  const int64_t whole = plane / kPlaneLanes * kPlaneLanes;
  for (int64_t n = 0; n < batch; ++n) {
    const float* pa = a + n * stride;
    const float* pb = with_b ? b + n * stride : nullptr;
    const float* pm = with_mask ? mask + n * stride : nullptr;
    for (int64_t i = 0; i < whole; i += kPlaneLanes)
      for (int k = 0; k < 2; ++k) {
        Floats8 fa;
        std::memcpy(&fa, pa + i + 8 * k, sizeof(fa));
        if constexpr (with_mask) fa = masked(fa, pm + i + 8 * k);
        const Doubles8 va = __builtin_convertvector(fa, Doubles8);
        sum[k] += va;
        if constexpr (b_is_a) {
          prod[k] += va * (va - center);
        } else if constexpr (with_b) {
          Floats8 fb;
          std::memcpy(&fb, pb + i + 8 * k, sizeof(fb));
          prod[k] += va * (__builtin_convertvector(fb, Doubles8) - center);
        }
      }
    for (int64_t i = whole; i < plane; ++i) {
      const int64_t lane = i - whole;
      const float fa = !with_mask || pm[i] > 0.0f ? pa[i] : 0.0f;
      sum[lane / 8][lane % 8] += static_cast<double>(fa);
      if constexpr (with_b) prod[lane / 8][lane % 8] += static_cast<double>(fa) * (static_cast<double>(pb[i]) - mid);
    }
  }
  double t = 0.0, p = 0.0;
  for (int64_t lane = 0; lane < kPlaneLanes; ++lane) {
    t += sum[lane / 8][lane % 8];
    p += prod[lane / 8][lane % 8];
  }
  *total = t;
  *product = p;
}

template <bool with_b, bool with_mask, bool b_is_a>
void nchw_channel_sums(const float* a, const float* b, const float* mask, const float* center, int64_t batch,
                       int64_t channels, int64_t plane, float* sum_a, float* sum_ab) {
  for (int64_t c = 0; c < channels; ++c) {
    const double mid = with_b && center ? static_cast<double>(center[c]) : 0.0;
    const auto first = static_cast<size_t>(c * plane);
    double total = 0.0, product = 0.0;
    one_channel_sums<with_b, with_mask, b_is_a>(a + first, with_b ? b + first : nullptr,
                                                with_mask ? mask + first : nullptr, mid, batch, plane, channels * plane,
                                                &total, &product);
    sum_a[c] = static_cast<float>(total);
    if (with_b) sum_ab[c] = static_cast<float>(product);
  }
}

// The sums of one group of `block` channels of a channel-blocked tensor ([batch, channels / block,
// plane, block], the group's planes `stride` floats apart): each lane is a channel, and position p
// of the plane goes to partial sum p % kChains of its lane, which adds its positions plane after
// plane; the partial sums are added in order at the end. A fixed order, vectorized across the
// channels of the group, with kChains independent chains to hide the additions' latency.
template <bool with_b, bool with_mask, bool b_is_a, int64_t block>
MGT_TARGET_CLONES void blocked_group_sums(const float* a, const float* b, const float* mask, const float* center,
                                          int64_t batch, int64_t plane, int64_t stride, float* sum_a, float* sum_ab) {
  constexpr int64_t kChains = 4, kVectors = block / 8;  // vectors of eight doubles per position
  Doubles8 sum[kChains][kVectors] = {}, prod[kChains][kVectors] = {}, mid[kVectors] = {};
  if (with_b && center)
    for (int64_t l = 0; l < block; ++l) mid[l / 8][l % 8] = static_cast<double>(center[l]);
  // Position p of the plane into chain k = p % kChains.
  auto add = [&](const float* pa, const float* pb, const float* pm, int64_t k) {
    for (int64_t v = 0; v < kVectors; ++v) {
      Floats8 fa;
      std::memcpy(&fa, pa + 8 * v, sizeof(fa));
      if constexpr (with_mask) fa = masked(fa, pm + 8 * v);
      const Doubles8 da = __builtin_convertvector(fa, Doubles8);
      sum[k][v] += da;
      if constexpr (b_is_a) {
        prod[k][v] += da * (da - mid[v]);
      } else if constexpr (with_b) {
        Floats8 fb;
        std::memcpy(&fb, pb + 8 * v, sizeof(fb));
        prod[k][v] += da * (__builtin_convertvector(fb, Doubles8) - mid[v]);
      }
    }
  };
  const int64_t whole = plane / kChains * kChains;
  for (int64_t n = 0; n < batch; ++n) {
    const float* pa = a + n * stride;
    const float* pb = with_b ? b + n * stride : nullptr;
    const float* pm = with_mask ? mask + n * stride : nullptr;
    auto at = [&](int64_t p, int64_t k) {
      add(pa + p * block, with_b ? pb + p * block : nullptr, with_mask ? pm + p * block : nullptr, k);
    };
    for (int64_t p = 0; p < whole; p += kChains)
      for (int64_t k = 0; k < kChains; ++k) at(p + k, k);
    for (int64_t p = whole; p < plane; ++p) at(p, p % kChains);
  }
  for (int64_t l = 0; l < block; ++l) {
    double t = 0.0, r = 0.0;
    for (int64_t k = 0; k < kChains; ++k) {
      t += sum[k][l / 8][l % 8];
      r += prod[k][l / 8][l % 8];
    }
    sum_a[l] = static_cast<float>(t);
    if (with_b) sum_ab[l] = static_cast<float>(r);
  }
}

template <bool with_b, bool with_mask, bool b_is_a, int64_t block>
void blocked_channel_sums(const float* a, const float* b, const float* mask, const float* center, int64_t batch,
                          int64_t channels, int64_t plane, float* sum_a, float* sum_ab) {
  for (int64_t c = 0; c < channels; c += block) {
    const int64_t first = c * plane;
    blocked_group_sums<with_b, with_mask, b_is_a, block>(
        a + first, with_b ? b + first : nullptr, with_mask ? mask + first : nullptr, center ? center + c : nullptr,
        batch, plane, channels * plane, sum_a + c, with_b ? sum_ab + c : nullptr);
  }
}

template <bool with_b, bool with_mask, bool b_is_a = false>
void channel_sums_in(int64_t block, const float* a, const float* b, const float* mask, const float* center,
                     int64_t batch, int64_t channels, int64_t plane, float* sum_a, float* sum_ab) {
  if (block == 16)
    return blocked_channel_sums<with_b, with_mask, b_is_a, 16>(a, b, mask, center, batch, channels, plane, sum_a,
                                                               sum_ab);
  if (block == 8)
    return blocked_channel_sums<with_b, with_mask, b_is_a, 8>(a, b, mask, center, batch, channels, plane, sum_a,
                                                              sum_ab);
  nchw_channel_sums<with_b, with_mask, b_is_a>(a, b, mask, center, batch, channels, plane, sum_a, sum_ab);
}

// y = (scale_a a + scale_b b) + shift per channel, a only where mask > 0, y = max(y, 0) with
// relu: the expressions of the loops they fuse (relu_backward's select, relu_forward's), so the
// bits are theirs. Channel by channel over NCHW (block 1), group by group over blocked tensors.
template <int64_t block, bool with_b, bool with_mask, bool relu>
MGT_TARGET_CLONES void channel_affine_in(const float* a, const float* scale_a, const float* b, const float* scale_b,
                                         const float* shift, const float* mask, float* y, int64_t batch,
                                         int64_t channels, int64_t plane) {
  for (int64_t n = 0; n < batch; ++n)
    for (int64_t c = 0; c < channels; c += block) {
      float sa[block], sb[block], sh[block];
      for (int64_t l = 0; l < block; ++l) {
        sa[l] = scale_a[c + l];
        sb[l] = with_b ? scale_b[c + l] : 0.0f;
        sh[l] = shift ? shift[c + l] : 0.0f;
      }
      const size_t at = static_cast<size_t>((n * channels + c) * plane);
      const float* pa = a + at;
      const float* pb = with_b ? b + at : nullptr;
      const float* pm = with_mask ? mask + at : nullptr;
      float* py = y + at;
      for (int64_t i = 0; i < plane * block; i += block)
        for (int64_t l = 0; l < block; ++l) {
          const float va = !with_mask || pm[i + l] > 0.0f ? pa[i + l] : 0.0f;
          float v = with_b ? (sa[l] * va + sb[l] * pb[i + l]) + sh[l] : sa[l] * va + sh[l];
          if constexpr (relu) v = v > 0.0f ? v : 0.0f;
          py[i + l] = v;
        }
    }
}

template <int64_t block>
void channel_affine_of_block(const float* a, const float* scale_a, const float* b, const float* scale_b,
                             const float* shift, const float* mask, bool relu, float* y, int64_t batch,
                             int64_t channels, int64_t plane) {
#define MGT_AFFINE(B, M, R)                 \
  if (!!b == B && !!mask == M && relu == R) \
    return channel_affine_in<block, B, M, R>(a, scale_a, b, scale_b, shift, mask, y, batch, channels, plane);
  MGT_AFFINE(false, false, false)
  MGT_AFFINE(false, false, true)
  MGT_AFFINE(false, true, false)
  MGT_AFFINE(false, true, true)
  MGT_AFFINE(true, false, false)
  MGT_AFFINE(true, false, true)
  MGT_AFFINE(true, true, false)
  MGT_AFFINE(true, true, true)
#undef MGT_AFFINE
}

void check_block(int64_t block, int64_t channels, const char* op) {
  MGT_CHECK((block == 1 || block == 8 || block == 16) && channels % block == 0, Error,
            std::string(op) + ": a channel block of " + std::to_string(block) + " over " + std::to_string(channels) +
                " channels (expected 1, 8 or 16, dividing the channels)");
}

}  // namespace

void channel_sums(const float* a, const float* b, const float* center, int64_t batch, int64_t channels, int64_t plane,
                  float* sum_a, float* sum_ab, int64_t block, const float* mask) {
  check_block(block, channels, "channel_sums");
  // b = a (batch norm's squared deviations): each element loaded and widened once; the same bits.
  if (b == a && !mask)
    return channel_sums_in<true, false, true>(block, a, b, mask, center, batch, channels, plane, sum_a, sum_ab);
  if (b && mask) return channel_sums_in<true, true>(block, a, b, mask, center, batch, channels, plane, sum_a, sum_ab);
  if (b) return channel_sums_in<true, false>(block, a, b, mask, center, batch, channels, plane, sum_a, sum_ab);
  if (mask) return channel_sums_in<false, true>(block, a, b, mask, center, batch, channels, plane, sum_a, sum_ab);
  channel_sums_in<false, false>(block, a, b, mask, center, batch, channels, plane, sum_a, sum_ab);
}

void channel_affine(const float* a, const float* scale_a, const float* b, const float* scale_b, const float* shift,
                    float* y, int64_t batch, int64_t channels, int64_t plane, int64_t block, const float* mask,
                    bool relu) {
  check_block(block, channels, "channel_affine");
  if (block == 16)
    return channel_affine_of_block<16>(a, scale_a, b, scale_b, shift, mask, relu, y, batch, channels, plane);
  if (block == 8)
    return channel_affine_of_block<8>(a, scale_a, b, scale_b, shift, mask, relu, y, batch, channels, plane);
  channel_affine_of_block<1>(a, scale_a, b, scale_b, shift, mask, relu, y, batch, channels, plane);
}

}  // namespace mgt::kernels
