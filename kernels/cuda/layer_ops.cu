#include <cuda_bf16.h>

#include <climits>
#include <string>

#include "kernels/cuda/check.hpp"
#include "kernels/cuda/layer_ops.hpp"
#include "kernels/cuda/softmax_rows.cuh"
#include "kernels/elementwise.hpp"
#include "mgtrain/error.hpp"

namespace mgt::cuda {

namespace {

constexpr int kThreads = 256;

__global__ void broadcast_rows_kernel(const float* __restrict__ bias, float* __restrict__ y, int64_t total,
                                      int64_t cols) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += stride)
    y[i] = bias[i % cols];
}

// A thread per column walks the rows in order, the CPU loop's order for each column.
__global__ void column_sums_kernel(const float* __restrict__ x, float* __restrict__ out, int64_t rows, int64_t cols,
                                   bool accumulate) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; c < cols; c += stride) {
    float acc = accumulate ? out[c] : 0.0f;
    for (int64_t r = 0; r < rows; ++r) acc = __fadd_rn(acc, x[r * cols + c]);
    out[c] = acc;
  }
}

// One block per channel, of kChannelThreads threads. Thread t takes lane t % lanes of rows
// t / lanes, t / lanes + rows_per_pass, ... (lanes = min(plane, threads)): a fixed share for each
// thread, loads coalesced along the plane and no division in the loop. A tree in shared memory
// then combines the shares, the same way on every run.
constexpr int kChannelThreads = 1024;
__global__ void __launch_bounds__(kChannelThreads)
    channel_sums_kernel(const float* __restrict__ x, float* __restrict__ out, int64_t batch, int64_t channels,
                        int64_t plane, bool accumulate) {
  __shared__ float partial[kChannelThreads];
  const int64_t c = blockIdx.x;
  const int64_t lanes = plane < 1 ? 1 : (plane < kChannelThreads ? plane : kChannelThreads);
  const int64_t rows_per_pass = kChannelThreads / lanes;
  const int64_t first_row = threadIdx.x / lanes, lane = threadIdx.x - first_row * lanes;
  float acc = 0.0f;
  if (first_row < rows_per_pass) {
    for (int64_t b = first_row; b < batch; b += rows_per_pass) {
      const float* row = x + (b * channels + c) * plane;
      for (int64_t p = lane; p < plane; p += lanes) acc = __fadd_rn(acc, row[p]);
    }
  }
  partial[threadIdx.x] = acc;
  __syncthreads();
  for (int half = kChannelThreads / 2; half > 0; half >>= 1) {
    if (threadIdx.x < half) partial[threadIdx.x] = __fadd_rn(partial[threadIdx.x], partial[threadIdx.x + half]);
    __syncthreads();
  }
  if (threadIdx.x == 0) out[c] = accumulate ? __fadd_rn(out[c], partial[0]) : partial[0];
}

__global__ void to_bf16_kernel(const float* __restrict__ x, uint16_t* __restrict__ y, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    y[i] = __bfloat16_as_ushort(__float2bfloat16_rn(x[i]));
}

__global__ void round_to_bf16_kernel(const float* x, float* y, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    y[i] = __bfloat162float(__float2bfloat16_rn(x[i]));
}

__global__ void from_bf16_kernel(const uint16_t* __restrict__ x, float* __restrict__ y, int64_t n, bool accumulate) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float v = __bfloat162float(__ushort_as_bfloat16(x[i]));
    y[i] = accumulate ? __fadd_rn(y[i], v) : v;
  }
}

__global__ void from_bf16_channel_bias_kernel(const uint16_t* __restrict__ x, const float* __restrict__ bias,
                                              float* __restrict__ y, int64_t n, int64_t channels, int64_t plane) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float v = __bfloat162float(__ushort_as_bfloat16(x[i]));
    y[i] = bias ? __fadd_rn(v, bias[(i / plane) % channels]) : v;
  }
}

// One thread: the batch's row losses in row order (as sum_row_losses adds them on the host), then
// onto the running total.
__global__ void add_batch_loss_kernel(const double* __restrict__ row_loss, int64_t rows,
                                      double* __restrict__ loss_sum) {
  double batch = 0.0;
  for (int64_t r = 0; r < rows; ++r) batch += row_loss[r];
  *loss_sum += batch;
}

