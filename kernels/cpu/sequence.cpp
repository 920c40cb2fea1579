#include "kernels/cpu/sequence.hpp"

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/cpu/pointwise.hpp"  // MGT_TARGET_CLONES
#include "kernels/cpu/vector_math.hpp"
#include "kernels/gelu_math.hpp"

namespace mgt::kernels {
namespace {

// tanh(u) = 1 - 2 / (e^(2u) + 1): saturates to +-1 where e^(2u) does.
inline float tanh_vectorizable(float u) { return 1.0f - 2.0f / (exp_vectorizable(2.0f * u) + 1.0f); }

// A row's mean and 1/sqrt(var + eps): the variance from the centred values, as PyTorch's
// LayerNorm, so a large mean loses nothing.
inline void row_statistics(const float* x, int64_t dim, float eps, float* mean, float* rstd) {
  const float m = lane_sum(x, dim) / static_cast<float>(dim);
  float acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= dim; i += kLanes)
    for (int64_t l = 0; l < kLanes; ++l) acc[l] += (x[i + l] - m) * (x[i + l] - m);
  for (; i < dim; ++i) acc[i % kLanes] += (x[i] - m) * (x[i] - m);
  *mean = m;
  *rstd = 1.0f / std::sqrt(combine(acc) / static_cast<float>(dim) + eps);
}

}  // namespace

MGT_TARGET_CLONES
void embedding_forward(const float* ids, const float* table, const float* position, float* y, int64_t rows,
                       int64_t positions, int64_t dim) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* t = table + static_cast<int64_t>(ids[r]) * dim;
    float* out = y + r * dim;
    if (position) {
      const float* p = position + (r % positions) * dim;
      for (int64_t i = 0; i < dim; ++i) out[i] = t[i] + p[i];
    } else {
      std::memcpy(out, t, static_cast<size_t>(dim) * sizeof(float));
    }
  }
}

MGT_TARGET_CLONES
void embedding_backward(const float* ids, const float* dy, float* dtable, int64_t rows, int64_t dim) {
  for (int64_t r = 0; r < rows; ++r) {
    float* t = dtable + static_cast<int64_t>(ids[r]) * dim;
    const float* g = dy + r * dim;
    for (int64_t i = 0; i < dim; ++i) t[i] += g[i];
  }
}

MGT_TARGET_CLONES
void layer_norm_forward(const float* x, const float* gamma, const float* beta, float* y, int64_t rows, int64_t dim,
                        float eps) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* in = x + r * dim;
    float* out = y + r * dim;
    float mean, rstd;
    row_statistics(in, dim, eps, &mean, &rstd);
    for (int64_t i = 0; i < dim; ++i) out[i] = (in[i] - mean) * rstd * gamma[i] + beta[i];
  }
}

MGT_TARGET_CLONES
void layer_norm_backward(const float* x, const float* gamma, const float* dy, float* dx, float* dgamma, float* dbeta,
                         int64_t rows, int64_t dim, float eps, bool accumulate) {
  if (!accumulate) {
    std::memset(dgamma, 0, static_cast<size_t>(dim) * sizeof(float));
    std::memset(dbeta, 0, static_cast<size_t>(dim) * sizeof(float));
  }
  const float inv_dim = 1.0f / static_cast<float>(dim);
  // A row's x_hat and dxh = dy * gamma, each in a pass of its own: every loop below is a plain
  // pass over memory the compiler vectorizes (one loop doing all of it, with a sum per lane and
  // the dgamma updates, stayed scalar). The sums' lanes are those of one loop: the same bits.
  thread_local std::vector<float> scratch;
  scratch.resize(2 * static_cast<size_t>(dim));
  float* xh = scratch.data();
  float* dxh = xh + dim;
  for (int64_t r = 0; r < rows; ++r) {
    const float* in = x + r * dim;
    const float* g = dy + r * dim;
    float mean, rstd;
    row_statistics(in, dim, eps, &mean, &rstd);
    for (int64_t i = 0; i < dim; ++i) xh[i] = (in[i] - mean) * rstd;
    for (int64_t i = 0; i < dim; ++i) dxh[i] = g[i] * gamma[i];
    for (int64_t i = 0; i < dim; ++i) dgamma[i] += g[i] * xh[i];
    for (int64_t i = 0; i < dim; ++i) dbeta[i] += g[i];
    if (!dx) continue;
    // dx = rstd * (dxh - mean(dxh) - x_hat * mean(dxh * x_hat))
    float* out = dx + r * dim;
    const float a = lane_sum(dxh, dim) * inv_dim, b = lane_dot(dxh, xh, dim) * inv_dim;
    for (int64_t i = 0; i < dim; ++i) out[i] = rstd * (dxh[i] - a - xh[i] * b);
  }
}

MGT_TARGET_CLONES
void softmax_rows(const float* x, float* y, int64_t rows, int64_t cols, float scale, bool causal) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* in = x + r * cols;
    float* out = y + r * cols;
    const int64_t kept = causal ? r % cols + 1 : cols;
    float max = in[0];
    for (int64_t c = 1; c < kept; ++c) max = in[c] > max ? in[c] : max;
    for (int64_t c = 0; c < kept; ++c) out[c] = exp_vectorizable((in[c] - max) * scale);
    const float inv = 1.0f / lane_sum(out, kept);
    for (int64_t c = 0; c < kept; ++c) out[c] *= inv;
    for (int64_t c = kept; c < cols; ++c) out[c] = 0.0f;
  }
}

MGT_TARGET_CLONES
void softmax_rows_backward(const float* y, const float* dy, float* dx, int64_t rows, int64_t cols, float scale) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* p = y + r * cols;
    const float* g = dy + r * cols;
    float* out = dx + r * cols;
    const float dot = lane_dot(p, g, cols);
    for (int64_t c = 0; c < cols; ++c) out[c] = scale * p[c] * (g[c] - dot);
  }
}

MGT_TARGET_CLONES
void gelu_forward(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    y[i] = gelu_value(v, tanh_vectorizable(gelu_tanh_argument(v)));
  }
}

MGT_TARGET_CLONES
void gelu_backward(const float* x, const float* dy, float* dx, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    dx[i] = dy[i] * gelu_derivative(v, tanh_vectorizable(gelu_tanh_argument(v)));
  }
}

}  // namespace mgt::kernels
