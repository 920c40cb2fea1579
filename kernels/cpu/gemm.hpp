#pragma once
// Single-precision GEMM and the CPU thread setting, through oneDNN. Row-major, like dnnl_sgemm:
// C[m, n] = alpha * op(A)[m, k] * op(B)[k, n] + beta * C[m, n].
#include <cstdint>

namespace mgt::kernels {

void sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
           int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

// Threads oneDNN (OpenMP) uses for GEMM and convolution on the calling thread; each rank uses one
// by default when ranks >= cores, and the launcher sets it.
void set_cpu_threads(int threads);
int cpu_threads();

}  // namespace mgt::kernels