__global__ void flag_nonfinite_kernel(const float* __restrict__ x, int64_t n, int32_t* __restrict__ flag) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  bool bad = false;
  // The exponent bits, which are all ones exactly for NaN and the infinities, whatever the
  // compiler assumes about floating-point special values.
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    bad |= (__float_as_uint(x[i]) & 0x7f800000u) == 0x7f800000u;
  // Every writer stores the same value, so the result does not depend on which lands last.
  if (bad) *flag = 1;
}

// One thread per chunk of kernels::kNormChunk elements: its squares summed in double, in
// kernels::global_norm's order.
__global__ void norm_chunks_kernel(const float* __restrict__ x, int64_t n, int64_t chunks,
                                   double* __restrict__ partials) {
  const int64_t chunk = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (chunk >= chunks) return;
  const int64_t begin = chunk * static_cast<int64_t>(kernels::kNormChunk);
  const int64_t end = min(n, begin + static_cast<int64_t>(kernels::kNormChunk));
  // The lanes as kernels::global_norm keeps them: element i to lane (i - begin) % kNormLanes.
  double lanes[kernels::kNormLanes] = {};
  for (int64_t i = begin; i < end; ++i) {
    const double v = x[i];
    double& lane = lanes[(i - begin) % static_cast<int64_t>(kernels::kNormLanes)];
    lane = __dadd_rn(lane, __dmul_rn(v, v));
  }
  double sum = 0.0;
  for (const double lane : lanes) sum = __dadd_rn(sum, lane);
  partials[chunk] = sum;
}

// The chunks' sums in order, as the CPU adds them, and the norm.
__global__ void norm_total_kernel(const double* __restrict__ partials, int64_t chunks, double* __restrict__ norm) {
  double total = 0.0;
  for (int64_t c = 0; c < chunks; ++c) total = __dadd_rn(total, partials[c]);
  *norm = sqrt(total);
}

// x *= clip_factor(*norm, max_norm), read on the device so a recorded step clips at each replay.
__global__ void clip_scale_kernel(float* __restrict__ x, int64_t n, float max_norm, const double* __restrict__ norm) {
  const float factor = kernels::clip_factor(*norm, max_norm);
  if (factor == 1.0f) return;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    x[i] = __fmul_rn(x[i], factor);
}

__global__ void multiply_kernel(const float* __restrict__ x, const float* __restrict__ s, float* __restrict__ y,
                                int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    y[i] = __fmul_rn(x[i], s[i]);
}

}  // namespace

void broadcast_rows(const float* bias, float* y, int64_t rows, int64_t cols, Stream stream) {
  if (rows <= 0 || cols <= 0) return;
  const int64_t total = rows * cols;
  broadcast_rows_kernel<<<detail::grid_blocks(total, kThreads), kThreads, 0, stream>>>(bias, y, total, cols);
  MGT_CUDA_CHECK_LAUNCH("broadcast_rows");
}

void column_sums(const float* x, float* out, int64_t rows, int64_t cols, bool accumulate, Stream stream) {
  if (cols <= 0) return;
  if (rows < 0) rows = 0;
  column_sums_kernel<<<detail::grid_blocks(cols, kThreads), kThreads, 0, stream>>>(x, out, rows, cols, accumulate);
  MGT_CUDA_CHECK_LAUNCH("column_sums");
}

void channel_sums(const float* x, float* out, int64_t batch, int64_t channels, int64_t plane, bool accumulate,
                  Stream stream) {
  MGT_CHECK(
      channels <= INT_MAX, Error,
      "channel sums on the GPU take at most " + std::to_string(INT_MAX) + " channels, got " + std::to_string(channels));
  if (channels <= 0) return;
  if (batch < 0) batch = 0;
  if (plane < 0) plane = 0;
  channel_sums_kernel<<<static_cast<unsigned>(channels), kChannelThreads, 0, stream>>>(x, out, batch, channels, plane,
                                                                                       accumulate);
  MGT_CUDA_CHECK_LAUNCH("channel_sums");
}

