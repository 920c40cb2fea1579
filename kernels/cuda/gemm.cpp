#include "kernels/cuda/gemm.hpp"

#include <climits>
#include <string>

#include "kernels/cuda/check.hpp"
#include "mgtrain/error.hpp"

namespace mgt::cuda {

BlasHandle::BlasHandle() {
  MGT_CUBLAS_CHECK(cublasCreate(&handle_));
  const cublasStatus_t status = cublasSetMathMode(handle_, CUBLAS_DEFAULT_MATH);
  if (status != CUBLAS_STATUS_SUCCESS) {
    cublasDestroy(handle_);
    MGT_CUBLAS_CHECK(status);
  }
}

BlasHandle::~BlasHandle() {
  if (handle_) cublasDestroy(handle_);
}

void BlasHandle::set_stream(Stream stream) { MGT_CUBLAS_CHECK(cublasSetStream(handle_, stream)); }

namespace {

std::string gemm_shape(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldb,
                       int64_t ldc) {
  return std::string("sgemm(") + (trans_a ? "T" : "N") + ", " + (trans_b ? "T" : "N") + ", m=" + std::to_string(m) +
         ", n=" + std::to_string(n) + ", k=" + std::to_string(k) + ", lda=" + std::to_string(lda) +
         ", ldb=" + std::to_string(ldb) + ", ldc=" + std::to_string(ldc) + ")";
}

}  // namespace

namespace {

// Row-major leading dimensions, checked here so a wrong one reads as such and not as cuBLAS's
// invalid-value status.
void check_gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldb, int64_t ldc) {
  const int64_t min_lda = trans_a ? m : k, min_ldb = trans_b ? k : n;
  MGT_CHECK(
      m > 0 && n > 0 && k >= 0 && lda >= (min_lda > 1 ? min_lda : 1) && ldb >= (min_ldb > 1 ? min_ldb : 1) && ldc >= n,
      Error,
      gemm_shape(trans_a, trans_b, m, n, k, lda, ldb, ldc) +
          ": sizes must be positive and each leading dimension at least its row length");
  MGT_CHECK(
      m <= INT_MAX && n <= INT_MAX && k <= INT_MAX && lda <= INT_MAX && ldb <= INT_MAX && ldc <= INT_MAX, Error,
      gemm_shape(trans_a, trans_b, m, n, k, lda, ldb, ldc) + ": cuBLAS takes sizes up to " + std::to_string(INT_MAX));
}

}  // namespace

void gemm_bf16(BlasHandle& blas, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
               const uint16_t* a, int64_t lda, const uint16_t* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  check_gemm(trans_a, trans_b, m, n, k, lda, ldb, ldc);
  // Column-major C^T = op(B)^T op(A)^T, as in sgemm.
  MGT_CUBLAS_CHECK(cublasGemmEx(blas.get(), trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N,
                                static_cast<int>(n), static_cast<int>(m), static_cast<int>(k), &alpha, b, CUDA_R_16BF,
                                static_cast<int>(ldb), a, CUDA_R_16BF, static_cast<int>(lda), &beta, c, CUDA_R_32F,
                                static_cast<int>(ldc), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

void sgemm(BlasHandle& blas, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
           int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  check_gemm(trans_a, trans_b, m, n, k, lda, ldb, ldc);
  // cuBLAS is column-major: a row-major C = op(A) op(B) is the column-major C^T = op(B)^T op(A)^T,
  // and each row-major matrix is already its own transpose in column-major order.
  MGT_CUBLAS_CHECK(cublasSgemm(blas.get(), trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N,
                               static_cast<int>(n), static_cast<int>(m), static_cast<int>(k), &alpha, b,
                               static_cast<int>(ldb), a, static_cast<int>(lda), &beta, c, static_cast<int>(ldc)));
}

void sgemm_strided_batched(BlasHandle& blas, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                           const float* a, int64_t lda, int64_t stride_a, const float* b, int64_t ldb, int64_t stride_b,
                           float beta, float* c, int64_t ldc, int64_t stride_c, int64_t batch) {
  if (m == 0 || n == 0 || batch == 0) return;
  check_gemm(trans_a, trans_b, m, n, k, lda, ldb, ldc);
  MGT_CHECK(batch <= INT_MAX, Error,
            "a batched GEMM of " + std::to_string(batch) + " matrices: cuBLAS takes up to " + std::to_string(INT_MAX));
  // Column-major C^T = op(B)^T op(A)^T per matrix, as in sgemm.
  MGT_CUBLAS_CHECK(cublasSgemmStridedBatched(
      blas.get(), trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, static_cast<int>(n),
      static_cast<int>(m), static_cast<int>(k), &alpha, b, static_cast<int>(ldb), stride_b, a, static_cast<int>(lda),
      stride_a, &beta, c, static_cast<int>(ldc), stride_c, static_cast<int>(batch)));
}

}  // namespace mgt::cuda
