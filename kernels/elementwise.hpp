#pragma once
// The element-wise functions of mgt::Ops (unary, binary, affine), defined once for the CPU loops
// (kernels/cpu/pointwise.cpp) and the CUDA kernels (kernels/cuda/elementwise.cu). Transcendental
// functions come from each side's math library, so the CPU and the GPU agree to rounding, not bits.
#include <cmath>
#include <cstddef>

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
    case UnaryOp::sin:
      return sinf(x);
    case UnaryOp::cos:
      return cosf(x);
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

// Clipping by global norm (Backend::clip_global_norm): the norm's squares are summed in chunks of
// kNormChunk elements; in a chunk, element i goes to lane i % kNormLanes, each lane in order, and
// the lanes are then added in order; then the chunks' sums in order: on both sides alike. The
// factor a gradient of norm `norm` is scaled by: max_norm / (norm + 1e-6) when max_norm > 0 and
// the norm is finite and above it (torch.nn.utils.clip_grad_norm_), else 1.
constexpr size_t kNormChunk = 1024;
constexpr size_t kNormLanes = 16;
MGT_HOST_DEVICE float clip_factor(double norm, float max_norm) {
  const bool finite = norm - norm == 0.0;  // false for NaN and the infinities, on either side
  if (!(max_norm > 0.0f) || !finite || norm <= static_cast<double>(max_norm)) return 1.0f;
  return static_cast<float>(static_cast<double>(max_norm) / (norm + 1e-6));
}

}  // namespace mgt::kernels
