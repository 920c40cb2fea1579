#include "kernels/cpu/bf16.hpp"

#include <cstring>
#include <vector>

#include "kernels/cpu/gemm.hpp"

namespace mgt::kernels {

uint16_t to_bf16(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return 0x7fff;  // NaN, as CUDA's __float2bfloat16_rn
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

float from_bf16(uint16_t x) {
  const uint32_t bits = static_cast<uint32_t>(x) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

void to_bf16(const float* x, uint16_t* y, size_t n) {
  for (size_t i = 0; i < n; ++i) y[i] = to_bf16(x[i]);
}

void round_to_bf16(const float* x, float* y, size_t n) {
  for (size_t i = 0; i < n; ++i) y[i] = from_bf16(to_bf16(x[i]));
}

void gemm_bf16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const uint16_t* a, int64_t lda,
               const uint16_t* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  // The operands widened to FP32 (exactly), then the FP32 GEMM. The buffers keep their size
  // between calls, so a step allocates nothing after the first.
  thread_local std::vector<float> wide_a, wide_b;
  const auto widen = [](const uint16_t* src, int64_t rows, int64_t ld, std::vector<float>& dst) {
    dst.resize(static_cast<size_t>(rows * ld));
    for (size_t i = 0; i < dst.size(); ++i) dst[i] = from_bf16(src[i]);
  };
  widen(a, trans_a ? k : m, lda, wide_a);
  widen(b, trans_b ? n : k, ldb, wide_b);
  sgemm(trans_a, trans_b, m, n, k, alpha, wide_a.data(), lda, wide_b.data(), ldb, beta, c, ldc);
}

}  // namespace mgt::kernels
