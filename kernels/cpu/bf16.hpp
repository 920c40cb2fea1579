#pragma once
// bfloat16 on the CPU, for the CPU backend's run of bf16 mixed precision: the same rounding as the
// GPU's (to nearest, ties to even), and a GEMM of bf16 operands with FP32 accumulation. The
// products of two bf16 values are exact in FP32, so this computes what the GPU's tensor cores
// compute, up to the order of the sums.
#include <cstddef>
#include <cstdint>

namespace mgt::kernels {

uint16_t to_bf16(float x);
float from_bf16(uint16_t x);
void to_bf16(const float* x, uint16_t* y, size_t n);
// y = x rounded to bf16 and widened back (exactly): the values a bf16 tensor holds, in FP32.
// y may be x.
void round_to_bf16(const float* x, float* y, size_t n);

// Row-major, as sgemm: C = alpha * op(A) op(B) + beta * C with A and B in bf16.
void gemm_bf16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const uint16_t* a, int64_t lda,
               const uint16_t* b, int64_t ldb, float beta, float* c, int64_t ldc);

}  // namespace mgt::kernels
