#pragma once
// NVML, loaded at run time, and a background monitor of one GPU built on it: part of the GPU
// library (and of mgtrain-doctor), not of the runtime, which asks the GPU library for samples. A machine without the
// NVIDIA driver has no libnvidia-ml, and that must not stop mgtrain from starting: nothing links
// NVML, and without it every query answers "unknown" instead of failing.
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "kernels/gpu_runtime.hpp"

namespace mgt {

// The few NVML calls mgtrain needs, looked up with dlopen/dlsym. GPUs are named by PCI bus id
// ("00000000:1A:00.0"), the one key CUDA and NVML agree on whatever CUDA_VISIBLE_DEVICES says.
// NVML is thread-safe, so one instance may be queried from several threads.
class Nvml {
 public:
  struct Memory {
    int64_t total = 0, used = 0;  // bytes
  };
  struct Utilization {
    int gpu = 0, memory = 0;  // percent of the last sample period with kernels / memory traffic
  };

  Nvml();
  ~Nvml();
  Nvml(const Nvml&) = delete;
  Nvml& operator=(const Nvml&) = delete;

  // False when libnvidia-ml is absent, lacks a required call or does not initialise.
  bool ok() const { return ok_; }
  // GPUs NVML sees on this node; -1 when it cannot say.
  int device_count() const;
  // The driver's version ("570.124.06"); "" when unknown.
  std::string driver_version() const;
  // Each returns false, leaving `out` untouched, when NVML cannot say for this GPU.
  bool memory(const std::string& pci_bus_id, Memory& out) const;
  bool utilization(const std::string& pci_bus_id, Utilization& out) const;
  bool temperature(const std::string& pci_bus_id, int& celsius) const;
  // NVLinks of this GPU that are up; false when NVML cannot say (no NVLink, an old driver).
  bool nvlinks_active(const std::string& pci_bus_id, int& links) const;

 private:
  // nvml.h's types, as its ABI defines them (declared here: the header is not installed with the
  // driver, and mgtrain must build without it).
  using Status = int;  // nvmlReturn_t, 0 = NVML_SUCCESS
  using Device = struct NvmlDevice*;
  struct MemoryV1 {  // nvmlMemory_t
    unsigned long long total, free, used;
  };
  struct MemoryV2 {  // nvmlMemory_v2_t
    unsigned version;
    unsigned long long total, reserved, free, used;
  };
  struct UtilizationRates {  // nvmlUtilization_t
    unsigned gpu, memory;
  };

  bool device(const std::string& pci_bus_id, Device& out) const;

  void* lib_ = nullptr;
  bool ok_ = false;
  Status (*init_)() = nullptr;
  Status (*shutdown_)() = nullptr;
  Status (*count_)(unsigned*) = nullptr;
  Status (*by_pci_)(const char*, Device*) = nullptr;
  Status (*memory_v1_)(Device, MemoryV1*) = nullptr;
  Status (*memory_v2_)(Device, MemoryV2*) = nullptr;
  Status (*driver_)(char*, unsigned) = nullptr;
  Status (*utilization_)(Device, UtilizationRates*) = nullptr;
  Status (*temperature_)(Device, int, unsigned*) = nullptr;   // sensor: nvmlTemperatureSensors_t
  Status (*nvlink_state_)(Device, unsigned, int*) = nullptr;  // link, nvmlEnableState_t (1 = up)
};

// Reads the GPU at this PCI address now; invalid when NVML is absent or does not know it.
GpuSample read_gpu_sample(const Nvml& nvml, const std::string& pci_bus_id);

// Samples one GPU every interval_s seconds on its own thread, so the training loop reads the
// latest figures without waiting on the driver. The first sample is taken in the constructor.
// Inert (no thread, latest() invalid) when NVML is absent or pci_bus_id is empty. The destructor
// wakes the thread and joins it at once, whatever the interval.
class GpuMonitor {
 public:
  // interval_s must be positive and finite (ConfigError otherwise).
  GpuMonitor(const std::string& pci_bus_id, double interval_s);
  // Samples with `read` instead of NVML: the thread's behaviour, testable without a GPU.
  GpuMonitor(std::function<GpuSample()> read, double interval_s);
  ~GpuMonitor();
  GpuMonitor(const GpuMonitor&) = delete;
  GpuMonitor& operator=(const GpuMonitor&) = delete;

  // Safe from any thread.
  GpuSample latest() const;
  // True when a sampling thread runs.
  bool active() const { return thread_.joinable(); }

 private:
  void start(std::function<GpuSample()> read);
  GpuSample read_now() const noexcept;
  void run();

  const std::chrono::milliseconds interval_;
  std::unique_ptr<Nvml> nvml_;  // owned here when sampling through NVML
  std::function<GpuSample()> read_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  GpuSample latest_;
  std::thread thread_;  // last: started once everything it reads exists
};

}  // namespace mgt
