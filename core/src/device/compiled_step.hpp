#pragma once
// One training step, compiled to operations on a kernels::Backend: the one step driver of every
// rank that trains. Per micro-batch of the sync strategy, forward and backward through the model
// (a SequentialModel's layers by the LayerExecutor, as everywhere), the loss, the strategy's
// reduction; then the non-finite check and the optimizer's update (Optimizer::element_update),
// with the step's figures left in backend memory for the host to collect.
//
// On the CPU backend (in place, CompiledStepOptions::in_place) the step works on the host store,
// the optimizer's own state and the reader's rows where they are, and drives the model itself, so
// any Model and any Optimizer run. On a GPU it works on its own copies in device memory
// (DeviceParameters): where the backend can record (a CUDA graph), a step is recorded once per
// input slot and replayed, so a step costs one launch on the host.
//
// Steps are pipelined: begin() copies the next batch to the device on the copy stream while the
// previous step still runs. With a pipeline depth of 1 it then waits for that step and returns its
// figures, and launch() starts the new one on an idle device. With 2 it waits only for the step
// before that, so launch() queues the new step behind the running one and the device does not
// wait for the host between steps. On the CPU launch() returns when the step is done.
//
// A sync strategy that shards the optimizer (SyncStrategy::sharding, ZeRO) runs in place only: the
// non-finite check, the norm and the update over this rank's shard, then the parameters gathered.
//
// A sync strategy that works on host memory only (a parameter server, the deterministic reduction)
// runs on a GPU rank on the host store (CompiledStepOptions::host_sync): each micro-batch's
// gradient goes down to it, and what the strategy leaves comes back up. Such a step cannot be
// recorded, and launch() returns once the strategy has run.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kernels/backend.hpp"
#include "mgtrain/communicator.hpp"
#include "mgtrain/model.hpp"
#include "mgtrain/optimizer.hpp"
#include "mgtrain/parameters.hpp"
#include "mgtrain/sync.hpp"
#include "sdk/backend_memory.hpp"

