#pragma once
// The interface a sync-strategy plugin implements: how the ranks' gradients become the gradient
// the optimizer applies (all-reduce, accumulation over micro-batches, a parameter server).
#include <cstdint>
#include <string>
#include <vector>

#include "mgtrain/communicator.hpp"
#include "mgtrain/export.hpp"
#include "mgtrain/optimizer.hpp"
#include "mgtrain/parameters.hpp"
#include "mgtrain/serving.hpp"
#include "mgtrain/sharding.hpp"

namespace mgt {

// One array of a strategy's own state (an error-feedback residual, a momentum buffer), one rank's.
struct SyncStateArray {
  std::string name;  // letters, digits, '_' and '-'
  std::vector<float> values;
};

class MGT_API SyncStrategy {
 public:
  virtual ~SyncStrategy() = default;
  // Called once after the parameter store is finalized, before step 1.
  virtual void setup(Communicator& comm, ParameterStore& store) = 0;
  // Micro-batches per optimizer step; the global batch is world * micro-batch * this.
  virtual int64_t accumulation_steps() const { return 1; }
  // Before forward of micro-batch `micro_step` (0-based within the step).
  virtual void begin_micro_batch(int64_t micro_step) { (void)micro_step; }
  // During backward: these gradients are final for this micro-batch.
  virtual void gradients_ready(const std::vector<ParamHandle>& handles) { (void)handles; }
  // After backward of micro-batch `micro_step` (0-based within the step). Returns true when the
  // gradient buffer holds the sum over all ranks and micro-batches and the optimizer should step.
  virtual bool end_backward(int64_t micro_step) = 0;
  // True when the micro-batches are the micro-shards of a deterministic reduction, whose gradients
  // reach it through the store's WeightGradientSink: with a shard_batchable model the trainer
  // then runs them through forward and backward together, and calls end_backward for each in turn.
  virtual bool micro_batches_are_shards() const { return false; }
  // True when setup() may be given a communicator and a store over device memory (the GPU path:
  // NCCL, parameters and gradients on the GPU). The strategy must then touch the store's buffers
  // only through the communicator's collectives, and make the same calls every step: the GPU
  // path records one step's operations (a CUDA graph) and replays them. Otherwise the GPU path runs
  // the strategy as the CPU path does, on the host store over MPI, and hands it each micro-batch's
  // gradients (a copy each way, no CUDA graph). Called before setup: the answer may depend on the
  // config only.
  virtual bool reduces_device_memory() const { return false; }

  // State of the strategy's own that a resumed run needs to go on as if never stopped: called on
  // every training rank at each checkpoint, between steps, on the host. Checkpoints keep each
  // rank's arrays as /sync/<name>.rank<R> (float32, with checksums), so `mgtrain verify` and a
  // resume see them. Empty (the default): the strategy keeps none. Lock-step strategies only.
  virtual std::vector<SyncStateArray> checkpoint_state() { return {}; }
  // On resume, on every training rank after setup and before step 1, when the checkpoint was
  // written by a strategy of the same name: this rank's arrays as checkpoint_state() gave them
  // (none for a rank the checkpoint's run did not have), and that run's number of ranks. At
  // another number of ranks the strategy decides what its state still means.
  virtual void restore_state(const std::vector<SyncStateArray>& saved, int saved_ranks) {
    (void)saved;
    (void)saved_ranks;
  }

  // The serving role of a strategy that takes some ranks out of training (a parameter server),
  // or null: every rank trains, in lock step. The strategy owns it.
  virtual ServingRole* serving() { return nullptr; }
  // The optimizer sharding of a strategy that updates only a shard of the parameters on each rank
  // (ZeRO), or null: every rank updates the whole buffer. The strategy owns it.
  virtual OptimizerSharding* sharding() { return nullptr; }
};

}  // namespace mgt
