#pragma once
// Where one rank trains, for the length of a run, and its compiled step (compiled_step.hpp): on the
// CPU backend in place on the host store, or on this rank's GPU, bound from its node-local rank,
// with its own copies in device memory, NCCL between the ranks and the GPU library sampling the
// GPU (NVML).
#include <memory>
#include <optional>
#include <string>

#include "device/compiled_step.hpp"
#include "device/gpu_runtime.hpp"
#include "mgtrain/config.hpp"

namespace mgt {

enum class DeviceKind { cpu, gpu };
const char* device_kind_name(DeviceKind kind);

class TrainingDevice {
 public:
  // Collective over `comm`: resolves train.device the same way on every rank (auto: gpu only when
  // every rank sees a GPU). Throws ConfigError naming the rank when a rank cannot have what was
  // asked for. No GPU is opened yet: open() does.
  TrainingDevice(Communicator& comm, const Config& config);
  // Collective over `comm` when the kind is gpu: binds this rank's GPU from its place among the
  // training ranks of its node (a serving rank, trains = false, gets none and trains nothing: the
  // CPU path from here on) and opens it. Throws ConfigError when a node has more training ranks
  // than GPUs and gpu.allow_shared is false.
  void open(Communicator& comm, bool trains);
  ~TrainingDevice();

  DeviceKind kind() const { return kind_; }
  // The step works on its own copies of the parameters in the backend's memory (a GPU; on the CPU
  // only under the test hook MGTRAIN_TEST_STEP_IN_DEVICE_MEMORY), not in place on the host store.
  bool own_memory() const { return own_memory_; }
  // "GPU 0 (NVIDIA H200, 00000000:1A:00.0)", "cpu"; and a warning to print (after open), or "".
  std::string describe() const;
  const std::string& warning() const { return warning_; }

  // Gives the GPU up before anything was compiled (train.device = auto, a job the GPU path cannot
  // run; a serving rank): the CPU backend, in place, from here on.
  void fall_back_to_cpu();
  // Collective: the communicator of the compiled step: NCCL on GPUs, or `comm` staged through
  // host memory where ranks share a GPU (which NCCL refuses); `comm` itself on the CPU backend.
  void connect(Communicator& comm);
  // False when the communicator works through the host (staged): a step using it cannot be
  // recorded as a CUDA graph.
  bool can_record() const { return !staged_; }
  Communicator& communicator() { return *device_comm_; }
  // The store the step works on: the host store itself in place, else its parameters and gradients
  // in backend memory (made on the first call).
  ParameterStore& step_store(ParameterStore& host);
  // Compiles the step. With gpu.on_oom = halve, a micro-batch that does not fit runs as passes of
  // half the rows, halving until it fits (each retry a warning on stderr); otherwise the error
  // names the micro-batch, the GPU's memory and what to change.
  // `host` is the store `model` declared into.
  CompiledStep& compile(Model& model, ParameterStore& host, Optimizer& optimizer, SyncStrategy& sync,
                        CompiledStepOptions options);
  CompiledStep* step() { return step_.get(); }

  // The latest NVML sample of this rank's GPU (valid = false without one).
  GpuSample gpu_sample() const;

  // The backend of the compiled step (GPU or CPU).
  kernels::Backend& backend();

 private:
  // The CPU backend, for the run: in place, or in memory of the step's own under the test hook.
  void use_cpu();

  DeviceKind kind_ = DeviceKind::cpu;
  bool own_memory_ = false;
  const Config& config_;
  int rank_ = 0;
  int visible_ = 0;  // GPUs this process can use (gpu kind)
  std::string warning_;
  bool shares_gpu_ = false;  // gpu.allow_shared, and another rank of this node has the same GPU
  bool staged_ = false;      // some rank shares its GPU: collectives through host memory
  std::unique_ptr<GpuRuntime> gpu_;
  std::unique_ptr<kernels::Backend> cpu_backend_;
  std::unique_ptr<Communicator> device_comm_owned_;
  Communicator* device_comm_ = nullptr;
  std::unique_ptr<DeviceParameters> params_;
  std::unique_ptr<CompiledStep> step_;
};

}  // namespace mgt
