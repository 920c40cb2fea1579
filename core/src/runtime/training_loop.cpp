#include "runtime/training_loop.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <thread>

#include "base/resident_memory.hpp"
#include "base/stop_signal.hpp"
#include "comm/mpi_communicator.hpp"
#include "runtime/agreement.hpp"
#include "runtime/callbacks.hpp"
#include "runtime/checkpointing.hpp"
#include "runtime/evaluate.hpp"
#include "runtime/serving_loop.hpp"
#include "runtime/startup.hpp"
#include "testing/fault_injection.hpp"

namespace mgt {

namespace {

// Open file descriptors of this process: a leak shows as a count that grows with the steps.
int64_t open_file_descriptors() {
  std::error_code ec;
  int64_t n = 0;
  for (std::filesystem::directory_iterator it("/proc/self/fd", ec), end; !ec && it != end; it.increment(ec)) ++n;
  return n;
}

}  // namespace

TrainingLoop::TrainingLoop(Run& run) : run_(run), nan_step_(fault::nan_step(run.comm.rank())) {
  // Rank 0's reporting callbacks, in the order they report: the slow-rank warning and the progress
  // output on the log, then the metrics file and TensorBoard.
  if (run.leader && !run.options.quiet) {
    callbacks_.push_back(make_slow_rank_warning(run.log));
    callbacks_.push_back(make_progress_observer(run.drawn_log, run.config.get_string("train.progress")));
    callbacks_.push_back(make_metrics_file(metrics_path(run.config, run.checkpoint_dir)));
    const std::string tensorboard_dir = run.config.get_string("metrics.tensorboard_dir");
    if (!tensorboard_dir.empty()) callbacks_.push_back(make_tensorboard_observer(tensorboard_dir));
  }
  // The runtime's, on every training rank: evaluation after the reporting callbacks' epoch end,
  // the stop check before the checkpoint, the non-finite policy after the metrics file's record.
#ifdef MGTRAIN_TEST_HOOKS
  // Test builds only: fault injection's slow rank (MGTRAIN_TEST_SLOW_RANK).
  if (auto slowdown = fault::make_slowdown_callback(run.comm.rank())) callbacks_.push_back(std::move(slowdown));
#endif
  if (run.trace) callbacks_.push_back(make_trace_callback(run));
  if (run.eval_every > 0) callbacks_.push_back(make_evaluation_callback(run, *this));
  callbacks_.push_back(make_stop_signal_callback(run));
  if (run.options.write_checkpoints &&
      (run.config.get_int("checkpoint.every_steps") > 0 || run.config.get_real("checkpoint.every_seconds") > 0))
    callbacks_.push_back(make_checkpoint_callback(run, *this));
  callbacks_.push_back(make_nonfinite_callback(run));
}

void TrainingLoop::report_evaluation(const EvalFigures& figures) {
  for (auto& c : callbacks_) c->on_evaluation(figures);
}

TrainResult TrainingLoop::run() {
  const int64_t start_step = run_.meta.step;
  // A resumed asynchronous worker goes on from its own step, a few ahead of or behind the run's.
  const int64_t first_step = run_.serving ? run_.serving->first_step(start_step) : start_step;
  int64_t step = first_step;
  run_.run_position = run_.meta.epoch * run_.per_epoch + run_.meta.batch_in_epoch - start_step;
  const int64_t first_position = std::max<int64_t>(0, run_.run_position + first_step);
  run_.reader->start(first_position / run_.per_epoch, first_position % run_.per_epoch);
  say_what_is_trained(step);

  interval_start_ = run_start_ = Clock::now();
  for (auto& c : callbacks_) c->on_run_start({run_.epochs, run_.per_epoch, start_step, run_.total_steps});
  bool stopped = false;
  int64_t epoch = run_.meta.epoch;  // of the last step taken
  // An asynchronous run ends when the servers have applied all its pushes: a fast rank may take
  // over a slow one's share, up to every step of the run.
  const int64_t step_limit =
      run_.lockstep() ? run_.total_steps : start_step + (run_.total_steps - start_step) * run_.train_comm->size();
  while (step < step_limit && !(run_.serving && run_.serving->finished())) {
    const auto step_start = Clock::now();
    for (auto& c : callbacks_) c->on_step_begin(step);
    TraceSpan step_span(run_.traced(), "step", "step", step + 1);
    run_.comm.set_step(step + 1);
    run_.train_comm->set_step(step + 1);
    TraceSpan wait_span(run_.traced(), "data wait");
    data::Batch batch = run_.reader->next();
    wait_span.end();
    epoch = batch.epoch;
    interval_.wait += batch.wait_seconds;
    run_.phases.data_wait += batch.wait_seconds;
    const double sync_before = run_.phases.sync;
    run_step(batch, step);
    step_span.end();
    interval_.busy += seconds_since(step_start) - (run_.phases.sync - sync_before);
    ++interval_.steps;
    ++step;
    if (step - start_step == run_.options.timing_warmup_steps) {
      run_start_ = Clock::now();
      run_.phases = StepPhases{};
    }
    interval_.samples += run_.global_batch;
    run_.meta.step = step;
    run_.meta.epoch = batch.epoch + (batch.batch_in_epoch + 1 == run_.per_epoch ? 1 : 0);
    run_.meta.batch_in_epoch = (batch.batch_in_epoch + 1) % run_.per_epoch;
    if (step % run_.log_every == 0 || step == run_.total_steps) {
      TraceSpan metrics_span(run_.traced(), "metrics", "step", step);
      finish_steps();
      log_interval(step, epoch);
    }
    for (auto& c : callbacks_) c->on_step_end(step, epoch);
    if (run_.meta.batch_in_epoch == 0)
      for (auto& c : callbacks_) c->on_epoch_end(step, epoch);
    bool stop = false;
    for (auto& c : callbacks_) stop = c->should_stop(step) || stop;
    if (stop) {
      stopped = true;
      break;
    }
    for (auto& c : callbacks_) c->before_next_step(step);
  }
  // No more steps: a stop signal from now on waits for the final checkpoint.
  stop_taken();
  // The device's parameters and optimizer state, for the final checkpoint and the test set.
  download_step_state();
  for (auto& c : callbacks_) c->on_run_end({step, epoch, stopped});
  run_.result.stopped = stopped;
  return finish(start_step, step);
}

// Rank 0 says how many steps the run takes, or that there is nothing left to train.
void TrainingLoop::say_what_is_trained(int64_t step) const {
  if (!run_.leader) return;
  if (step >= run_.total_steps)
    run_.log << "nothing to train: " << run_.resumed_from << " is at step " << step << ", and the run ends at step "
             << run_.total_steps << " (train.epochs x " << run_.per_epoch << " steps/epoch, or train.max_steps)\n"
             << std::flush;
  else
    run_.log << "training " << run_.total_steps - step << " steps: " << run_.per_epoch << " steps/epoch, global batch "
             << run_.global_batch << " (" << run_.train_comm->size() << " training ranks x " << run_.micro_batch
             << " x " << run_.accum << " micro-batches"
             << (run_.shards_per_pass > 1
                     ? ", deterministic micro-shards " + std::to_string(run_.shards_per_pass) + " to a pass"
                     : std::string())
             << ")\n"
             << std::flush;
}

// The step: stage this step's rows, take the previous step's figures (on a GPU while the copy
// runs), then launch it (on the CPU: run it).
void TrainingLoop::run_step(data::Batch& batch, int64_t step) {
  MGT_CHECK(batch.rows == run_.compiled_step->step_rows(), Error,
            "the step takes full batches: batch of " + std::to_string(batch.rows) + " rows, expected " +
                std::to_string(run_.compiled_step->step_rows()));
  // Test-only fault: a NaN in this rank's first sample, which reaches every rank's gradient.
  if (step + 1 == nan_step_) batch.x.data()[0] = std::numeric_limits<float>::quiet_NaN();
  const auto t = Clock::now();
  const double host_phases_before = run_.phases.sync + run_.phases.optimizer;
  absorb(run_.compiled_step->begin(batch.x.data(), batch.y));
  interval_.learning_rate = scheduled_rate(step);
  run_.compiled_step->launch(step, interval_.learning_rate);
  // On the CPU the step is done and its rows still here: where a non-finite gradient came from.
  if (run_.compiled_step->launched_nonfinite() && run_.lockstep()) diagnose_nonfinite(step);
  // The rest of the step is compute: forward, loss and backward (on a GPU: staging and enqueueing).
  run_.phases.compute += seconds_since(t) - (run_.phases.sync + run_.phases.optimizer - host_phases_before);
}

// The schedule's rate for `step`. Lock-step ranks all ask the same schedule for the same step, so
// a rate it must not give stops every one of them here: they end cleanly, rank 0 says why. An
// asynchronous run's ranks are at different steps: the job ends from the rank that found it.
double TrainingLoop::scheduled_rate(int64_t step) const {
  try {
    return run_.schedule->at(step);
  } catch (const Error& e) {
    if (run_.lockstep()) throw StartupError(e.what(), run_.leader);
    throw;
  }
}

// Waits for every step in flight, taking its figures.
void TrainingLoop::finish_steps() {
  for (StepFigures f = run_.compiled_step->finish(); f.valid; f = run_.compiled_step->finish()) absorb(f);
}

// The step's parameters and optimizer state into the host store (on a GPU), once every step is
// done.
void TrainingLoop::download_step_state() {
  finish_steps();
  run_.compiled_step->download_state(run_.store);
}

// Every training rank looks at the step it just ran again, alone, and rank 0 learns from each
// whose own gradient held NaN or Inf the first layer whose output did and the first parameter
// (in backward order) whose gradient did. A fixed-size record a rank: names are cut at 255 bytes.
void TrainingLoop::diagnose_nonfinite(int64_t step) {
  const NonFiniteOrigin origin = run_.device->own_memory() ? run_.compiled_step->collected_nonfinite_origin(step)
                                                           : run_.compiled_step->diagnose_nonfinite();
  struct Record {
    char gradient;
    char layer[256];
    char parameter[256];
  } mine{};
  mine.gradient = origin.gradient ? 1 : 0;
  std::snprintf(mine.layer, sizeof mine.layer, "%s", origin.layer.c_str());
  std::snprintf(mine.parameter, sizeof mine.parameter, "%s", origin.parameter.c_str());
  std::vector<Record> all(static_cast<size_t>(run_.train_comm->size()));
  run_.train_comm->allgather(&mine, all.data(), sizeof(Record));
  nonfinite_ = NonFiniteFigures{};
  nonfinite_.step = step + 1;
  nonfinite_.diagnosed = true;
  for (size_t r = 0; r < all.size(); ++r)
    if (all[r].gradient) nonfinite_.ranks.push_back({static_cast<int>(r), all[r].layer, all[r].parameter});
}

// A finished step's figures into the interval; a non-finite gradient goes to the callbacks, whose
// last (make_nonfinite_callback) ends the run or counts it as skipped (the step already skipped
// its update), after the metrics file recorded it.
void TrainingLoop::absorb(const StepFigures& f) {
  if (!f.valid) return;
  interval_.loss += f.loss_sum;
  interval_.correct += static_cast<double>(f.correct);
  interval_.grad_norm = f.grad_norm;  // figures come in launch order: the last step's stays
  if (!f.nonfinite) return;
  const int64_t step = f.step + 1;
  // A GPU's step found where it came from as its figures came back: every rank says so now.
  if (run_.device->own_memory() && run_.lockstep() && nonfinite_.step != step) diagnose_nonfinite(f.step);
  if (nonfinite_.step != step) nonfinite_ = NonFiniteFigures{step};
  nonfinite_.skipped = run_.skip_nonfinite;
  for (auto& c : callbacks_) c->on_nonfinite(nonfinite_);
}

// The interval's figures, for the callbacks. Lock-step strategies average over the training
// ranks; asynchronous ones report rank 0's own figures, since the ranks are not at the same step.
void TrainingLoop::log_interval(int64_t step, int64_t epoch) {
  double sums[3] = {interval_.loss, interval_.wait, interval_.correct};
  const int ranks = run_.train_comm->size();
  const int reporting = run_.lockstep() ? ranks : 1;
  IntervalFigures f;
  f.step = step;
  f.epoch = epoch;
  // Each training rank's own step time, to point at a slow one.
  f.rank_step_ms.assign(static_cast<size_t>(reporting), 0.0);
  const double mine = 1e3 * interval_.busy / static_cast<double>(std::max<int64_t>(interval_.steps, 1));
  // The largest rank's memory and descriptors now: a slow leak shows as a trend over the run.
  int64_t resources[2] = {current_rss_kib(), open_file_descriptors()};
  // Each rank's GPU as NVML saw it last (GPU path only).
  const bool gpu = run_.device->kind() == DeviceKind::gpu;
  const GpuSample my_gpu = gpu ? run_.device->gpu_sample() : GpuSample{};
  if (gpu) f.gpu.assign(static_cast<size_t>(reporting), GpuSample{});
  if (run_.lockstep()) {
    run_.train_comm->allreduce_sum(sums, 3);
    run_.train_comm->allgather(&mine, f.rank_step_ms.data(), sizeof(double));
    run_.train_comm->allreduce_max(resources, 2);
    if (gpu) run_.train_comm->allgather(&my_gpu, f.gpu.data(), sizeof(GpuSample));
  } else {
    f.rank_step_ms[0] = mine;
    if (gpu) f.gpu[0] = my_gpu;
  }
  const double elapsed = std::max(seconds_since(interval_start_), 1e-9);
  // Loss and accuracy per label: per token for a language model.
  const double seen = static_cast<double>(interval_.samples * run_.labels_counted) * reporting / ranks;
  f.loss = sums[0] / seen;
  f.accuracy = sums[2] / seen;
  f.data_wait_share = sums[1] / reporting / elapsed;
  f.samples_per_s = static_cast<double>(interval_.samples) / elapsed;
  f.tokens_per_s = run_.token_windows ? f.samples_per_s * static_cast<double>(run_.labels_per_sample) : 0.0;
  f.learning_rate = interval_.learning_rate;
  f.grad_norm = interval_.grad_norm;  // rank 0's: every lock-step rank holds the same gradient
  f.time_s = seconds_since(run_start_);
  f.rss_mb = static_cast<double>(resources[0]) / 1024.0;
  f.open_fds = resources[1];
  run_.result.final_loss = f.loss;
  for (auto& c : callbacks_) c->on_interval(f);
  interval_ = Interval{};
  interval_start_ = Clock::now();
}

// The final checkpoint (after the sync strategy brought the authoritative state to rank 0)
// and the run's figures over the training ranks.
TrainResult TrainingLoop::finish(int64_t start_step, int64_t step) {
  const double run_seconds = seconds_since(run_start_);
  if (run_.serving) {
    run_.serving->gather_state(*run_.optimizer);
    run_.result.lost_ranks = run_.serving->lost_ranks();
    // Where the servers stand, whoever took the steps: the run's end, or where it stopped.
    if (run_.leader) run_.meta = served_meta(run_, run_.serving->position());
  }
  const bool all_ranks_here = run_.result.lost_ranks.empty();
  if (run_.leader && !all_ranks_here)
    run_.log << "warning: the run went on without rank(s) " << rank_list(run_.result.lost_ranks)
             << " (sync.on_lost_worker = continue); figures below are rank 0's own\n"
             << std::flush;
  if (run_.trace) run_.trace->resume_recording();
  if (run_.lockstep() && run_.options.write_checkpoints && step > start_step) run_.meta.sync = gather_sync_state(run_);
  TraceSpan checkpoint_span(
      run_.leader && run_.options.write_checkpoints && step > start_step ? run_.traced() : nullptr, "checkpoint",
      "step", step);
  const auto whole_state =
      run_.options.write_checkpoints && step > start_step ? gather_sharded_optimizer_state(run_) : nullptr;
  if (run_.leader && run_.options.write_checkpoints && step > start_step)
    run_.result.checkpoint =
        write_run_checkpoint(run_, run_.meta, whole_state ? whole_state.get() : run_.optimizer.get());
  checkpoint_span.end();
  if (step <= start_step) {
    // Nothing trained: the newest checkpoint is still the one resumed from, and no loss was seen.
    if (run_.result.checkpoint.empty()) run_.result.checkpoint = run_.resumed_from;
    run_.result.final_loss = std::numeric_limits<double>::quiet_NaN();
  }
  // The final model on the test set, by rank 0 (the parameters are the same everywhere now), in
  // batches of the training micro-batch so the model's activations are reused, not grown.
  const std::string test_path = run_.config.get_string("data.test");
  // Not after a stop signal: the launcher kills the ranks soon after it (mpirun a second after
  // passing on its SIGTERM), and the run is not done; the checkpoint is written, the line said.
  if (run_.leader && !test_path.empty() && !run_.options.quiet && step > start_step && !run_.result.stopped) {
    TraceSpan span(run_.traced(), "evaluation");
    const EvalResult test = evaluate_model(*run_.model, test_path, run_.config.get_string("data.x_name"),
                                           run_.config.get_string("data.y_name"), run_.micro_batch, nullptr,
                                           eval_masking(run_.config, *run_.model));
    run_.result.test_accuracy = test.accuracy;
    run_.result.test_loss = test.loss;
    run_.log << test_line(test, test_path) << std::flush;
  }
  if (all_ranks_here) run_.comm.barrier();
  if (run_.trace) run_.trace->write(run_.comm, all_ranks_here, run_.log);
  run_.result.train_seconds = run_seconds;
  run_.result.steps = step;
  run_.result.steps_run = step - start_step;
  const int64_t timed_steps = std::max<int64_t>(run_.result.steps_run - run_.options.timing_warmup_steps, 0);
  // Samples over all training ranks: asynchronous strategies take different numbers of steps.
  double totals[5] = {run_.phases.data_wait, run_.phases.compute, run_.phases.sync, run_.phases.optimizer,
                      static_cast<double>(timed_steps * run_.reader->local_batch())};
  if (all_ranks_here) run_.train_comm->allreduce_sum(totals, 5);
  run_.result.samples = static_cast<int64_t>(totals[4]);
  run_.result.samples_per_s = static_cast<double>(run_.result.samples) / std::max(run_.result.train_seconds, 1e-9);
  if (run_.token_windows)
    run_.result.tokens_per_s = run_.result.samples_per_s * static_cast<double>(run_.labels_per_sample);
  // Mean seconds per step of each phase, averaged over ranks.
  const int ranks_summed = all_ranks_here ? run_.train_comm->size() : 1;
  const double per_step = 1.0 / static_cast<double>(std::max<int64_t>(timed_steps, 1) * ranks_summed);
  run_.result.phases = {totals[0] * per_step, totals[1] * per_step, totals[2] * per_step, totals[3] * per_step};
  // Peak resident memory of the largest rank.
  int64_t peak_kib = peak_rss_kib();
  if (all_ranks_here) run_.train_comm->allreduce_max(&peak_kib, 1);
  run_.result.peak_rss_mb = static_cast<double>(peak_kib) / 1024.0;
  return run_.result;
}

}  // namespace mgt
