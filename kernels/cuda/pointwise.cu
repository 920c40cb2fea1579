#include "kernels/cuda/check.hpp"
#include "kernels/cuda/pointwise.hpp"

namespace mgt::cuda {

namespace {

constexpr int kThreads = 256;

// No __restrict__: the layer executor runs ReLU in place (y == x, dx == dy).
__global__ void relu_forward_kernel(const float* x, float* y, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

__global__ void relu_backward_kernel(const float* y, const float* dy, float* dx, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}

}  // namespace

void relu_forward(const float* x, float* y, int64_t n, Stream stream) {
  if (n <= 0) return;
  relu_forward_kernel<<<detail::grid_blocks(n, kThreads), kThreads, 0, stream>>>(x, y, n);
  MGT_CUDA_CHECK_LAUNCH("relu_forward");
}

void relu_backward(const float* y, const float* dy, float* dx, int64_t n, Stream stream) {
  if (n <= 0) return;
  relu_backward_kernel<<<detail::grid_blocks(n, kThreads), kThreads, 0, stream>>>(y, dy, dx, n);
  MGT_CUDA_CHECK_LAUNCH("relu_backward");
}

}  // namespace mgt::cuda
