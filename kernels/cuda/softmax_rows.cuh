#pragma once
// The softmax cross-entropy row kernel, shared by softmax.cu (the loss alone) and layer_ops.cu
// (the loss with its batch totals and arg-max accuracy). For .cu sources of the GPU path only.
#include <climits>
#include <cmath>
#include <cstdint>
#include <string>

#include "kernels/cpu/softmax.hpp"
#include "kernels/cuda/check.hpp"
#include "kernels/cuda/runtime.hpp"
#include "mgtrain/error.hpp"

namespace mgt::cuda::detail {

struct SoftmaxMaxOp {
  template <typename T>
  __device__ T operator()(T a, T b) const {
    return a > b ? a : b;
  }
};
struct SoftmaxMinOp {
  template <typename T>
  __device__ T operator()(T a, T b) const {
    return a < b ? a : b;
  }
};
struct SoftmaxSumOp {
  template <typename T>
  __device__ T operator()(T a, T b) const {
    return a + b;
  }
};

// Every thread of the block gets the reduction of its threads' values, combined in the same
// fixed order on every run.
template <int kThreads, typename T, typename Op>
__device__ T softmax_block_reduce(T v, Op op) {
  for (int offset = 16; offset > 0; offset >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, offset));
  if constexpr (kThreads > 32) {
    __shared__ T partial[kThreads / 32];
    if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = v;
    __syncthreads();
    v = partial[0];
    for (int w = 1; w < kThreads / 32; ++w) v = op(v, partial[w]);
    __syncthreads();  // the next reduction reuses `partial`
  }
  return v;
}

// One block per row. Each thread reads back only the gradient entries it wrote, so the passes
// over a row need no barrier between them beyond the reductions'. With `correct` set, a row whose
// arg-max (the first maximum, as kernels::count_correct picks it) is its label adds one to it:
// an integer sum, the same whatever order the rows finish in.
template <int kThreads>
__global__ void softmax_xent_kernel(const float* __restrict__ logits, const int32_t* __restrict__ labels,
                                    float* __restrict__ grad, double* __restrict__ row_loss, int64_t classes,
                                    float grad_scale, unsigned long long* __restrict__ correct, float label_smoothing,
                                    kernels::SmoothedTarget target) {
  const int64_t row = blockIdx.x;
  const float* x = logits + row * classes;
  float* g = grad + row * classes;
  // A row without a label (the same for the whole block, so no barrier is skipped by some alone).
  if (labels[row] == kernels::kIgnoredLabel) {
    for (int64_t c = threadIdx.x; c < classes; c += kThreads) g[c] = 0.0f;
    if (threadIdx.x == 0) row_loss[row] = 0.0;
    return;
  }

  float mx = -INFINITY;
  for (int64_t c = threadIdx.x; c < classes; c += kThreads) mx = x[c] > mx ? x[c] : mx;
  mx = softmax_block_reduce<kThreads>(mx, SoftmaxMaxOp{});

  float sum = 0.0f;
  for (int64_t c = threadIdx.x; c < classes; c += kThreads) {
    const float e = expf(x[c] - mx);
    g[c] = e;
    sum += e;
  }
  sum = softmax_block_reduce<kThreads>(sum, SoftmaxSumOp{});

  const int32_t label = labels[row];
  const bool valid = label >= 0 && label < classes;
  if (correct) {  // the same for every thread of the block, so its barriers are reached by all
    long long first = LLONG_MAX;
    for (int64_t c = threadIdx.x; c < classes && first == LLONG_MAX; c += kThreads)
      if (x[c] == mx) first = c;
    first = softmax_block_reduce<kThreads>(first, SoftmaxMinOp{});
    // The CPU loop keeps index 0 when x[0] is NaN (nothing compares greater than it); NaN
    // elsewhere it passes over, as the maximum above does.
    if (isnan(x[0]) || first == LLONG_MAX) first = 0;
    if (threadIdx.x == 0 && valid && first == label) atomicAdd(correct, 1ull);
  }
  // The smoothed target's sum of x - max over the row, each thread's share in order and the
  // shares in the block's fixed order (the same for every thread, so all reach the barriers).
  double shifted = 0.0;
  if (label_smoothing != 0.0f) {
    for (int64_t c = threadIdx.x; c < classes; c += kThreads) shifted += static_cast<double>(x[c] - mx);
    shifted = softmax_block_reduce<kThreads>(shifted, SoftmaxSumOp{});
  }
  if (threadIdx.x == 0) {
    double loss = static_cast<double>(NAN);
    if (valid && label_smoothing == 0.0f) {
      loss = log(static_cast<double>(sum)) - static_cast<double>(x[label] - mx);
    } else if (valid) {
      const double e = label_smoothing;
      loss = log(static_cast<double>(sum)) - (1.0 - e) * static_cast<double>(x[label] - mx) -
             e / static_cast<double>(classes) * shifted;
    }
    row_loss[row] = loss;
  }
  // Rounded step by step as the CPU loop is (no fused multiply-add).
  const float scale = __fdiv_rn(grad_scale, sum);
  for (int64_t c = threadIdx.x; c < classes; c += kThreads) {
    float v = __fsub_rn(__fmul_rn(g[c], scale), target.every_class);
    if (valid && c == label) v = __fsub_rn(v, target.label);
    g[c] = v;
  }
}

// Checks the sizes and launches the row kernel on `stream`; `correct` may be null.
inline void launch_softmax_xent(const float* logits, const int32_t* labels, float* grad, double* row_loss, int64_t rows,
                                int64_t classes, float grad_scale, unsigned long long* correct, Stream stream,
                                float label_smoothing = 0.0f) {
  MGT_CHECK(classes > 0, Error, "softmax cross-entropy expects at least one class, got " + std::to_string(classes));
  MGT_CHECK(rows <= INT_MAX, Error,
            "softmax cross-entropy on the GPU takes at most " + std::to_string(INT_MAX) + " rows, got " +
                std::to_string(rows));
  if (rows <= 0) return;
  const kernels::SmoothedTarget target = kernels::smoothed_target(grad_scale, label_smoothing, classes);
  const auto blocks = static_cast<unsigned>(rows);
  // A warp per row covers the usual handful of classes; wide rows get 256 threads.
  if (classes <= 32) {
    softmax_xent_kernel<32><<<blocks, 32, 0, stream>>>(logits, labels, grad, row_loss, classes, grad_scale, correct,
                                                       label_smoothing, target);
  } else {
    softmax_xent_kernel<256><<<blocks, 256, 0, stream>>>(logits, labels, grad, row_loss, classes, grad_scale, correct,
                                                         label_smoothing, target);
  }
  MGT_CUDA_CHECK_LAUNCH("softmax_cross_entropy");
}

}  // namespace mgt::cuda::detail
