#pragma once
// The CUDA runtime as the rest of mgtrain sees it: device discovery that never throws, device
// memory and copies, and the versions of the CUDA libraries in use. No CUDA header is included,
// so core, launcher and test sources use it with the plain C++ compiler; a stream is CUDA's own
// opaque pointer type. Errors are mgt::CudaError naming the call, file:line and CUDA's text.
#include <cstddef>
#include <cstdint>
#include <string>

struct CUstream_st;

namespace mgt::cuda {

using Stream = CUstream_st*;  // cudaStream_t; nullptr is the default stream

// Devices this process can use: 0 when there is no driver or no device (or the runtime fails to
// start), with the reason in *why. Never throws, so a CPU-only machine can ask.
int device_count(std::string* why = nullptr) noexcept;

struct DeviceProperties {
  std::string name;
  std::string pci_bus_id;  // e.g. 00000000:1A:00.0, the key NVML and nvidia-smi use
  int compute_major = 0, compute_minor = 0;
  int multiprocessors = 0;
  int64_t total_memory = 0;  // bytes
};

// Properties of device `device` (0-based, as CUDA_VISIBLE_DEVICES numbers them); does not create
// a context on it.
DeviceProperties device_properties(int device);

// Whether `device` can read and write `peer`'s memory directly (peer-to-peer over NVLink or PCIe);
// false when it cannot or CUDA cannot say. Creates no context.
bool can_access_peer(int device, int peer) noexcept;

void set_device(int device);
int current_device();

struct MemoryInfo {
  int64_t free = 0, total = 0;  // bytes, of the current device, as cudaMemGetInfo reports them
};
// Creates the current device's context if it has none (a few hundred MB of device memory).
MemoryInfo memory_info();

// Raw device memory; most code wants DeviceBuffer (device_buffer.hpp). 0 bytes gives nullptr
// without touching the device.
void* device_malloc(size_t bytes);
void device_free(void* ptr) noexcept;
// Synchronous copies and fill.
void copy_to_device(void* dst, const void* src, size_t bytes);
void copy_to_host(void* dst, const void* src, size_t bytes);
void copy_on_device(void* dst, const void* src, size_t bytes);
void fill_bytes(void* dst, int value, size_t bytes);
// Waits for the stream's work; raises any error an earlier asynchronous kernel left.
void synchronize(Stream stream = nullptr);

// Versions as the libraries encode them, 0 where a library cannot say (no driver, say).
struct LibraryVersions {
  int driver = 0;   // highest CUDA version the driver supports, e.g. 13000
  int runtime = 0;  // libcudart loaded, e.g. 13000
  int cudnn = 0;    // libcudnn loaded, e.g. 91900
  int nccl = 0;     // libnccl loaded, e.g. 22809
};
LibraryVersions library_versions() noexcept;
// The versions mgtrain was compiled against (the headers), in the same encodings.
LibraryVersions compiled_versions() noexcept;

// "13.0", "9.19.0", "2.28.9"; "-" for 0.
std::string cuda_version_string(int version);
std::string cudnn_version_string(int version);
std::string nccl_version_string(int version);

}  // namespace mgt::cuda
