#include <climits>
#include <cmath>
#include <string>
#include <vector>

#include "kernels/cuda/check.hpp"
#include "kernels/cuda/softmax.hpp"
#include "mgtrain/error.hpp"

namespace mgt::cuda {

namespace {

struct MaxOp {
  __device__ float operator()(float a, float b) const { return a > b ? a : b; }
};
struct SumOp {
  __device__ float operator()(float a, float b) const { return a + b; }
};

// Every thread of the block gets the reduction of its threads' values.
template <int kThreads, typename Op>
__device__ float block_reduce(float v, Op op) {
  for (int offset = 16; offset > 0; offset >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, offset));
  if constexpr (kThreads > 32) {
    __shared__ float partial[kThreads / 32];
    if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = v;
    __syncthreads();
    v = partial[0];
    for (int w = 1; w < kThreads / 32; ++w) v = op(v, partial[w]);
    __syncthreads();  // the next reduction reuses `partial`
  }
  return v;
}

// One block per row. Each thread reads back only the gradient entries it wrote, so the passes
// over a row need no barrier between them beyond the reductions'.
template <int kThreads>
__global__ void softmax_xent_kernel(const float* __restrict__ logits,
                                    const int32_t* __restrict__ labels, float* __restrict__ grad,
                                    double* __restrict__ row_loss, int64_t classes,
                                    float grad_scale) {
  const int64_t row = blockIdx.x;
  const float* x = logits + row * classes;
  float* g = grad + row * classes;

  float mx = -INFINITY;
  for (int64_t c = threadIdx.x; c < classes; c += kThreads) mx = x[c] > mx ? x[c] : mx;
  mx = block_reduce<kThreads>(mx, MaxOp{});

  float sum = 0.0f;
  for (int64_t c = threadIdx.x; c < classes; c += kThreads) {
    const float e = expf(x[c] - mx);
    g[c] = e;
    sum += e;
  }
  sum = block_reduce<kThreads>(sum, SumOp{});

  const int32_t label = labels[row];
  const bool valid = label >= 0 && label < classes;
  if (threadIdx.x == 0)
    row_loss[row] = valid ? log(static_cast<double>(sum)) - static_cast<double>(x[label] - mx)
                          : static_cast<double>(NAN);
  // Rounded step by step as the CPU loop is (no fused multiply-add).
  const float scale = __fdiv_rn(grad_scale, sum);
  for (int64_t c = threadIdx.x; c < classes; c += kThreads) {
    float v = __fmul_rn(g[c], scale);
    if (valid && c == label) v = __fsub_rn(v, grad_scale);
    g[c] = v;
  }
}

}  // namespace

void softmax_cross_entropy(const float* logits, const int32_t* labels, float* grad,
                           double* row_loss, int64_t rows, int64_t classes, float grad_scale,
                           Stream stream) {
  MGT_CHECK(classes > 0, Error,
            "softmax cross-entropy expects at least one class, got " + std::to_string(classes));
  MGT_CHECK(rows <= INT_MAX, Error,
            "softmax cross-entropy on the GPU takes at most " + std::to_string(INT_MAX) +
                " rows, got " + std::to_string(rows));
  if (rows <= 0) return;
  const auto blocks = static_cast<unsigned>(rows);
  // A warp per row covers the usual handful of classes; wide rows get 256 threads.
  if (classes <= 32) {
    softmax_xent_kernel<32><<<blocks, 32, 0, stream>>>(logits, labels, grad, row_loss, classes,
                                                       grad_scale);
  } else {
    softmax_xent_kernel<256><<<blocks, 256, 0, stream>>>(logits, labels, grad, row_loss, classes,
                                                         grad_scale);
  }
  MGT_CUDA_CHECK_LAUNCH("softmax_cross_entropy");
}

double sum_row_losses(const double* row_loss, int64_t rows, Stream stream) {
  if (rows <= 0) return 0.0;
  synchronize(stream);
  // Reused across calls, so a training step does not allocate once the batch size is known.
  thread_local std::vector<double> host;
  host.resize(static_cast<size_t>(rows));
  copy_to_host(host.data(), row_loss, host.size() * sizeof(double));
  double total = 0.0;
  for (const double loss : host) total += loss;
  return total;
}

}  // namespace mgt::cuda
