#pragma once
// The interface a sync-strategy plugin implements: how the ranks' gradients become the gradient
// the optimizer applies (all-reduce, accumulation over micro-batches, a parameter server).
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "mgtrain/communicator.hpp"
#include "mgtrain/export.hpp"
#include "mgtrain/optimizer.hpp"
#include "mgtrain/parameters.hpp"

namespace mgt {

// What a serving rank (a parameter server) needs from the trainer.
struct ServeContext {
  int64_t steps_per_worker = 0;                          // the run's length, per training rank
  std::function<double(int64_t step)> learning_rate;    // the trainer's schedule
  std::string metrics_path;                              // where to append JSON-lines figures
  int64_t log_every = 50;                                // steps between records
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

  // Strategies that take some ranks out of training (a parameter server) override these.
  // False on ranks that serve: the trainer calls serve() there instead of the training loop.
  virtual bool trains() const { return true; }
  // This rank's place among the training ranks, for sharding the data.
  virtual int train_rank(const Communicator& comm) const { return comm.rank(); }
  virtual int train_world(const Communicator& comm) const { return comm.size(); }
  // Runs the serving side until every training rank is done; `optimizer` was set up for
  // serve_size() floats and updates this rank's shard.
  virtual void serve(Optimizer& optimizer, const ServeContext& context) { (void)optimizer; (void)context; }
  virtual size_t serve_size() const { return 0; }
  // True when the training ranks take every step together (the trainer may then combine their
  // figures each logging interval); false for asynchronous strategies.
  virtual bool lockstep() const { return true; }
  // True once a training rank should stop early (asynchronous runs end on the servers' count).
  virtual bool finished() const { return false; }
  // On every rank after training: brings the authoritative parameters and optimizer state to
  // rank 0's store and optimizer, for the final checkpoint. Replicated strategies do nothing.
  virtual void gather_state(Optimizer& optimizer) { (void)optimizer; }
  // After gather_state: ranks the run went on without (a parameter server configured to continue
  // when a worker is lost). Non-empty means no collective over all ranks may follow: the trainer
  // skips them, and rank 0 ends the job with MPI_Abort and status 0 instead of MPI_Finalize.
  virtual std::vector<int> lost_ranks() const { return {}; }
};

}  // namespace mgt
