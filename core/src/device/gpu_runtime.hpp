#pragma once
// Finding and opening libmgtrain-gpu.so, whose interface is kernels/gpu_runtime.hpp.
#include <memory>
#include <string>

#include "kernels/gpu_runtime.hpp"

namespace mgt {

// GPUs this process can use: 0 with the reason when the library was not built or not found, or
// CUDA finds no device. Never throws.
int visible_gpus(std::string* why);

// Opens GPU `device` (0-based among the visible ones) and makes it current. Throws ConfigError when
// the library is missing, CudaError when the device cannot be used.
std::unique_ptr<GpuRuntime> open_gpu_runtime(int device);

}  // namespace mgt
