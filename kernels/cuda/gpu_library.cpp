// The entry points of libmgtrain-gpu.so, which the runtime loads by name (core/src/device/gpu_runtime.hpp)
// when a rank trains on a GPU; the interface is kernels/gpu_runtime.hpp.
#include <cstdio>
#include <cstring>
#include <string>

#include "kernels/cuda/cuda_backend.hpp"
#include "kernels/cuda/nccl_communicator.hpp"
#include "kernels/cuda/nvml.hpp"
#include "kernels/cuda/runtime.hpp"
#include "kernels/gpu_runtime.hpp"

namespace mgt::cuda {

namespace {

class CudaGpuRuntime final : public GpuRuntime {
 public:
  explicit CudaGpuRuntime(int device) {
    const DeviceProperties props = device_properties(device);  // creates no context
    info_.index = device;
    info_.name = props.name;
    info_.pci_bus_id = props.pci_bus_id;
    // What others hold, read before this process's context takes its share.
    Nvml nvml;
    Nvml::Memory memory;
    if (nvml.ok() && nvml.memory(props.pci_bus_id, memory))
      info_.used_by_others_mb = static_cast<double>(memory.used) / 1048576.0;
    backend_ = make_cuda_backend(device);
    const MemoryInfo m = memory_info();
    info_.total_mb = static_cast<double>(m.total) / 1048576.0;
    info_.free_mb = static_cast<double>(m.free) / 1048576.0;
  }

  kernels::Backend& backend() override { return *backend_; }
  const GpuDeviceInfo& device() const override { return info_; }
  std::unique_ptr<Communicator> make_communicator(Communicator& host) override {
    return make_nccl_communicator(host, compute_stream(*backend_), info_.index);
  }
  void raise_if_failed(Communicator& comm) override { cuda::raise_if_failed(comm); }
  void start_sampling(double interval_s) override {
    monitor_ = std::make_unique<GpuMonitor>(info_.pci_bus_id, interval_s);
  }
  GpuSample gpu_sample() const override { return monitor_ ? monitor_->latest() : GpuSample{}; }

 private:
  GpuDeviceInfo info_;
  std::unique_ptr<kernels::Backend> backend_;
  std::unique_ptr<GpuMonitor> monitor_;  // last: its thread stops before the rest goes
};

}  // namespace

}  // namespace mgt::cuda

extern "C" __attribute__((visibility("default"))) int mgtrain_gpu_device_count(char* why, size_t why_size) {
  std::string reason;
  const int n = mgt::cuda::device_count(&reason);
  if (why && why_size > 0) std::snprintf(why, why_size, "%s", reason.c_str());
  return n;
}

extern "C" __attribute__((visibility("default"))) mgt::GpuRuntime* mgtrain_gpu_open(int device) {
  return new mgt::cuda::CudaGpuRuntime(device);
}
