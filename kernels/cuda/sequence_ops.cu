#include <cstdint>

#include "kernels/cuda/check.hpp"
#include "kernels/cuda/sequence_ops.hpp"
#include "kernels/gelu_math.hpp"

namespace mgt::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kWarp = 32;
constexpr int kRowsPerBlock = kThreads / kWarp;  // row kernels: a warp per row

__device__ float warp_sum(float v) {
  for (int offset = kWarp / 2; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}
__device__ float warp_max(float v) {
  for (int offset = kWarp / 2; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

__global__ void embedding_forward_kernel(const float* __restrict__ ids, const float* __restrict__ table,
                                         const float* __restrict__ position, float* __restrict__ y, int64_t total,
                                         int64_t positions, int64_t dim) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += stride) {
    const int64_t r = i / dim, c = i - r * dim;
    const float v = table[static_cast<int64_t>(ids[r]) * dim + c];
    y[i] = position ? v + position[(r % positions) * dim + c] : v;
  }
}

// A thread per column walks the rows in order: the CPU's order, no atomics.
__global__ void embedding_backward_kernel(const float* __restrict__ ids, const float* __restrict__ dy,
                                          float* __restrict__ dtable, int64_t rows, int64_t dim) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= dim) return;
  for (int64_t r = 0; r < rows; ++r) dtable[static_cast<int64_t>(ids[r]) * dim + c] += dy[r * dim + c];
}

// A row's mean and 1/sqrt(var + eps) over a warp, the variance from the centred values.
__device__ void row_statistics(const float* x, int64_t dim, float eps, int lane, float* mean, float* rstd) {
  float s = 0.0f;
  for (int64_t i = lane; i < dim; i += kWarp) s += x[i];
  const float m = warp_sum(s) / static_cast<float>(dim);
  float q = 0.0f;
  for (int64_t i = lane; i < dim; i += kWarp) q += (x[i] - m) * (x[i] - m);
  *mean = m;
  *rstd = rsqrtf(warp_sum(q) / static_cast<float>(dim) + eps);
}

__global__ void layer_norm_forward_kernel(const float* __restrict__ x, const float* __restrict__ gamma,
                                          const float* __restrict__ beta, float* __restrict__ y, int64_t rows,
                                          int64_t dim, float eps) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (r >= rows) return;
  const float* in = x + r * dim;
  float mean, rstd;
  row_statistics(in, dim, eps, lane, &mean, &rstd);
  for (int64_t i = lane; i < dim; i += kWarp) y[r * dim + i] = (in[i] - mean) * rstd * gamma[i] + beta[i];
}

__global__ void layer_norm_dx_kernel(const float* __restrict__ x, const float* __restrict__ gamma,
                                     const float* __restrict__ dy, float* __restrict__ dx, int64_t rows, int64_t dim,
                                     float eps) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (r >= rows) return;
  const float* in = x + r * dim;
  const float* g = dy + r * dim;
  float mean, rstd;
  row_statistics(in, dim, eps, lane, &mean, &rstd);
  float a = 0.0f, b = 0.0f;
  for (int64_t i = lane; i < dim; i += kWarp) {
    const float dxh = g[i] * gamma[i];
    a += dxh;
    b += dxh * (in[i] - mean) * rstd;
  }
  a = warp_sum(a) / static_cast<float>(dim);
  b = warp_sum(b) / static_cast<float>(dim);
  for (int64_t i = lane; i < dim; i += kWarp)
    dx[r * dim + i] = rstd * (g[i] * gamma[i] - a - (in[i] - mean) * rstd * b);
}

// dgamma and dbeta: a block per kWarp columns walks the rows kRowsPerBlock at a time, a warp per
// row forming its statistics again and each lane its column's terms; warp 0 then adds the rows'
// terms in row order. A fixed order, no atomics, and no buffer of statistics.
__global__ void layer_norm_dparams_kernel(const float* __restrict__ x, const float* __restrict__ dy,
                                          float* __restrict__ dgamma, float* __restrict__ dbeta, int64_t rows,
                                          int64_t dim, float eps, bool accumulate) {
  __shared__ float gamma_terms[kRowsPerBlock][kWarp];
  __shared__ float beta_terms[kRowsPerBlock][kWarp];
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kWarp + lane;
  float dg = 0.0f, db = 0.0f;
  if (warp == 0 && accumulate && c < dim) {
    dg = dgamma[c];
    db = dbeta[c];
  }
  for (int64_t first = 0; first < rows; first += kRowsPerBlock) {
    const int64_t r = first + warp;
    float g = 0.0f, b = 0.0f;
    if (r < rows) {
      float mean, rstd;
      row_statistics(x + r * dim, dim, eps, lane, &mean, &rstd);
      if (c < dim) {
        b = dy[r * dim + c];
        g = b * (x[r * dim + c] - mean) * rstd;
      }
    }
    gamma_terms[warp][lane] = g;
    beta_terms[warp][lane] = b;
    __syncthreads();
    if (warp == 0)
      for (int w = 0; w < kRowsPerBlock; ++w) {
        dg += gamma_terms[w][lane];
        db += beta_terms[w][lane];
      }
    __syncthreads();
  }
  if (warp == 0 && c < dim) {
    dgamma[c] = dg;
    dbeta[c] = db;
  }
}

