#pragma once
// Plain loops for the element-wise parts of the layers, written so g++ -O3 vectorizes them.
#include <cstddef>
#include <cstdint>

#include "mgtrain/ops.hpp"

// The build targets baseline x86-64; hot loops are also compiled for AVX2 and AVX-512 and picked
// at load time, so they vectorize fully on the machines the trainer runs on.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define MGT_TARGET_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define MGT_TARGET_CLONES
#endif

namespace mgt::kernels {

// y = max(x, 0)
void relu_forward(const float* x, float* y, int64_t n);
// dx = dy where y > 0, else 0
void relu_backward(const float* y, const float* dy, float* dx, int64_t n);

// y[r, :] = bias for each of `rows` rows of `cols` (the start of y = x W^T + b).
void broadcast_rows(const float* bias, float* y, int64_t rows, int64_t cols);
// acc[c] += sum over rows of x[r, c]
void add_column_sums(const float* x, float* acc, int64_t rows, int64_t cols);

// True when no element is NaN or Inf (exponent bits all ones). Integer operations, so the loop
// vectorizes without fast-math: one pass, no dependency chain.
bool all_finite(const float* data, size_t n);

// The L2 norm of x[0..n), its squares summed in double in the fixed order elementwise.hpp
// defines (chunks of kNormChunk, each over kNormLanes lanes). The same gradient gives the same bits
// on every rank, run and backend (squares of floats are exact in double).
double global_norm(const float* x, size_t n);
// *norm = global_norm(x, n); x *= clip_factor(*norm, max_norm) where that is not 1.
void clip_global_norm(float* x, size_t n, float max_norm, double* norm);

// out[i] = ((terms[0][i] + terms[1][i]) + terms[2][i]) + ... over `count` >= 1 terms, in that
// order (every caller that sums the same terms gets the same bits). One pass: `out` may be one of
// the terms, each run of 64 elements being read from every term before it is written.
void sum_terms(const float* const* terms, size_t count, float* out, size_t n);

// y = x * s element-wise
void multiply(const float* x, const float* s, float* y, int64_t n);
// y = op(x), y = op(a, b), y = scale * x + shift (mgt::Ops)
void unary(UnaryOp op, const float* x, float* y, int64_t n);
void binary(BinaryOp op, const float* a, const float* b, float* y, int64_t n);
void affine(const float* x, float* y, int64_t n, float scale, float shift);
// mgt::Ops::channel_sums and channel_affine (mgtrain/ops.hpp); block: 1 (NCHW), 8 or 16.
void channel_sums(const float* a, const float* b, const float* center, int64_t batch, int64_t channels, int64_t plane,
                  float* sum_a, float* sum_ab, int64_t block = 1, const float* mask = nullptr);
void channel_affine(const float* a, const float* scale_a, const float* b, const float* scale_b, const float* shift,
                    float* y, int64_t batch, int64_t channels, int64_t plane, int64_t block = 1,
                    const float* mask = nullptr, bool relu = false);
// Turns uniforms u in [0, 1) into inverted-dropout scales: 0 when u < p, else 1 / (1 - p).
void dropout_scales(float* u, int64_t n, float p);

}  // namespace mgt::kernels
