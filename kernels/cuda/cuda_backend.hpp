#pragma once
// The GPU backend of the dispatch interface (kernels/backend.hpp) on one device: cuBLAS, cuDNN
// and the kernels of kernels/cuda on one compute stream, input staging on a second stream, and
// steps recorded as CUDA graphs. No CUDA header is included.
#include <memory>

#include "kernels/backend.hpp"
#include "kernels/cuda/runtime.hpp"

namespace mgt::cuda {

// Makes `device` current and creates the streams, handles and events on it.
std::unique_ptr<kernels::Backend> make_cuda_backend(int device);
// The compute stream of a backend made by make_cuda_backend, which NCCL orders itself with.
Stream compute_stream(kernels::Backend& backend);

}  // namespace mgt::cuda