__global__ void softmax_rows_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t rows, int64_t cols,
                                    float scale, bool causal) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (r >= rows) return;
  const float* in = x + r * cols;
  float* out = y + r * cols;
  const int64_t kept = causal ? r % cols + 1 : cols;
  float m = -INFINITY;
  for (int64_t c = lane; c < kept; c += kWarp) m = fmaxf(m, in[c]);
  m = warp_max(m);
  float s = 0.0f;
  for (int64_t c = lane; c < kept; c += kWarp) {
    const float e = expf((in[c] - m) * scale);
    out[c] = e;
    s += e;
  }
  const float inv = 1.0f / warp_sum(s);
  for (int64_t c = lane; c < cols; c += kWarp) out[c] = c < kept ? out[c] * inv : 0.0f;
}

__global__ void softmax_rows_backward_kernel(const float* __restrict__ y, const float* dy, float* dx, int64_t rows,
                                             int64_t cols, float scale) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (r >= rows) return;
  const float* p = y + r * cols;
  float dot = 0.0f;
  for (int64_t c = lane; c < cols; c += kWarp) dot += p[c] * dy[r * cols + c];
  dot = warp_sum(dot);
  for (int64_t c = lane; c < cols; c += kWarp) dx[r * cols + c] = scale * p[c] * (dy[r * cols + c] - dot);
}

// A warp per row of one sample's [heads, tokens, tokens] scores: the row's maximum and sum over
// the keys it sees in the warp's fixed order.
__global__ void attention_softmax_kernel(const float* s, float* p, float* __restrict__ row_lse, int64_t rows,
                                         int64_t tokens, float scale, bool causal) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (r >= rows) return;
  const float* in = s + r * tokens;
  float* out = p + r * tokens;
  const int64_t kept = causal ? r % tokens + 1 : tokens;
  float m = -INFINITY;
  for (int64_t c = lane; c < kept; c += kWarp) m = fmaxf(m, in[c] * scale);
  m = warp_max(m);
  float sum = 0.0f;
  for (int64_t c = lane; c < kept; c += kWarp) {
    const float e = expf(in[c] * scale - m);
    out[c] = e;
    sum += e;
  }
  sum = warp_sum(sum);
  const float inv = 1.0f / sum;
  for (int64_t c = lane; c < tokens; c += kWarp) out[c] = c < kept ? out[c] * inv : 0.0f;
  if (lane == 0) row_lse[r] = m + logf(sum);
}

__global__ void attention_probabilities_kernel(float* __restrict__ s, const float* __restrict__ row_lse, int64_t rows,
                                               int64_t tokens, float scale, bool causal) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (r >= rows) return;
  float* row = s + r * tokens;
  const int64_t kept = causal ? r % tokens + 1 : tokens;
  const float lse = row_lse[r];
  for (int64_t c = lane; c < tokens; c += kWarp) row[c] = c < kept ? expf(row[c] * scale - lse) : 0.0f;
}

__global__ void attention_score_gradients_kernel(const float* __restrict__ p, float* dp, const float* __restrict__ out,
                                                 const float* __restrict__ dout, int64_t ld_out, int64_t head_dim,
                                                 int64_t rows, int64_t tokens, float scale) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (r >= rows) return;
  const int64_t head = r / tokens, token = r % tokens;
  const float* o = out + token * ld_out + head * head_dim;
  const float* g = dout + token * ld_out + head * head_dim;
  float d = 0.0f;
  for (int64_t c = lane; c < head_dim; c += kWarp) d += o[c] * g[c];
  d = warp_sum(d);
  const float* pr = p + r * tokens;
  float* row = dp + r * tokens;
  for (int64_t c = lane; c < tokens; c += kWarp) row[c] = scale * pr[c] * (row[c] - d);
}

__global__ void gelu_forward_kernel(const float* x, float* y, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float v = x[i];
    y[i] = kernels::gelu_value(v, tanhf(kernels::gelu_tanh_argument(v)));
  }
}

__global__ void gelu_backward_kernel(const float* x, const float* dy, float* dx, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float v = x[i];
    dx[i] = dy[i] * kernels::gelu_derivative(v, tanhf(kernels::gelu_tanh_argument(v)));
  }
}

unsigned row_blocks(int64_t rows) { return static_cast<unsigned>((rows + kRowsPerBlock - 1) / kRowsPerBlock); }

}  // namespace