namespace mgt {

class TraceBuffer;

// The parameters, gradients and buffers in backend memory, laid out as the host store; `store`
// views them, for the sync strategy.
struct DeviceParameters {
  DeviceParameters(kernels::Backend& backend, const ParameterStore& host);
  BackendMemory memory;
  float* params;
  float* grads;
  float* buffers;  // null when the model has none
  ParameterStore store;
};

// Throws ConfigError naming the model or optimizer a step in device memory (a GPU) cannot run,
// with what to do instead; nothing is allocated. In place on the CPU every model and optimizer
// runs. Every sync strategy runs: on device memory where it reduces device memory
// (SyncStrategy::reduces_device_memory), on the host otherwise.
void check_compilable(const Model& model, const Optimizer& optimizer, const std::string& model_name,
                      const std::string& optimizer_name);

struct CompiledStepOptions {
  Shape sample_shape;   // one sample, e.g. {1, 28, 28}
  int64_t classes = 0;  // logits per label
  // Labels per row: 1 (logits [rows, classes]), or a language model's window T (logits [rows, T,
  // classes], a label per token, each token's logits a row of the loss).
  int64_t labels_per_row = 1;
  // A language model's windows: logits [rows, T, classes] for any T, one (model.context = 1) too.
  bool token_windows = false;
  int64_t pass_rows = 0;               // rows in one forward and backward pass
  int64_t passes_per_micro_batch = 1;  // > 1 after out-of-memory halving of the micro-batch
  int64_t accumulation = 1;            // the sync strategy's micro-batches per step
  // > 1: that many micro-batches (deterministic micro-shards of a model whose layers are row-wise,
  // Model::shard_batchable) go through one pass together (StepContext::shards): pass_rows is then
  // their rows together. In place only, with one pass per micro-batch.
  int64_t micro_batches_per_pass = 1;
  // The backend computes in host memory (the CPU): the step works on the store it is given (the
  // host store), the optimizer's own state buffers and the caller's rows in place, and runs the
  // Model itself; the optimizer may then lack an element update (its own step() runs instead).
  bool in_place = false;
  float grad_scale = 0.0f;  // 1 / (global batch x labels_per_row)
  // train.label_smoothing: the loss's target (1 - e) * onehot + e / classes, in [0, 1).
  float label_smoothing = 0.0f;
  // optimizer.clip_norm: the reduced gradient is scaled to this global L2 norm when above it,
  // after the non-finite check and before the update; 0: not clipped. The norm is reported either
  // way (StepFigures::grad_norm).
  float clip_norm = 0.0f;
  // In place and not clipping, the norm costs a pass over the gradient that only the steps whose
  // figures are reported need: the steps s (0-based) with (s + 1) % norm_every == 0 or s + 1 ==
  // last_step. Elsewhere (a recorded step cannot vary) every step computes it.
  int64_t norm_every = 1;
  int64_t last_step = 0;
  bool record = true;       // record each slot's step once and replay it (gpu.cuda_graphs)
  bool bf16 = false;        // GEMMs and convolutions on bfloat16 operands (gpu.precision)
  int64_t eager_steps = 2;  // steps run before recording: libraries set up lazily
  // Steps in flight at once, 1 or 2. With 2 a step's update scalars are set before the step ahead
  // of it is known to have applied its update, assuming it did: exact unless a step skips its
  // update for a non-finite gradient, so 2 is for runs that stop there (train.nonfinite = abort).
  int64_t pipeline_depth = 1;
  // Not in place: when a step's figures show a non-finite gradient, its passes run again at once,
  // on its rows still in its slot, to find where it came from (collected_nonfinite_origin). Every
  // training rank must set it alike: they all see the same reduced gradient, so they all run again
  // together, and batch statistics summed over the ranks make the collectives the step made.
  bool diagnose_nonfinite = false;
  uint64_t seed = 0;         // train.seed: dropout masks
  int64_t first_sample = 0;  // this rank's first row in the global batch: dropout masks
  double timeout_s = 300.0;  // the longest wait for a step (comm.timeout_s)
  int rank = 0;              // for messages
  // Null: the sync strategy was set up on the device's store (DeviceParameters::store). Otherwise
  // the host store it was set up on: after each micro-batch the gradients are downloaded into it
  // and end_backward runs there; a reduced gradient it returns (true) is uploaded and applied on
  // the device, and when it returns false after the last micro-batch, the parameters it left (a
  // parameter server's pull) are uploaded instead. Its parameters are current only then and after
  // download_state.
  ParameterStore* host_sync = nullptr;
  // Called about every millisecond while the host waits for a step; throws when the communication
  // between the ranks has failed (NCCL's asynchronous error). Empty: nothing to check.
  std::function<void()> check_peers;
  // Accumulates the host's seconds in the sync strategy and in the update (on a GPU: enqueueing
  // them), so the caller can tell communication not hidden by compute. Null: not timed.
  double* sync_seconds = nullptr;
  double* update_seconds = nullptr;
  // The main thread's timeline (metrics.trace): forward, backward, sync and optimizer spans of
  // each step the host runs or enqueues (a recorded step's replay is one launch). Null: none.
  TraceBuffer* trace = nullptr;
  // Batch norm's statistics over more than one pass (StepContext::batch_statistics), summed on
  // this communicator (of the training ranks, for them alone): over the micro-shards of the global
  // batch in their order when deterministic_statistics (a rank's shards are its `accumulation`
  // micro-batches), else over the ranks' passes by an all-reduce (model.sync_bn). Null: each pass
  // normalises by its own rows. The sums go through the host, so such a step is not recorded.
  Communicator* statistics_comm = nullptr;
  bool deterministic_statistics = false;
  // The step's collectives reach other ranks through NCCL, which needs every rank to record them
  // alike, and a recording that fails midway leaves them half-issued: it then ends the run
  // (gpu.cuda_graphs = false is the way on) instead of going on unrecorded on this rank alone.
  bool collectives_across_ranks = false;
};

// What one step produced, read back once it finished.
struct StepFigures {
  bool valid = false;  // false: no step was in flight
  int64_t step = 0;    // the global step index passed to launch
  double loss_sum = 0.0;
  int64_t correct = 0;
  bool nonfinite = false;  // the update was skipped on the device
  // The reduced gradient's global L2 norm before clipping; 0 when the sync strategy made the
  // update itself (a parameter server).
  double grad_norm = 0.0;
};

// Where a non-finite gradient came from on one rank (CompiledStep::diagnose_nonfinite).
struct NonFiniteOrigin {
  bool gradient = false;  // this rank's own gradient held NaN or Inf
  std::string layer;      // the first layer, in forward order, whose output did ("" when none)
  std::string parameter;  // the first parameter, in backward order, whose gradient did ("" when none)
};

class CompiledStep {
 public:
  // `store` is the store the step works on: the host store in place (the one `model` declared into),
  // or a DeviceParameters' store; the sync strategy was set up on it unless options.host_sync.
  // Allocates every buffer (OutOfMemoryError when they do not fit) and uploads nothing: call
  // upload_state.
  CompiledStep(kernels::Backend& backend, Model& model, ParameterStore& store, Optimizer& optimizer, SyncStrategy& sync,
               const CompiledStepOptions& options);
  ~CompiledStep();
  CompiledStep(const CompiledStep&) = delete;
  CompiledStep& operator=(const CompiledStep&) = delete;

