#pragma once
// The GELU's tanh form (GPT-2, PyTorch's approximate='tanh'), written once for the CPU kernels
// (kernels/cpu/sequence.cpp) and the CUDA ones (kernels/cuda/sequence_ops.cu). Each function
// takes the tanh its caller computed, t = tanh(gelu_tanh_argument(v)), since the two compute it
// differently (a vectorisable form on the CPU, tanhf on the GPU). The expressions are the ones
// both used before, term for term, so the results keep their bits.
#if defined(__CUDACC__)
#define MGT_GELU_FUNCTION __host__ __device__ inline
#else
#define MGT_GELU_FUNCTION inline
#endif

namespace mgt::kernels {

constexpr float kGeluC = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluA = 0.044715f;

// The argument of the tanh: sqrt(2 / pi) * (v + 0.044715 v^3).
MGT_GELU_FUNCTION float gelu_tanh_argument(float v) { return kGeluC * (v + kGeluA * v * v * v); }

// GELU(v) = v / 2 * (1 + t).
MGT_GELU_FUNCTION float gelu_value(float v, float t) { return 0.5f * v * (1.0f + t); }

// GELU'(v) = (1 + t) / 2 + v / 2 * dt/dv, with dt/dv = sqrt(2 / pi) (1 + 3 * 0.044715 v^2) (1 - t^2).
MGT_GELU_FUNCTION float gelu_derivative(float v, float t) {
  const float dt = kGeluC * (1.0f + 3.0f * kGeluA * v * v) * (1.0f - t * t);
  return 0.5f * (1.0f + t) + 0.5f * v * dt;
}

}  // namespace mgt::kernels

#undef MGT_GELU_FUNCTION
