#pragma once
// The GPU path lives in its own library, libmgtrain-gpu.so (kernels/cuda), next to libmgtrain.so
// and loaded only by a rank that trains on a GPU: cuBLAS, cuDNN and NCCL add more than 150 MB of
// resident memory to any process that loads them, GPU or not. This is the interface between the
// two: what the runtime (core/src/device/gpu_runtime.hpp loads the library) sees of it.
#include <cstdint>
#include <memory>
#include <string>

#include "kernels/backend.hpp"
#include "mgtrain/communicator.hpp"

namespace mgt {

// One reading of a GPU (NVML). valid: NVML found the GPU and read its memory; a figure it could not
// read on a valid sample (utilisation on a MIG instance, say) is NaN.
struct GpuSample {
  bool valid = false;
  double util_percent = 0, memory_used_mb = 0, memory_total_mb = 0, temperature_c = 0;
};

struct GpuDeviceInfo {
  int index = -1;                    // as CUDA_VISIBLE_DEVICES numbers them
  std::string name;                  // "NVIDIA H200"
  std::string pci_bus_id;            // 00000000:1A:00.0
  double total_mb = 0, free_mb = 0;  // when the runtime opened it
  double used_by_others_mb = -1;     // in use before this process touched it (NVML); -1: unknown
};

// One rank's GPU: the backend the compiled step runs on, and the NCCL communicator.
class GpuRuntime {
 public:
  virtual ~GpuRuntime() = default;
  virtual kernels::Backend& backend() = 0;
  virtual const GpuDeviceInfo& device() const = 0;
  // The `nccl` communicator over the ranks of `host`, ordered with the backend's compute stream.
  // Collective: every rank of `host` must call it.
  virtual std::unique_ptr<Communicator> make_communicator(Communicator& host) = 0;
  // Throws CommError (marking it failed, to be aborted when destroyed) when NCCL reports `comm`,
  // made by make_communicator, as failed; returns otherwise, and for any other communicator.
  virtual void raise_if_failed(Communicator& comm) = 0;
  // Samples the GPU (NVML) every interval_s seconds on a thread of the library's, from now on;
  // ConfigError for an interval that is not positive and finite.
  virtual void start_sampling(double interval_s) = 0;
  // The latest sample; invalid before start_sampling or without NVML. Safe from any thread.
  virtual GpuSample gpu_sample() const = 0;
};

}  // namespace mgt

// The library's entry points, looked up by name (C linkage, so the names are stable).
#define MGTRAIN_GPU_LIBRARY "libmgtrain-gpu.so"
#define MGTRAIN_GPU_COUNT_SYMBOL "mgtrain_gpu_device_count"
#define MGTRAIN_GPU_OPEN_SYMBOL "mgtrain_gpu_open"
