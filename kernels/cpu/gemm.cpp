#include "kernels/cpu/gemm.hpp"

#include <omp.h>

#include <string>

#include "mgtrain/error.hpp"
#include "oneapi/dnnl/dnnl.h"

namespace mgt::kernels {

void sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
           int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  const dnnl_status_t status = dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', m, n, k, alpha,
                                          a, lda, b, ldb, beta, c, ldc);
  if (status != dnnl_success)
    throw Error("dnnl_sgemm failed with status " + std::to_string(static_cast<int>(status)) +
                " for m=" + std::to_string(m) + " n=" + std::to_string(n) +
                " k=" + std::to_string(k));
}

void set_cpu_threads(int threads) {
  MGT_CHECK(threads >= 1, ConfigError,
            "cpu threads must be at least 1, got " + std::to_string(threads));
  omp_set_num_threads(threads);
}

int cpu_threads() { return omp_get_max_threads(); }

}  // namespace mgt::kernels
