#include "kernels/cuda/runtime.hpp"

#include <cstdio>
#include <string>

#include "kernels/cuda/check.hpp"
#include "mgtrain/error.hpp"

namespace mgt::cuda {

namespace detail {

void raise_error(const char* library, const char* call, const char* file, int line, const char* name,
                 const char* text) {
  std::string where = file;
#ifdef MGTRAIN_SOURCE_DIR
  // __FILE__ is absolute in a CMake build; the path inside the source tree is what helps a reader.
  const std::string root = MGTRAIN_SOURCE_DIR;
  if (where.rfind(root, 0) == 0) where.erase(0, root.size());
#endif
  std::string message = std::string(library) + " call " + call + " failed at " + where + ":" + std::to_string(line) +
                        ": " + (text ? text : "unknown error");
  if (name && *name) message += std::string(" (") + name + ")";
  throw CudaError(message);
}

}  // namespace detail

int device_count(std::string* why) noexcept {
  try {
    int count = 0;
    const cudaError_t status = cudaGetDeviceCount(&count);
    if (status == cudaSuccess) {
      if (count == 0 && why) *why = "no CUDA device";
      return count;
    }
    cudaGetLastError();  // leave no error behind for the next check
    if (why) {
      const std::string detail =
          std::string("cudaGetDeviceCount: ") + cudaGetErrorString(status) + ", " + cudaGetErrorName(status);
      int driver = 0;
      // 0 means the runtime found no driver library at all, which its error text does not say.
      if (cudaDriverGetVersion(&driver) == cudaSuccess && driver == 0)
        *why = "no CUDA driver found; " + detail;
      else
        *why = detail;
    }
    return 0;
  } catch (...) {  // only a failed string allocation can get here
    return 0;
  }
}

bool can_access_peer(int device, int peer) noexcept {
  int can = 0;
  if (cudaDeviceCanAccessPeer(&can, device, peer) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return can != 0;
}

DeviceProperties device_properties(int device) {
  cudaDeviceProp prop{};
  MGT_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  DeviceProperties out;
  out.name = prop.name;
  out.compute_major = prop.major;
  out.compute_minor = prop.minor;
  out.multiprocessors = prop.multiProcessorCount;
  out.total_memory = static_cast<int64_t>(prop.totalGlobalMem);
  char bus_id[32] = {};
  MGT_CUDA_CHECK(cudaDeviceGetPCIBusId(bus_id, sizeof bus_id, device));
  out.pci_bus_id = bus_id;
  return out;
}

void set_device(int device) { MGT_CUDA_CHECK(cudaSetDevice(device)); }

int current_device() {
  int device = 0;
  MGT_CUDA_CHECK(cudaGetDevice(&device));
  return device;
}

MemoryInfo memory_info() {
  size_t free = 0, total = 0;
  MGT_CUDA_CHECK(cudaMemGetInfo(&free, &total));
  return {static_cast<int64_t>(free), static_cast<int64_t>(total)};
}

void* device_malloc(size_t bytes) {
  if (bytes == 0) return nullptr;
  void* ptr = nullptr;
  const cudaError_t status = cudaMalloc(&ptr, bytes);
  if (status != cudaSuccess) {
    cudaGetLastError();  // an out-of-memory error is not sticky: clear it for the next check
    if (status == cudaErrorMemoryAllocation) {
      size_t free_bytes = 0, total_bytes = 0;
      cudaMemGetInfo(&free_bytes, &total_bytes);
      char text[200];
      std::snprintf(text, sizeof text, "cudaMalloc of %.1f MB failed with %.1f MB free of %.1f MB",
                    static_cast<double>(bytes) / 1048576.0, static_cast<double>(free_bytes) / 1048576.0,
                    static_cast<double>(total_bytes) / 1048576.0);
      throw OutOfMemoryError(text);
    }
    detail::raise_error("CUDA", ("cudaMalloc of " + std::to_string(bytes) + " bytes").c_str(), __FILE__, __LINE__,
                        cudaGetErrorName(status), cudaGetErrorString(status));
  }
  return ptr;
}

void device_free(void* ptr) noexcept {
  // Called from destructors, also while unwinding from a CUDA error: nothing to report here.
  if (ptr) cudaFree(ptr);
}

void copy_to_device(void* dst, const void* src, size_t bytes) {
  if (bytes) MGT_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
}

void copy_to_host(void* dst, const void* src, size_t bytes) {
  if (bytes) MGT_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost));
}

void copy_on_device(void* dst, const void* src, size_t bytes) {
  if (bytes) MGT_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToDevice));
}

void fill_bytes(void* dst, int value, size_t bytes) {
  if (bytes) MGT_CUDA_CHECK(cudaMemset(dst, value, bytes));
}

void synchronize(Stream stream) { MGT_CUDA_CHECK(cudaStreamSynchronize(stream)); }

LibraryVersions library_versions() noexcept {
  LibraryVersions v;
  if (cudaDriverGetVersion(&v.driver) != cudaSuccess) v.driver = 0;
  if (cudaRuntimeGetVersion(&v.runtime) != cudaSuccess) v.runtime = 0;
  cudaGetLastError();
  v.cudnn = static_cast<int>(cudnnGetVersion());
  if (ncclGetVersion(&v.nccl) != ncclSuccess) v.nccl = 0;
  return v;
}

LibraryVersions compiled_versions() noexcept {
  LibraryVersions v;
  v.runtime = CUDART_VERSION;
  v.cudnn = CUDNN_VERSION;
  v.nccl = NCCL_VERSION_CODE;
  return v;
}

std::string cuda_version_string(int version) {
  if (version <= 0) return "-";
  return std::to_string(version / 1000) + "." + std::to_string(version % 1000 / 10);
}

std::string cudnn_version_string(int version) {
  if (version <= 0) return "-";
  // cuDNN 9 encodes major * 10000 + minor * 100 + patch; cuDNN 8 and older major * 1000 + ...
  const int major = version >= 90000 ? version / 10000 : version / 1000;
  const int minor = version >= 90000 ? version % 10000 / 100 : version % 1000 / 100;
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(version % 100);
}

std::string nccl_version_string(int version) {
  if (version <= 0) return "-";
  // From NCCL 2.9 the code is major * 10000 + minor * 100 + patch; before, major * 1000 + ...
  const int major = version >= 10000 ? version / 10000 : version / 1000;
  const int minor = version >= 10000 ? version % 10000 / 100 : version % 1000 / 100;
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(version % 100);
}

}  // namespace mgt::cuda
