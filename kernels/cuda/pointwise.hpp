#pragma once
// Element-wise kernels of the layers on device memory, with the semantics of
// kernels/cpu/pointwise.hpp. Launched on `stream`; errors in the launch throw mgt::CudaError.
#include <cstdint>

#include "kernels/cuda/runtime.hpp"

namespace mgt::cuda {

// y = max(x, 0)
void relu_forward(const float* x, float* y, int64_t n, Stream stream = nullptr);
// dx = dy where y > 0, else 0
void relu_backward(const float* y, const float* dy, float* dx, int64_t n, Stream stream = nullptr);

}  // namespace mgt::cuda
