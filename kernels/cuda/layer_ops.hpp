#pragma once
// Element-wise and reduction kernels of the layers, the loss and the step's checks on device
// memory, with the semantics of kernels/cpu/pointwise.hpp and softmax.hpp. Every reduction adds
// in a fixed order (no floating-point atomics), so a run repeats bit for bit. Launched on
// `stream` with no synchronisation, so a CUDA graph can capture them; errors in the launch throw
// mgt::CudaError.
#include <cstddef>
#include <cstdint>

#include "kernels/cuda/runtime.hpp"

namespace mgt::cuda {

// y[r, :] = bias for each of `rows` rows of `cols` (the start of y = x W^T + b).
void broadcast_rows(const float* bias, float* y, int64_t rows, int64_t cols, Stream stream = nullptr);

// out[c] (+)= sum over r of x[r, c], rows added in order 0..rows-1 onto out[c] (accumulate) or
// onto 0: bit for bit what kernels::add_column_sums gives.
void column_sums(const float* x, float* out, int64_t rows, int64_t cols, bool accumulate, Stream stream = nullptr);

// out[c] (+)= sum of x[b, c, :] over batch and plane for NCHW x of `plane` = H * W elements per
// channel: the bias gradient of a convolution, in one fixed tree order per channel.
void channel_sums(const float* x, float* out, int64_t batch, int64_t channels, int64_t plane, bool accumulate,
                  Stream stream = nullptr);

// Softmax cross-entropy of one micro-batch, as softmax_cross_entropy (softmax.hpp) computes it
// (grad = (softmax - target) * grad_scale, row_loss [rows] doubles of scratch), that also adds the
// batch's loss, its rows summed in order as sum_row_losses does, to *loss_sum and the number of
// rows whose arg-max (the first maximum, as kernels::count_correct) is the label to *correct. The
// totals stay on the device, so the step need not wait for them. All pointers device memory.
void softmax_xent_accumulate(const float* logits, const int32_t* labels, float* grad, double* row_loss, int64_t rows,
                             int64_t classes, float grad_scale, double* loss_sum, int64_t* correct,
                             Stream stream = nullptr, float label_smoothing = 0.0f);

// Sets *flag = 1 when any of x[0..n) is NaN or infinite; never clears it, so one flag gathers a
// whole step's checks.
void flag_nonfinite(const float* x, size_t n, int32_t* flag, Stream stream = nullptr);

// Clipping by global norm, kernels::clip_global_norm on the device: *norm (device memory) = the
// L2 norm of x[0..n) in kernels::global_norm's order (one thread per chunk, the chunks' sums
// then added in order by one thread), the same bits as the CPU; then x scaled by
// kernels::clip_factor(*norm, max_norm) where that is not 1. `partials` is scratch of
// ceil(n / kernels::kNormChunk) doubles.
void clip_global_norm(float* x, size_t n, float max_norm, double* norm, double* partials, Stream stream = nullptr);

// y = x rounded to bfloat16 (to nearest, ties to even), as raw 16-bit patterns: the operands of
// bf16 mixed precision; kernels::to_bf16 gives the same bits on the CPU.
void to_bf16(const float* x, uint16_t* y, size_t n, Stream stream = nullptr);
// y = x rounded to bf16 and widened back (y may be x): kernels::round_to_bf16 on the GPU.
void round_to_bf16(const float* x, float* y, size_t n, Stream stream = nullptr);
// y (+)= x widened from bf16 (exactly): a bf16 result back into FP32, or added to an FP32 sum.
void from_bf16(const uint16_t* x, float* y, size_t n, bool accumulate, Stream stream = nullptr);
// y[b, c, :] = x[b, c, :] widened from bf16, + bias[c] in FP32 (bias may be null): a bf16
// convolution's output with its FP32 bias, for NCHW tensors of `plane` elements per channel.
void from_bf16_add_channel_bias(const uint16_t* x, const float* bias, float* y, int64_t batch, int64_t channels,
                                int64_t plane, Stream stream = nullptr);

// y = x * s element-wise (dropout applied with its scales).
void multiply(const float* x, const float* s, float* y, int64_t n, Stream stream = nullptr);

}  // namespace mgt::cuda
