#include "kernels/cuda/element_update.hpp"

#include <nvrtc.h>

#include <string>
#include <vector>

#include "kernels/cuda/check.hpp"
#include "mgtrain/error.hpp"

namespace mgt::cuda {

namespace {

constexpr int kThreads = 256;

// The loop around the plugin's element update; state buffers it does not use are null.
const char* const kKernel = R"(
extern "C" __global__ void mgt_element_update(float* __restrict__ p, const float* __restrict__ g, float* s0,
                                              float* s1, float* s2, float* s3, const mgt_scalars* __restrict__ sc,
                                              unsigned long long n, const unsigned char* __restrict__ decayed,
                                              const int* __restrict__ skip) {
  if (skip && *skip) return;
  const mgt_scalars s = *sc;
  float unused[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
  for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
    mgt_apply(p[i], g[i], s0 ? s0[i] : unused[0], s1 ? s1[i] : unused[1], s2 ? s2[i] : unused[2],
              s3 ? s3[i] : unused[3], decayed ? decayed[i] != 0 : true, s);
}
)";

void check_nvrtc(nvrtcResult status, const char* call, const std::string& update, const std::string& log = {}) {
  if (status == NVRTC_SUCCESS) return;
  throw CudaError("NVRTC call " + std::string(call) + " failed for optimizer update '" + update +
                  "': " + nvrtcGetErrorString(status) + (log.empty() ? "" : "\n" + log));
}

}  // namespace

struct ElementUpdateKernel::Impl {
  int states = 0;
  cudaLibrary_t library = nullptr;
  cudaKernel_t kernel = nullptr;
};

ElementUpdateKernel::ElementUpdateKernel(const ElementwiseUpdate& update, int device)
    : impl_(std::make_unique<Impl>()) {
  impl_->states = update.states();
  const std::string source = update.device_source() + kKernel;
  const DeviceProperties props = device_properties(device);
  const std::string arch = "--gpu-architecture=sm_" + std::to_string(props.compute_major * 10 + props.compute_minor);
  // No fused multiply-add: the GPU rounds every operation as the plugin's CPU loop does.
  const char* options[] = {arch.c_str(), "--fmad=false", "--std=c++17"};
  nvrtcProgram program = nullptr;
  check_nvrtc(nvrtcCreateProgram(&program, source.c_str(), "element_update.cu", 0, nullptr, nullptr),
              "nvrtcCreateProgram", update.name());
  const nvrtcResult compiled = nvrtcCompileProgram(program, 3, options);
  std::string log;
  size_t log_size = 0;
  if (nvrtcGetProgramLogSize(program, &log_size) == NVRTC_SUCCESS && log_size > 1) {
    log.resize(log_size);
    nvrtcGetProgramLog(program, log.data());
    log.resize(log_size - 1);
  }
  std::vector<char> cubin;
  try {
    check_nvrtc(compiled, "nvrtcCompileProgram", update.name(), log);
    size_t size = 0;
    check_nvrtc(nvrtcGetCUBINSize(program, &size), "nvrtcGetCUBINSize", update.name());
    cubin.resize(size);
    check_nvrtc(nvrtcGetCUBIN(program, cubin.data()), "nvrtcGetCUBIN", update.name());
  } catch (...) {
    nvrtcDestroyProgram(&program);
    throw;
  }
  nvrtcDestroyProgram(&program);
  MGT_CUDA_CHECK(cudaLibraryLoadData(&impl_->library, cubin.data(), nullptr, nullptr, 0, nullptr, nullptr, 0));
  MGT_CUDA_CHECK(cudaLibraryGetKernel(&impl_->kernel, impl_->library, "mgt_element_update"));
}

ElementUpdateKernel::~ElementUpdateKernel() {
  if (impl_->library) cudaLibraryUnload(impl_->library);
}

void ElementUpdateKernel::run(float* params, const float* grads, float* const* state, const void* scalars, size_t n,
                              const uint8_t* decayed, const int32_t* skip, Stream stream) {
  if (n == 0) return;
  float* s[kMaxUpdateStates] = {};
  for (int k = 0; k < impl_->states; ++k) s[k] = state[k];
  unsigned long long count = n;
  void* args[] = {&params, &grads, &s[0], &s[1], &s[2], &s[3], &scalars, &count, &decayed, &skip};
  const unsigned blocks = detail::grid_blocks(static_cast<int64_t>(n), kThreads);
  // A kernel handle from a library launches like a kernel symbol.
  MGT_CUDA_CHECK(cudaLaunchKernel(reinterpret_cast<const void*>(impl_->kernel), dim3(blocks), dim3(kThreads), args, 0,
                                  static_cast<cudaStream_t>(stream)));
}

}  // namespace mgt::cuda
