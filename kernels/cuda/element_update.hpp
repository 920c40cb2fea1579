#pragma once
// An optimizer's element update (mgt::ElementwiseUpdate) as a kernel for one GPU, compiled at run
// time with NVRTC from the plugin's own source: the plugin carries no CUDA, and its update is the
// text its CPU loop was compiled from. No CUDA type appears here.
#include <cstddef>
#include <cstdint>
#include <memory>

#include "kernels/cuda/runtime.hpp"
#include "mgtrain/update_rule.hpp"

namespace mgt::cuda {

class ElementUpdateKernel {
 public:
  // Compiles for `device`'s architecture; throws mgt::CudaError with NVRTC's log when the source
  // does not compile.
  ElementUpdateKernel(const ElementwiseUpdate& update, int device);
  ~ElementUpdateKernel();
  ElementUpdateKernel(const ElementUpdateKernel&) = delete;
  ElementUpdateKernel& operator=(const ElementUpdateKernel&) = delete;
  // As kernels::UpdateOp::run, on `stream`; recordable.
  void run(float* params, const float* grads, float* const* state, const void* scalars, size_t n,
           const uint8_t* decayed, const int32_t* skip, Stream stream);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace mgt::cuda
