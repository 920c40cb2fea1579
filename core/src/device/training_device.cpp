#include "device/training_device.hpp"

#include <dlfcn.h>

#include <cstdio>
#include <exception>
#include <vector>

#include "base/host_name.hpp"
#include "comm/staged_communicator.hpp"
#include "device/gpu_binding.hpp"
#include "io/console.hpp"
#include "mgtrain/error.hpp"
#include "testing/fault_injection.hpp"

namespace mgt {

namespace {

// GPUs CUDA would give this process, asked of the driver (libcuda) rather than of the GPU library:
// loading that library maps cuBLAS, cuDNN and NCCL, which a CPU-only run should not pay for.
int driver_visible_gpus(std::string* why) {
  void* driver = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
  if (!driver) {
    *why = "no NVIDIA driver (libcuda.so.1 not found)";
    return 0;
  }
  using InitFn = int(unsigned);
  using CountFn = int(int*);
  auto* init = reinterpret_cast<InitFn*>(dlsym(driver, "cuInit"));
  auto* count = reinterpret_cast<CountFn*>(dlsym(driver, "cuDeviceGetCount"));
  int n = 0;
  int status = -1;
  if (init && count && (status = init(0)) == 0) status = count(&n);
  // The driver stays loaded: the GPU library will need it, and unloading it is not supported.
  if (status != 0) {
    *why = "the NVIDIA driver found no usable device (cuInit/cuDeviceGetCount status " + std::to_string(status) + ")";
    return 0;
  }
  if (n == 0) *why = "the NVIDIA driver reports no device (check CUDA_VISIBLE_DEVICES)";
  return n;
}

}  // namespace

const char* device_kind_name(DeviceKind kind) {
  switch (kind) {
    case DeviceKind::cpu:
      return "cpu";
    case DeviceKind::gpu:
      return "gpu";
  }
  return "?";
}

TrainingDevice::TrainingDevice(Communicator& comm, const Config& config) : config_(config), rank_(comm.rank()) {
  const std::string asked = config.get_string("train.device");
  if (asked == "cpu" || asked == "emulated_gpu") {
    use_cpu();
    if (asked == "emulated_gpu") own_memory_ = true;
    return;
  }
  std::string why;
  int visible = driver_visible_gpus(&why);
  if (visible > 0) {
    std::string library_why;
    visible = visible_gpus(&library_why);
    if (visible == 0) why = library_why;
  }
  // The same decision on every rank: a GPU for each, or the CPU for all.
  int64_t without = visible == 0 ? 1 : 0;
  comm.allreduce_max(&without, 1);
  if (without != 0) {
    // With train.device = gpu the ranks without one fail, and the start-up agreement ends all.
    MGT_CHECK(asked != "gpu" || visible > 0, ConfigError,
              "train.device = gpu, but rank " + std::to_string(rank_) + " (host " + host_name() +
                  ") has no usable GPU: " + why + "; set train.device = cpu to train on the CPU");
    use_cpu();  // auto: the CPU on every rank
    return;
  }
  kind_ = DeviceKind::gpu;
  own_memory_ = true;
  visible_ = visible;
}

void TrainingDevice::open(Communicator& comm, bool trains) {
  if (kind_ == DeviceKind::gpu) {
    // A rank's GPU follows its place among the training ranks of its node, since serving ranks
    // need none.
    const NodePlace place = gather_training_place(comm, trains);
    if (trains) {
      const GpuChoice choice = choose_gpu(rank_, place.index, place.count, comm.node(), host_name(), visible_,
                                          config_.get_bool("gpu.allow_shared"), place.serving);
      warning_ = choice.warning;
      shares_gpu_ = !choice.warning.empty();
      gpu_ = open_gpu_runtime(choice.device);
      const GpuDeviceInfo& info = gpu_->device();
      if (info.used_by_others_mb >= 0) {
        const std::string busy = busy_gpu_line(info.index, info.name, info.pci_bus_id, info.used_by_others_mb,
                                               info.total_mb, /*threshold_mb=*/1024.0);
        if (!busy.empty()) warning_ += (warning_.empty() ? "" : "; ") + busy;
      }
      gpu_->start_sampling(config_.get_real("metrics.gpu_sample_s"));
      return;
    }
  }
  // A serving rank runs the optimizer on its shard on the CPU.
  if (!trains) fall_back_to_cpu();
}

TrainingDevice::~TrainingDevice() {
  // A failing run (a peer gone, NCCL waiting for it) aborts the communicator first: freeing device
  // memory waits for the device, which would wait forever on the stuck collective, and the error
  // is printed only after this. NCCL's abort in turn waits until no CUDA graph holds its work, so
  // the recorded steps go before it.
  if (step_) step_->drop_recordings();
  if (std::uncaught_exceptions() > 0) device_comm_owned_.reset();
  // The step and the parameters hold backend memory; the communicator may be in use by them.
  step_.reset();
  params_.reset();
  device_comm_owned_.reset();
}

void TrainingDevice::fall_back_to_cpu() {
  step_.reset();
  params_.reset();
  device_comm_owned_.reset();
  device_comm_ = nullptr;
  gpu_.reset();
  if (!cpu_backend_) cpu_backend_ = kernels::make_cpu_backend();
  kind_ = DeviceKind::cpu;
  own_memory_ = false;
}

void TrainingDevice::use_cpu() {
  fall_back_to_cpu();
  own_memory_ = fault::step_in_device_memory();
}

std::string TrainingDevice::describe() const {
  if (kind_ == DeviceKind::gpu) {
    const GpuDeviceInfo& info = gpu_->device();
    char text[256];
    std::snprintf(text, sizeof text, "GPU %d (%s, %s, %.0f MB)", info.index, info.name.c_str(), info.pci_bus_id.c_str(),
                  info.total_mb);
    return text;
  }
  return own_memory_ ? "the CPU backend, in memory of the step's own: the GPU path's program, as train.device = "
                       "emulated_gpu runs it"
                     : "cpu";
}

kernels::Backend& TrainingDevice::backend() { return gpu_ ? gpu_->backend() : *cpu_backend_; }

void TrainingDevice::connect(Communicator& comm) {
  if (kind_ == DeviceKind::gpu) {
    // NCCL cannot have two ranks of one communicator on one GPU: where gpu.allow_shared lets
    // ranks share one, every rank reduces through host memory instead.
    int64_t shared = shares_gpu_ ? 1 : 0;
    comm.allreduce_max(&shared, 1);
    if (comm.size() == 1 || shared != 0) {
      // One rank reduces with nobody, so NCCL's set-up would buy nothing: the staged
      // communicator's collectives at one rank leave the data on the device, and steps may still
      // be recorded. Between ranks it goes through host memory, which a recording cannot hold.
      device_comm_owned_ = make_staged_communicator(comm, backend());
      staged_ = comm.size() > 1;
    } else {
      device_comm_owned_ = gpu_->make_communicator(comm);
    }
    device_comm_owned_->set_timeout_seconds(comm.timeout_seconds());
    device_comm_ = device_comm_owned_.get();
  } else {
    device_comm_ = &comm;
  }
}

ParameterStore& TrainingDevice::step_store(ParameterStore& host) {
  if (!own_memory_) return host;
  if (!params_) params_ = std::make_unique<DeviceParameters>(backend(), host);
  return params_->store;
}

CompiledStep& TrainingDevice::compile(Model& model, ParameterStore& host, Optimizer& optimizer, SyncStrategy& sync,
                                      CompiledStepOptions options) {
  options.in_place = !own_memory_;
  // NCCL's asynchronous error, watched while the host waits for each step: a lost peer or network
  // ends the run at once with NCCL's reason, not after comm.timeout_s.
  if (gpu_ && device_comm_owned_)
    options.check_peers = [runtime = gpu_.get(), comm = device_comm_owned_.get()] { runtime->raise_if_failed(*comm); };
  options.collectives_across_ranks = gpu_ && device_comm_owned_ && !staged_ && device_comm_owned_->size() > 1;
  const bool halve = config_.get_string("gpu.on_oom") == "halve";
  const int64_t micro_batch = options.pass_rows * options.passes_per_micro_batch;
  for (;;) {
    try {
      step_ = std::make_unique<CompiledStep>(backend(), model, step_store(host), optimizer, sync, options);
      return *step_;
    } catch (const OutOfMemoryError& e) {
      step_.reset();
      if (halve && options.pass_rows % 2 == 0) {
        options.pass_rows /= 2;
        options.passes_per_micro_batch *= 2;
        char line[320];
        std::snprintf(line, sizeof line,
                      "mgtrain: warning: [rank %d] the micro-batch of %lld rows does not fit in %s; running it "
                      "as %lld passes of %lld rows (gpu.on_oom = halve)\n",
                      rank_, static_cast<long long>(micro_batch), describe().c_str(),
                      static_cast<long long>(options.passes_per_micro_batch),
                      static_cast<long long>(options.pass_rows));
        console::warning(line);
        continue;
      }
      const bool at_start = options.passes_per_micro_batch == 1;
      std::string where = describe();
      if (gpu_) {
        char memory[96];
        std::snprintf(memory, sizeof memory, ", %.0f MB total, %.0f MB free at start", gpu_->device().total_mb,
                      gpu_->device().free_mb);
        where += memory;
      }
      throw OutOfMemoryError(
          "out of device memory on rank " + std::to_string(rank_) + ": the micro-batch of " +
          std::to_string(micro_batch) + " rows" +
          (at_start ? std::string() : " (as passes of " + std::to_string(options.pass_rows) + " rows)") +
          " does not fit in " + where + " (" + e.what() + "). Keep the global batch with a smaller micro-batch: " +
          (halve ? std::string("halving cannot go on (odd rows); ") : std::string("gpu.on_oom = halve, or ")) +
          "sync.name = grad_accum with sync.accum_steps = 2 or more, or more ranks; or lower train.global_batch");
    }
  }
}

GpuSample TrainingDevice::gpu_sample() const { return gpu_ ? gpu_->gpu_sample() : GpuSample{}; }

}  // namespace mgt
