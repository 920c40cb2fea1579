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

}  // namespace mgt::kernels
