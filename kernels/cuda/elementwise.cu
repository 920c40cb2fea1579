// The element-wise operations of mgt::Ops on device memory (kernels/elementwise.hpp defines each
// function once, for these kernels and the CPU loops), and the counter-based uniforms of dropout.
#include "kernels/cuda/check.hpp"
#include "kernels/cuda/elementwise.hpp"
#include "kernels/elementwise.hpp"

namespace mgt::cuda {

namespace {

constexpr int kThreads = 256;

__global__ void unary_kernel(UnaryOp op, const float* x, float* y, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    y[i] = kernels::apply_unary(op, x[i]);
}

__global__ void binary_kernel(BinaryOp op, const float* a, const float* b, float* y, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    y[i] = kernels::apply_binary(op, a[i], b[i]);
}

__global__ void affine_kernel(const float* x, float* y, int64_t n, float scale, float shift) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    y[i] = __fadd_rn(__fmul_rn(scale, x[i]), shift);  // no FMA: the CPU's bits
}

// One thread per group of four elements: one Philox call gives four uniforms.
__global__ void uniform_kernel(float* __restrict__ y, int64_t n, uint64_t key, const int64_t* __restrict__ step,
                               uint64_t first_index) {
  const uint64_t stream = static_cast<uint64_t>(*step);
  const int64_t groups = (static_cast<int64_t>(first_index % 4) + n + 3) / 4;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t g = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; g < groups; g += stride) {
    const uint64_t counter = first_index / 4 + static_cast<uint64_t>(g);
    const kernels::Philox4 r = kernels::philox(key, stream, counter);
    for (int lane = 0; lane < 4; ++lane) {
      const int64_t i = static_cast<int64_t>(counter * 4 + lane) - static_cast<int64_t>(first_index);
      if (i >= 0 && i < n) y[i] = kernels::philox_unit(r.w[lane]);
    }
  }
}

__global__ void dropout_scales_kernel(float* u, int64_t n, float p, float keep_scale) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    u[i] = u[i] < p ? 0.0f : keep_scale;
}

// One block per channel; each thread sums a fixed set of the channel's elements in double, then the
// block adds the threads' sums in a fixed tree: the same bits on every run.
constexpr int kChannelThreads = 256;

__global__ void channel_sum_products_kernel(const float* a, const float* b, const float* center, int64_t batch,
                                            int64_t channels, int64_t plane, float* sum_a, float* sum_ab) {
  __shared__ double totals[kChannelThreads];
  __shared__ double products[kChannelThreads];
  const int64_t c = blockIdx.x;
  const double mid = b && center ? static_cast<double>(center[c]) : 0.0;
  double total = 0.0, product = 0.0;
  const int64_t count = batch * plane;
  for (int64_t k = threadIdx.x; k < count; k += blockDim.x) {
    const int64_t n = k / plane, i = k % plane;
    const int64_t at = (n * channels + c) * plane + i;
    const double va = static_cast<double>(a[at]);
    total += va;
    if (b) product += va * (static_cast<double>(b[at]) - mid);
  }
  totals[threadIdx.x] = total;
  products[threadIdx.x] = product;
  __syncthreads();
  for (int half = blockDim.x / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) {
      totals[threadIdx.x] += totals[threadIdx.x + half];
      products[threadIdx.x] += products[threadIdx.x + half];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    sum_a[c] = static_cast<float>(totals[0]);
    if (b) sum_ab[c] = static_cast<float>(products[0]);
  }
}

__global__ void channel_affine_kernel(const float* a, const float* scale_a, const float* b, const float* scale_b,
                                      const float* shift, float* y, int64_t channels, int64_t plane, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const int64_t c = (i / plane) % channels;
    // No FMA: the CPU loop's rounding.
    float v = __fmul_rn(scale_a[c], a[i]);
    if (b) v = __fadd_rn(v, __fmul_rn(scale_b[c], b[i]));
    y[i] = shift ? __fadd_rn(v, shift[c]) : v;
  }
}

}  // namespace

void channel_sum_products(const float* a, const float* b, const float* center, int64_t batch, int64_t channels,
                          int64_t plane, float* sum_a, float* sum_ab, Stream stream) {
  if (channels <= 0) return;
  channel_sum_products_kernel<<<static_cast<unsigned>(channels), kChannelThreads, 0, stream>>>(
      a, b, center, batch, channels, plane, sum_a, sum_ab);
  MGT_CUDA_CHECK_LAUNCH("channel_sum_products");
}

void channel_affine(const float* a, const float* scale_a, const float* b, const float* scale_b, const float* shift,
                    float* y, int64_t batch, int64_t channels, int64_t plane, Stream stream) {
  const int64_t n = batch * channels * plane;
  if (n <= 0) return;
  channel_affine_kernel<<<detail::grid_blocks(n, kThreads), kThreads, 0, stream>>>(a, scale_a, b, scale_b, shift, y,
                                                                                   channels, plane, n);
  MGT_CUDA_CHECK_LAUNCH("channel_affine");
}

void unary(UnaryOp op, const float* x, float* y, int64_t n, Stream stream) {
  if (n <= 0) return;
  unary_kernel<<<detail::grid_blocks(n, kThreads), kThreads, 0, stream>>>(op, x, y, n);
  MGT_CUDA_CHECK_LAUNCH("unary");
}

void binary(BinaryOp op, const float* a, const float* b, float* y, int64_t n, Stream stream) {
  if (n <= 0) return;
  binary_kernel<<<detail::grid_blocks(n, kThreads), kThreads, 0, stream>>>(op, a, b, y, n);
  MGT_CUDA_CHECK_LAUNCH("binary");
}

void affine(const float* x, float* y, int64_t n, float scale, float shift, Stream stream) {
  if (n <= 0) return;
  affine_kernel<<<detail::grid_blocks(n, kThreads), kThreads, 0, stream>>>(x, y, n, scale, shift);
  MGT_CUDA_CHECK_LAUNCH("affine");
}

void uniform(float* y, int64_t n, uint64_t key, const int64_t* step, uint64_t first_index, Stream stream) {
  if (n <= 0) return;
  const int64_t groups = (static_cast<int64_t>(first_index % 4) + n + 3) / 4;
  uniform_kernel<<<detail::grid_blocks(groups, kThreads), kThreads, 0, stream>>>(y, n, key, step, first_index);
  MGT_CUDA_CHECK_LAUNCH("uniform");
}

void dropout_scales(float* u, int64_t n, float p, Stream stream) {
  if (n <= 0) return;
  // The keep scale as the CPU computes it, on the host.
  const float keep_scale = 1.0f / (1.0f - p);
  dropout_scales_kernel<<<detail::grid_blocks(n, kThreads), kThreads, 0, stream>>>(u, n, p, keep_scale);
  MGT_CUDA_CHECK_LAUNCH("dropout_scales");
}

}  // namespace mgt::cuda