  // Host store parameters and buffers and the optimizer's state buffers and step count, to the
  // backend (in place: only the step count). Before the first step and after a resume.
  void upload_state(const ParameterStore& host);
  // The backend's, to the host store and the optimizer (for a checkpoint or evaluation; in place:
  // only the step count). No step may be in flight (finish() until none is).
  void download_state(ParameterStore& host);

  // Rows per step: accumulation x passes x pass_rows.
  int64_t step_rows() const;
  // Stages a step's rows (x: step_rows() samples, y: their labels, checked to be in range; best in
  // pinned memory on a GPU); waits until fewer than pipeline_depth steps are in flight and returns
  // the figures of the one it waited for (valid = false when none). x and y may be reused once it
  // returns, except in place, where the step reads them until launch() returns.
  StepFigures begin(const float* x, const int32_t* y);
  // Starts the staged step with learning rate `lr`.
  void launch(int64_t step, double lr);
  // Waits for the oldest step in flight; its figures (valid = false when none is in flight).
  StepFigures finish();
  // In place (the CPU, where launch() returns with the step done): whether the step just launched
  // found its reduced gradient non-finite (and skipped its update).
  bool launched_nonfinite() const;
  // In place, right after such a step, while its rows are still the caller's: runs its passes
  // again on this rank alone (no sync strategy, so the gradient is this rank's), looking at every
  // layer's output and at every gradient as backward makes it final. Nothing is updated and the
  // running statistics are left as the step left them. Every training rank calls it after the same
  // step: batch statistics summed over the ranks make the same collectives as the step did.
  NonFiniteOrigin diagnose_nonfinite();
  // Not in place, with CompiledStepOptions::diagnose_nonfinite: the same for step `step` (0-based),
  // found when its figures were collected. Its passes ran again after the steps launched behind it
  // (at most one), with the parameters they left: what made the gradient non-finite usually
  // outlives one more step (a NaN in the rows, parameters gone to Inf). Empty when that step's
  // gradient was finite.
  NonFiniteOrigin collected_nonfinite_origin(int64_t step) const;
  // Destroys the recorded steps, without waiting for the device; later steps run unrecorded. A
  // failing run calls it before aborting NCCL, whose abort waits for the graphs holding its work.
  void drop_recordings();

 private:
  struct Program;
  class Network;
  class ExecutorNetwork;
  class ModelNetwork;
  // Returns false when the step makes no update of its own (the host sync strategy updated the
  // parameters).
  bool enqueue_program(int slot);
  bool sync_on_host(int64_t micro_step, bool last);
  void check_and_clip_shard(OptimizerSharding& shard, bool norm_wanted);
  void record(int slot);
  StepFigures collect(int slot);
  // Runs slot `slot`'s step's passes again on this rank alone (no sync strategy), looking at every
  // layer's output and every gradient; leaves the parameters, buffers and gradients as they were.
  NonFiniteOrigin run_again_for_origin(int slot);
  // Waits until no step runs, leaving their figures for finish() to collect.
  void wait_for_steps_in_flight(const std::function<void()>& check_peers);

  kernels::Backend& backend_;
  Optimizer& optimizer_;
  SyncStrategy& sync_;
  ParameterStore& store_;
  CompiledStepOptions options_;
  std::unique_ptr<Program> program_;
  int64_t submitted_ = 0;  // steps launched; step k ran in slot k % 2
  int64_t collected_ = 0;  // steps whose figures were collected, in launch order
  bool staged_ = false;
  int64_t slot_step_[2] = {};         // the global step index of each slot's latest launch
  int64_t applied_ = 0;               // optimizer updates counted so far (optimistically for the steps in flight)
  NonFiniteOrigin collected_origin_;  // of step collected_origin_step_ (diagnose_nonfinite, not in place)
  int64_t collected_origin_step_ = -1;
};

}  // namespace mgt
