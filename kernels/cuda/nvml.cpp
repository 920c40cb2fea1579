#include "kernels/cuda/nvml.hpp"

#include <dlfcn.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "mgtrain/error.hpp"

namespace mgt {

namespace {

constexpr double kMiB = 1024.0 * 1024.0;
constexpr int kTemperatureGpu = 0;  // NVML_TEMPERATURE_GPU: the GPU die's sensor

template <typename F>
F symbol(void* lib, const char* name) {
  return reinterpret_cast<F>(dlsym(lib, name));
}

// A wait far past any run's length stands for "never": the clock's arithmetic must not overflow.
std::chrono::milliseconds checked_interval(double interval_s) {
  if (!std::isfinite(interval_s) || interval_s <= 0.0)
    throw ConfigError("GPU monitor interval must be a positive number of seconds, got " + std::to_string(interval_s));
  const double ms = std::min(interval_s, 1e7) * 1e3;
  return std::chrono::milliseconds(std::max<long long>(1, std::llround(ms)));
}

}  // namespace

Nvml::Nvml() {
  lib_ = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib_) return;
  init_ = symbol<Status (*)()>(lib_, "nvmlInit_v2");
  shutdown_ = symbol<Status (*)()>(lib_, "nvmlShutdown");
  count_ = symbol<Status (*)(unsigned*)>(lib_, "nvmlDeviceGetCount_v2");
  by_pci_ = symbol<Status (*)(const char*, Device*)>(lib_, "nvmlDeviceGetHandleByPciBusId_v2");
  memory_v1_ = symbol<Status (*)(Device, MemoryV1*)>(lib_, "nvmlDeviceGetMemoryInfo");
  memory_v2_ = symbol<Status (*)(Device, MemoryV2*)>(lib_, "nvmlDeviceGetMemoryInfo_v2");
  driver_ = symbol<Status (*)(char*, unsigned)>(lib_, "nvmlSystemGetDriverVersion");
  utilization_ = symbol<Status (*)(Device, UtilizationRates*)>(lib_, "nvmlDeviceGetUtilizationRates");
  temperature_ = symbol<Status (*)(Device, int, unsigned*)>(lib_, "nvmlDeviceGetTemperature");
  nvlink_state_ = symbol<Status (*)(Device, unsigned, int*)>(lib_, "nvmlDeviceGetNvLinkState");
  ok_ = init_ && shutdown_ && count_ && by_pci_ && (memory_v1_ || memory_v2_) && init_() == 0;
}

Nvml::~Nvml() {
  if (ok_) shutdown_();
  if (lib_) dlclose(lib_);
}

int Nvml::device_count() const {
  unsigned n = 0;
  return ok_ && count_(&n) == 0 ? static_cast<int>(n) : -1;
}

std::string Nvml::driver_version() const {
  char text[96] = {};
  return ok_ && driver_ && driver_(text, sizeof text) == 0 ? text : "";
}

bool Nvml::device(const std::string& pci_bus_id, Device& out) const {
  Device device = nullptr;
  if (!ok_ || pci_bus_id.empty() || by_pci_(pci_bus_id.c_str(), &device) != 0) return false;
  out = device;
  return true;
}

bool Nvml::memory(const std::string& pci_bus_id, Memory& out) const {
  Device device = nullptr;
  if (!this->device(pci_bus_id, device)) return false;
  // Version 2 counts the driver's own reservation apart from memory that processes use.
  if (memory_v2_) {
    MemoryV2 m{};
    m.version = static_cast<unsigned>(sizeof(MemoryV2) | (2u << 24));  // NVML_STRUCT_VERSION
    if (memory_v2_(device, &m) == 0) {
      out = {static_cast<int64_t>(m.total), static_cast<int64_t>(m.used)};
      return true;
    }
  }
  MemoryV1 m{};
  if (!memory_v1_ || memory_v1_(device, &m) != 0) return false;
  out = {static_cast<int64_t>(m.total), static_cast<int64_t>(m.used)};
  return true;
}

bool Nvml::utilization(const std::string& pci_bus_id, Utilization& out) const {
  Device device = nullptr;
  UtilizationRates rates{};
  if (!utilization_ || !this->device(pci_bus_id, device) || utilization_(device, &rates) != 0) return false;
  out = {static_cast<int>(rates.gpu), static_cast<int>(rates.memory)};
  return true;
}

bool Nvml::temperature(const std::string& pci_bus_id, int& celsius) const {
  Device device = nullptr;
  unsigned value = 0;
  if (!temperature_ || !this->device(pci_bus_id, device) || temperature_(device, kTemperatureGpu, &value) != 0)
    return false;
  celsius = static_cast<int>(value);
  return true;
}

bool Nvml::nvlinks_active(const std::string& pci_bus_id, int& links) const {
  // NVML_NVLINK_MAX_LINKS is 18 in current drivers; links past a GPU's own count answer an error.
  constexpr unsigned kMaxLinks = 18;
  Device device = nullptr;
  if (!nvlink_state_ || !this->device(pci_bus_id, device)) return false;
  int up = 0;
  bool any = false;
  for (unsigned link = 0; link < kMaxLinks; ++link) {
    int active = 0;
    if (nvlink_state_(device, link, &active) != 0) continue;
    any = true;
    up += active == 1 ? 1 : 0;
  }
  if (!any) return false;
  links = up;
  return true;
}

GpuSample read_gpu_sample(const Nvml& nvml, const std::string& pci_bus_id) {
  GpuSample s;
  Nvml::Memory memory;
  if (!nvml.memory(pci_bus_id, memory)) return s;
  s.valid = true;
  s.memory_used_mb = static_cast<double>(memory.used) / kMiB;
  s.memory_total_mb = static_cast<double>(memory.total) / kMiB;
  constexpr double unknown = std::numeric_limits<double>::quiet_NaN();
  Nvml::Utilization utilization;
  s.util_percent = nvml.utilization(pci_bus_id, utilization) ? utilization.gpu : unknown;
  int celsius = 0;
  s.temperature_c = nvml.temperature(pci_bus_id, celsius) ? celsius : unknown;
  return s;
}

GpuMonitor::GpuMonitor(const std::string& pci_bus_id, double interval_s) : interval_(checked_interval(interval_s)) {
  if (pci_bus_id.empty()) return;
  nvml_ = std::make_unique<Nvml>();
  if (!nvml_->ok()) return;
  const Nvml* nvml = nvml_.get();
  start([nvml, pci_bus_id] { return read_gpu_sample(*nvml, pci_bus_id); });
}

GpuMonitor::GpuMonitor(std::function<GpuSample()> read, double interval_s) : interval_(checked_interval(interval_s)) {
  if (read) start(std::move(read));
}

void GpuMonitor::start(std::function<GpuSample()> read) {
  read_ = std::move(read);
  latest_ = read_now();
  thread_ = std::thread([this] { run(); });
}

GpuMonitor::~GpuMonitor() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

GpuSample GpuMonitor::latest() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return latest_;
}

// A failed reading is an invalid sample, never the end of the training process.
GpuSample GpuMonitor::read_now() const noexcept {
  try {
    return read_();
  } catch (...) {
    return {};
  }
}

void GpuMonitor::run() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!wake_.wait_for(lock, interval_, [this] { return stop_; })) {
    // The driver call runs unlocked: latest() never waits on it.
    lock.unlock();
    const GpuSample sample = read_now();
    lock.lock();
    latest_ = sample;
  }
}

}  // namespace mgt
