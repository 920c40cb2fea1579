#pragma once
// Single-precision GEMM on the GPU through cuBLAS, with the row-major interface of
// kernels/cpu/gemm.hpp: C[m, n] = alpha * op(A)[m, k] * op(B)[k, n] + beta * C[m, n], all three
// matrices in device memory.
#include <cstdint>

#include "kernels/cuda/runtime.hpp"

struct cublasContext;

namespace mgt::cuda {

// A cuBLAS handle on the device current at construction, computing in full FP32: TF32 tensor
// cores would round the inputs to 10 mantissa bits and lose agreement with the CPU GEMM.
class BlasHandle {
 public:
  BlasHandle();
  ~BlasHandle();
  BlasHandle(const BlasHandle&) = delete;
  BlasHandle& operator=(const BlasHandle&) = delete;

  void set_stream(Stream stream);
  cublasContext* get() const { return handle_; }

 private:
  cublasContext* handle_ = nullptr;
};

// The same with A and B in bfloat16 (raw 16-bit patterns), C and the accumulation in FP32: the
// GEMMs of bf16 mixed precision, on tensor cores.
void gemm_bf16(BlasHandle& blas, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
               const uint16_t* a, int64_t lda, const uint16_t* b, int64_t ldb, float beta, float* c, int64_t ldc);

// `batch` such GEMMs whose operands lie stride_* floats apart, in one cuBLAS call.
void sgemm_strided_batched(BlasHandle& blas, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                           const float* a, int64_t lda, int64_t stride_a, const float* b, int64_t ldb, int64_t stride_b,
                           float beta, float* c, int64_t ldc, int64_t stride_c, int64_t batch);

void sgemm(BlasHandle& blas, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
           int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

}  // namespace mgt::cuda
