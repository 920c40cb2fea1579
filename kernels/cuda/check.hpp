#pragma once
// Status checks for the CUDA runtime, cuBLAS, cuDNN and NCCL: each turns a failed call into
// mgt::CudaError naming the call as written, file:line, and the library's own name and text for
// the status. For sources of the GPU path only: it includes the CUDA headers.
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>
#include <nccl.h>

#include <cstdint>

namespace mgt::cuda::detail {

// Throws mgt::CudaError: "<library> call <call> failed at <file>:<line>: <text> (<name>)"; the
// name is left out when null (cuDNN's and NCCL's text already names the status).
[[noreturn]] void raise_error(const char* library, const char* call, const char* file, int line, const char* name,
                              const char* text);

}  // namespace mgt::cuda::detail

#define MGT_CUDA_CHECK(call)                                                                                  \
  do {                                                                                                        \
    const cudaError_t mgt_cuda_status_ = (call);                                                              \
    if (mgt_cuda_status_ != cudaSuccess)                                                                      \
      ::mgt::cuda::detail::raise_error("CUDA", #call, __FILE__, __LINE__, cudaGetErrorName(mgt_cuda_status_), \
                                       cudaGetErrorString(mgt_cuda_status_));                                 \
  } while (0)

// After a kernel launch: a bad launch configuration or a missing kernel image for this GPU shows
// here; errors inside the kernel show at the next synchronisation.
#define MGT_CUDA_CHECK_LAUNCH(kernel_name)                                                                        \
  do {                                                                                                            \
    const cudaError_t mgt_cuda_status_ = cudaGetLastError();                                                      \
    if (mgt_cuda_status_ != cudaSuccess)                                                                          \
      ::mgt::cuda::detail::raise_error("CUDA", "launch of kernel " kernel_name, __FILE__, __LINE__,               \
                                       cudaGetErrorName(mgt_cuda_status_), cudaGetErrorString(mgt_cuda_status_)); \
  } while (0)

#define MGT_CUBLAS_CHECK(call)                                                                                       \
  do {                                                                                                               \
    const cublasStatus_t mgt_cublas_status_ = (call);                                                                \
    if (mgt_cublas_status_ != CUBLAS_STATUS_SUCCESS)                                                                 \
      ::mgt::cuda::detail::raise_error("cuBLAS", #call, __FILE__, __LINE__, cublasGetStatusName(mgt_cublas_status_), \
                                       cublasGetStatusString(mgt_cublas_status_));                                   \
  } while (0)

#define MGT_CUDNN_CHECK(call)                                                       \
  do {                                                                              \
    const cudnnStatus_t mgt_cudnn_status_ = (call);                                 \
    if (mgt_cudnn_status_ != CUDNN_STATUS_SUCCESS)                                  \
      ::mgt::cuda::detail::raise_error("cuDNN", #call, __FILE__, __LINE__, nullptr, \
                                       cudnnGetErrorString(mgt_cudnn_status_));     \
  } while (0)

#define MGT_NCCL_CHECK(call)                                                       \
  do {                                                                             \
    const ncclResult_t mgt_nccl_status_ = (call);                                  \
    if (mgt_nccl_status_ != ncclSuccess)                                           \
      ::mgt::cuda::detail::raise_error("NCCL", #call, __FILE__, __LINE__, nullptr, \
                                       ncclGetErrorString(mgt_nccl_status_));      \
  } while (0)

namespace mgt::cuda::detail {

// Blocks for a grid-stride loop over n elements: enough to fill any current GPU, capped so the
// count fits gridDim.x on every architecture.
inline unsigned grid_blocks(int64_t n, int threads) {
  const int64_t blocks = (n + threads - 1) / threads;
  return static_cast<unsigned>(blocks < 65535 ? blocks : 65535);
}

}  // namespace mgt::cuda::detail
