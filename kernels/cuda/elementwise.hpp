#pragma once
// The element-wise operations of mgt::Ops on device memory, with the semantics of
// kernels/cpu/pointwise.hpp. Launched on `stream`; errors in the launch throw mgt::CudaError.
#include <cstdint>

#include "kernels/cuda/runtime.hpp"
#include "mgtrain/ops.hpp"

namespace mgt::cuda {

void unary(UnaryOp op, const float* x, float* y, int64_t n, Stream stream);
void binary(BinaryOp op, const float* a, const float* b, float* y, int64_t n, Stream stream);
void affine(const float* x, float* y, int64_t n, float scale, float shift, Stream stream);
// y[i] = element first_index + i of the stream (key, *step) as a uniform in [0, 1), with *step in
// device memory read when the kernel runs: mgt::rng::fill_uniform's bits.
void uniform(float* y, int64_t n, uint64_t key, const int64_t* step, uint64_t first_index, Stream stream);
// u = 0 where u < p, else 1 / (1 - p)
void dropout_scales(float* u, int64_t n, float p, Stream stream);
// mgt::Ops::channel_sums (the sums of a and of a * (b - center) per channel; not layer_ops.hpp's
// channel_sums, a convolution's bias gradient) and channel_affine (mgtrain/ops.hpp).
void channel_sum_products(const float* a, const float* b, const float* center, int64_t batch, int64_t channels,
                          int64_t plane, float* sum_a, float* sum_ab, Stream stream);
void channel_affine(const float* a, const float* scale_a, const float* b, const float* scale_b, const float* shift,
                    float* y, int64_t batch, int64_t channels, int64_t plane, Stream stream);

}  // namespace mgt::cuda
