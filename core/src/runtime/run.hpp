#pragma once
// One rank's run as start-up builds it: the plugins, the parameters, the device and its compiled
// step, the data reader and the run's position. Start-up (startup.cpp) fills it, resume
// (resume.cpp) moves it to a checkpoint's position, and then one of the two loops runs it: the
// lock-step training loop (training_loop.cpp) or a parameter server's serving loop
// (serving_loop.cpp). Callbacks read it; what only a loop needs stays in the loop.
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "checkpoint/checkpoint.hpp"
#include "datasets/batch_reader.hpp"
#include "device/compiled_step.hpp"
#include "device/training_device.hpp"
#include "io/printable_stream.hpp"
#include "loader/plugin_loader.hpp"
#include "mgtrain/communicator.hpp"
#include "mgtrain/config.hpp"
#include "mgtrain/model.hpp"
#include "mgtrain/optimizer.hpp"
#include "mgtrain/parameters.hpp"
#include "mgtrain/serving.hpp"
#include "mgtrain/sync.hpp"
#include "observers/trace.hpp"
#include "runtime/checkpointing.hpp"
#include "runtime/lr_schedule.hpp"
#include "runtime/trainer.hpp"

namespace mgt {

using Clock = std::chrono::steady_clock;
inline double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

struct Run {
  Run(Communicator& comm, TrainOptions options, std::ostream& log);
  // The communicator outlives the run (mgtrain bench runs several on it).
  ~Run() { comm.set_allreduce_observer(nullptr); }
  Run(const Run&) = delete;
  Run& operator=(const Run&) = delete;

  // The serving role's answers, or a replicated strategy's: every rank trains, in lock step.
  bool trains() const { return !serving || serving->trains(); }
  bool lockstep() const { return !serving || serving->lockstep(); }
  int train_rank() const { return serving ? serving->train_rank(comm) : comm.rank(); }
  int train_world() const { return serving ? serving->train_world(comm) : comm.size(); }
  bool spans_nodes() const;
  // The main thread's timeline, or null: metrics.trace is off.
  TraceBuffer* traced() const { return trace ? trace->main_thread() : nullptr; }

  Communicator& comm;
  TrainOptions options;
  Config& config;  // options.config, resolved by start-up (job ids, the input shape from the data)
  std::ostream null_log{nullptr};
  PrintableStream printable_log;
  // Rank 0's output: drawn_log for the progress bar's own control bytes, log for every line,
  // which quotes config values, paths and file contents with their control bytes escaped.
  std::ostream& drawn_log;
  std::ostream& log;
  PluginRegistry registry;  // declared before what its libraries made, so it outlives them
  const bool leader;        // rank 0: writes checkpoints, logs, reports
  PluginChoice choice;
  std::vector<std::string> rank_hosts;  // every rank's host name, by rank

  uint64_t seed = 0;
  int64_t global_batch = 0, accum = 1, micro_batch = 0, per_epoch = 0;
  int64_t shards_per_pass = 1;  // micro-batches run through the model together (startup.cpp)
  int64_t epochs = 0, total_steps = 0, log_every = 1;
  int64_t labels_per_sample = 1;  // a language model's window: one label per token
  bool token_windows = false;     // a language model's data (DatasetInfo::token_windows)
  Shape micro_shape;              // input of one forward pass: micro_batch x shards_per_pass rows
  // Labels of a sample the loss counts: labels_per_sample, or a masked language model's masked
  // tokens (datasets/mlm_masks.hpp), the same number in every window.
  int64_t labels_counted = 1;

  std::string checkpoint_dir;
  std::unique_ptr<CheckpointDirLock> checkpoint_lock;  // rank 0's, while it writes checkpoints
  // Rank 0: the checkpoints checkpoint.overwrite replaces, removed by the run's first checkpoint.
  std::vector<std::string> replaced_checkpoints;
  CheckpointWriter checkpoint_writer;     // rank 0's checkpoint in flight to disk
  std::string resumed_from, resume_note;  // rank 0's resume checkpoint, position note
  SyncState resumed_sync;                 // rank 0: what the resumed checkpoint's strategy kept
  // Rank 0, resuming under a sharded optimizer: the checkpoint's whole optimizer state until it is
  // scattered (resume.cpp).
  std::unique_ptr<Optimizer> whole_state;
  // The global batch (from the first epoch's) that step 0 of this run would read: its data
  // position is this plus the step.
  int64_t run_position = 0;
  // checkpoint.every_seconds: the last checkpoint's time (rank 0's clock), and whether the step
  // boundary's agreement found the next one due.
  Clock::time_point last_checkpoint_at = Clock::now();
  bool checkpoint_due = false;
  CheckpointMeta meta;  // the run's position and what its checkpoints record

  // metrics.trace's recorder, or null. Declared before what records into it (the reader's thread).
  std::unique_ptr<Trace> trace;
  std::unique_ptr<TrainingDevice> device;
  CompiledStep* compiled_step = nullptr;  // every training rank's (device's); null on a serving rank
  std::unique_ptr<Model> model;
  std::unique_ptr<Optimizer> optimizer;
  std::unique_ptr<SyncStrategy> sync;
  ServingRole* serving = nullptr;  // sync's, or null when every rank trains
  ParameterStore store;
  std::unique_ptr<data::BatchReader> reader;
  std::optional<RunSchedule> schedule;       // train.lr_schedule's, built in or a plugin
  std::unique_ptr<Communicator> train_comm;  // the training ranks among themselves
  // Batch statistics over more than one pass (deterministic mode, model.sync_bn); null otherwise.
  std::unique_ptr<Communicator> statistics_comm;

  // Rank 0 of an asynchronous run: a snapshot's parameters, or its own while one is written.
  std::vector<float> served_params;

  bool skip_nonfinite = false;  // train.nonfinite = skip
  int64_t eval_every = 0;       // train.eval_every_epochs where there is a test file to evaluate on
  StepPhases phases;            // this rank's time per phase; the compiled step adds sync and update
  TrainResult result;
};

}  // namespace mgt