void softmax_xent_accumulate(const float* logits, const int32_t* labels, float* grad, double* row_loss, int64_t rows,
                             int64_t classes, float grad_scale, double* loss_sum, int64_t* correct, Stream stream,
                             float label_smoothing) {
  static_assert(sizeof(int64_t) == sizeof(unsigned long long),
                "the correct count is added to as a 64-bit unsigned integer");
  MGT_CHECK(loss_sum != nullptr && correct != nullptr, Error,
            "softmax cross-entropy: the loss sum and correct count need device memory");
  // Two's complement: adding 1 as unsigned is adding 1 to the signed count.
  detail::launch_softmax_xent(logits, labels, grad, row_loss, rows, classes, grad_scale,
                              reinterpret_cast<unsigned long long*>(correct), stream, label_smoothing);
  if (rows <= 0) return;
  add_batch_loss_kernel<<<1, 1, 0, stream>>>(row_loss, rows, loss_sum);
  MGT_CUDA_CHECK_LAUNCH("softmax_xent_accumulate");
}

void flag_nonfinite(const float* x, size_t n, int32_t* flag, Stream stream) {
  if (n == 0) return;
  const auto count = static_cast<int64_t>(n);
  flag_nonfinite_kernel<<<detail::grid_blocks(count, kThreads), kThreads, 0, stream>>>(x, count, flag);
  MGT_CUDA_CHECK_LAUNCH("flag_nonfinite");
}

void clip_global_norm(float* x, size_t n, float max_norm, double* norm, double* partials, Stream stream) {
  const auto count = static_cast<int64_t>(n);
  const int64_t chunks =
      (count + static_cast<int64_t>(kernels::kNormChunk) - 1) / static_cast<int64_t>(kernels::kNormChunk);
  if (chunks > 0) {
    norm_chunks_kernel<<<detail::grid_blocks(chunks, kThreads), kThreads, 0, stream>>>(x, count, chunks, partials);
    MGT_CUDA_CHECK_LAUNCH("clip_global_norm (chunks)");
  }
  norm_total_kernel<<<1, 1, 0, stream>>>(partials, chunks, norm);
  MGT_CUDA_CHECK_LAUNCH("clip_global_norm (total)");
  if (max_norm > 0.0f && count > 0) {
    clip_scale_kernel<<<detail::grid_blocks(count, kThreads), kThreads, 0, stream>>>(x, count, max_norm, norm);
    MGT_CUDA_CHECK_LAUNCH("clip_global_norm (scale)");
  }
}

void to_bf16(const float* x, uint16_t* y, size_t n, Stream stream) {
  if (n == 0) return;
  const auto count = static_cast<int64_t>(n);
  to_bf16_kernel<<<detail::grid_blocks(count, kThreads), kThreads, 0, stream>>>(x, y, count);
  MGT_CUDA_CHECK_LAUNCH("to_bf16");
}

void round_to_bf16(const float* x, float* y, size_t n, Stream stream) {
  if (n == 0) return;
  const auto count = static_cast<int64_t>(n);
  round_to_bf16_kernel<<<detail::grid_blocks(count, kThreads), kThreads, 0, stream>>>(x, y, count);
  MGT_CUDA_CHECK_LAUNCH("round_to_bf16");
}

void from_bf16(const uint16_t* x, float* y, size_t n, bool accumulate, Stream stream) {
  if (n == 0) return;
  const auto count = static_cast<int64_t>(n);
  from_bf16_kernel<<<detail::grid_blocks(count, kThreads), kThreads, 0, stream>>>(x, y, count, accumulate);
  MGT_CUDA_CHECK_LAUNCH("from_bf16");
}

void from_bf16_add_channel_bias(const uint16_t* x, const float* bias, float* y, int64_t batch, int64_t channels,
                                int64_t plane, Stream stream) {
  const int64_t n = batch * channels * plane;
  if (n <= 0) return;
  from_bf16_channel_bias_kernel<<<detail::grid_blocks(n, kThreads), kThreads, 0, stream>>>(x, bias, y, n, channels,
                                                                                           plane);
  MGT_CUDA_CHECK_LAUNCH("from_bf16_add_channel_bias");
}

void multiply(const float* x, const float* s, float* y, int64_t n, Stream stream) {
  if (n <= 0) return;
  multiply_kernel<<<detail::grid_blocks(n, kThreads), kThreads, 0, stream>>>(x, s, y, n);
  MGT_CUDA_CHECK_LAUNCH("multiply");
}

}  // namespace mgt::cuda
