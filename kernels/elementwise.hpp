#pragma once
// The element-wise functions of mgt::Ops (unary, binary, affine), defined once for the CPU loops
// (kernels/cpu/pointwise.cpp) and the CUDA kernels (kernels/cuda/elementwise.cu). Transcendental
// functions come from each side's math library, so the CPU and the GPU agree to rounding, not bits.
#include <cmath>

#include "kernels/philox.hpp"
#include "mgtrain/ops.hpp"

namespace mgt::kernels {

MGT_HOST_DEVICE float apply_unary(UnaryOp op, float x) {
  switch (op) {
    case UnaryOp::relu:
      return x > 0.0f ? x : 0.0f;
    case UnaryOp::sigmoid:
      return 1.0f / (1.0f + expf(-x));
    case UnaryOp::tanh:
      return tanhf(x);
    case UnaryOp::exp:
      return expf(x);
    case UnaryOp::log:
      return logf(x);
    case UnaryOp::sqrt:
      return sqrtf(x);
    case UnaryOp::reciprocal:
      return 1.0f / x;
    case UnaryOp::square:
      return x * x;
    case UnaryOp::abs:
      return fabsf(x);
    case UnaryOp::erf:
      return erff(x);
  }
  return x;
}

MGT_HOST_DEVICE float apply_binary(BinaryOp op, float a, float b) {
  switch (op) {
    case BinaryOp::add:
      return a + b;
    case BinaryOp::subtract:
      return a - b;
    case BinaryOp::multiply:
      return a * b;
    case BinaryOp::divide:
      return a / b;
    case BinaryOp::maximum:
      return a > b ? a : b;
    case BinaryOp::minimum:
      return a < b ? a : b;
  }
  return a;
}

// Elements first_index.. of the stream (key, stream) as uniforms in [0, 1): mgt::rng::fill_uniform.
inline void philox_fill_uniform(float* out, size_t n, uint64_t key, uint64_t stream, uint64_t first_index) {
  size_t i = 0;
  uint64_t index = first_index;
  while (i < n) {
    const Philox4 r = philox(key, stream, index / 4);
    for (uint64_t lane = index % 4; lane < 4 && i < n; ++lane, ++i, ++index) out[i] = philox_unit(r.w[lane]);
  }
}

}  // namespace mgt::kernels