void embedding_forward(const float* ids, const float* table, const float* position, float* y, int64_t rows,
                       int64_t positions, int64_t dim, Stream stream) {
  if (rows <= 0 || dim <= 0) return;
  embedding_forward_kernel<<<detail::grid_blocks(rows * dim, kThreads), kThreads, 0, stream>>>(
      ids, table, position, y, rows * dim, positions, dim);
  MGT_CUDA_CHECK_LAUNCH("embedding_forward");
}

void embedding_backward(const float* ids, const float* dy, float* dtable, int64_t rows, int64_t dim, Stream stream) {
  if (rows <= 0 || dim <= 0) return;
  embedding_backward_kernel<<<detail::grid_blocks(dim, kThreads), kThreads, 0, stream>>>(ids, dy, dtable, rows, dim);
  MGT_CUDA_CHECK_LAUNCH("embedding_backward");
}

void layer_norm_forward(const float* x, const float* gamma, const float* beta, float* y, int64_t rows, int64_t dim,
                        float eps, Stream stream) {
  if (rows <= 0) return;
  layer_norm_forward_kernel<<<row_blocks(rows), kThreads, 0, stream>>>(x, gamma, beta, y, rows, dim, eps);
  MGT_CUDA_CHECK_LAUNCH("layer_norm_forward");
}

void layer_norm_backward(const float* x, const float* gamma, const float* dy, float* dx, float* dgamma, float* dbeta,
                         int64_t rows, int64_t dim, float eps, bool accumulate, Stream stream) {
  if (rows <= 0) return;
  const auto column_blocks = static_cast<unsigned>((dim + kWarp - 1) / kWarp);
  layer_norm_dparams_kernel<<<column_blocks, kThreads, 0, stream>>>(x, dy, dgamma, dbeta, rows, dim, eps, accumulate);
  MGT_CUDA_CHECK_LAUNCH("layer_norm_backward (parameters)");
  if (!dx) return;
  layer_norm_dx_kernel<<<row_blocks(rows), kThreads, 0, stream>>>(x, gamma, dy, dx, rows, dim, eps);
  MGT_CUDA_CHECK_LAUNCH("layer_norm_backward");
}

void softmax_rows(const float* x, float* y, int64_t rows, int64_t cols, float scale, bool causal, Stream stream) {
  if (rows <= 0 || cols <= 0) return;
  softmax_rows_kernel<<<row_blocks(rows), kThreads, 0, stream>>>(x, y, rows, cols, scale, causal);
  MGT_CUDA_CHECK_LAUNCH("softmax_rows");
}

void softmax_rows_backward(const float* y, const float* dy, float* dx, int64_t rows, int64_t cols, float scale,
                           Stream stream) {
  if (rows <= 0 || cols <= 0) return;
  softmax_rows_backward_kernel<<<row_blocks(rows), kThreads, 0, stream>>>(y, dy, dx, rows, cols, scale);
  MGT_CUDA_CHECK_LAUNCH("softmax_rows_backward");
}

void attention_softmax(const float* s, float* p, float* row_lse, int64_t rows, int64_t tokens, float scale, bool causal,
                       Stream stream) {
  if (rows <= 0 || tokens <= 0) return;
  attention_softmax_kernel<<<row_blocks(rows), kThreads, 0, stream>>>(s, p, row_lse, rows, tokens, scale, causal);
  MGT_CUDA_CHECK_LAUNCH("attention_softmax");
}

void attention_probabilities(float* s, const float* row_lse, int64_t rows, int64_t tokens, float scale, bool causal,
                             Stream stream) {
  if (rows <= 0 || tokens <= 0) return;
  attention_probabilities_kernel<<<row_blocks(rows), kThreads, 0, stream>>>(s, row_lse, rows, tokens, scale, causal);
  MGT_CUDA_CHECK_LAUNCH("attention_probabilities");
}

void attention_score_gradients(const float* p, float* dp, const float* out, const float* dout, int64_t ld_out,
                               int64_t head_dim, int64_t rows, int64_t tokens, float scale, Stream stream) {
  if (rows <= 0 || tokens <= 0) return;
  attention_score_gradients_kernel<<<row_blocks(rows), kThreads, 0, stream>>>(p, dp, out, dout, ld_out, head_dim, rows,
                                                                              tokens, scale);
  MGT_CUDA_CHECK_LAUNCH("attention_score_gradients");
}

void gelu_forward(const float* x, float* y, int64_t n, Stream stream) {
  if (n <= 0) return;
  gelu_forward_kernel<<<detail::grid_blocks(n, kThreads), kThreads, 0, stream>>>(x, y, n);
  MGT_CUDA_CHECK_LAUNCH("gelu_forward");
}

void gelu_backward(const float* x, const float* dy, float* dx, int64_t n, Stream stream) {
  if (n <= 0) return;
  gelu_backward_kernel<<<detail::grid_blocks(n, kThreads), kThreads, 0, stream>>>(x, dy, dx, n);
  MGT_CUDA_CHECK_LAUNCH("gelu_backward");
}

}  // namespace mgt::cuda
