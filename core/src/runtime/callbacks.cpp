#include "runtime/callbacks.hpp"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <ostream>
#include <string>
#include <thread>

#include "base/stop_signal.hpp"
#include "checkpoint/checkpoint.hpp"
#include "io/console.hpp"
#include "runtime/agreement.hpp"
#include "runtime/checkpointing.hpp"
#include "runtime/evaluate.hpp"
#include "runtime/run.hpp"
#include "runtime/serving_loop.hpp"
#include "runtime/training_loop.hpp"
#include "testing/fault_injection.hpp"

namespace mgt {

namespace {

class TraceCallback final : public TrainingCallback {
 public:
  explicit TraceCallback(Trace& trace) : trace_(trace) {}
  void on_run_start(const RunStart& run) override { first_step_ = run.first_step; }
  void on_step_begin(int64_t step) override { trace_.at_step(step - first_step_); }

 private:
  Trace& trace_;
  int64_t first_step_ = 0;
};

class EvaluationCallback final : public TrainingCallback {
 public:
  EvaluationCallback(Run& run, TrainingLoop& loop) : run_(run), loop_(loop) {}

  void on_epoch_end(int64_t step, int64_t epoch) override {
    if ((epoch + 1) % run_.eval_every != 0) return;
    TraceSpan span(run_.traced(), "evaluation", "epoch", epoch + 1);
    const auto start = Clock::now();
    loop_.download_step_state();
    // Batch norm's running statistics move on rank 0 only (make_batch_norm2d): every rank
    // evaluates with those.
    if (run_.store.buffers_size() > 0)
      run_.train_comm->broadcast(run_.store.buffers_data(), run_.store.buffers_size() * sizeof(float), 0);
    const std::string test_path = run_.config.get_string("data.test");
    const EvalSums mine = evaluate_share(*run_.model, test_path, run_.config.get_string("data.x_name"),
                                         run_.config.get_string("data.y_name"), run_.micro_batch, run_.train_rank(),
                                         run_.train_comm->size(), nullptr, eval_masking(run_.config, *run_.model));
    double sums[4] = {mine.loss_sum, mine.correct, mine.samples, mine.tokens};
    run_.train_comm->allreduce_sum(sums, 4);
    EvalResult test = eval_result({sums[0], sums[1], sums[2], sums[3]});
    test.masked = eval_masking(run_.config, *run_.model).enabled();
    if (run_.leader) {
      run_.log << "epoch " << epoch + 1 << ": " << test_line(test, test_path) << std::flush;
      loop_.report_evaluation({step, epoch, test.accuracy, test.loss, test.samples, test_path});
    }
    loop_.leave_out_of_interval(Clock::now() - start);
  }

 private:
  Run& run_;
  TrainingLoop& loop_;
};

class StopSignalCallback final : public TrainingCallback {
 public:
  explicit StopSignalCallback(Run& run) : run_(run) {}

  // While the loop steps, a stop it cannot wait for (a second signal, or a step that outlasts
  // train.stop_grace_s) ends the rank from the signal thread, mid-step: nothing new is written,
  // and rank 0 names the newest intact checkpoint, the one a resubmitted run resumes from.
  void on_run_start(const RunStart& start) override {
    step_in_flight_->store(start.first_step + 1);
    // By value: the signal thread may call it as the loop unwinds.
    end_now_on_a_stop_not_taken(
        [leader = run_.leader, dir = run_.checkpoint_dir, step = step_in_flight_](int signal, const std::string& why) {
          if (leader) {
            console::final_line("mgtrain: stopped by signal " + std::to_string(signal) + " during step " +
                                std::to_string(step->load()) + ", which " + why +
                                ": ending without finishing it, no new checkpoint; " + latest_state(dir) +
                                (std::filesystem::exists(std::filesystem::path(dir) / "latest")
                                     ? " (resubmit with --resume latest to continue)\n"
                                     : "\n"));
          } else {
            // mpirun ends the whole job once one rank leaves: the others leave a little after rank
            // 0, so that its line is out first.
            std::this_thread::sleep_for(std::chrono::milliseconds(500));
          }
          std::fflush(nullptr);
          std::_Exit(128 + signal);
        },
        run_.config.get_real("train.stop_grace_s"));
  }
  ~StopSignalCallback() override { stop_taken(); }

  // Lock-step ranks agree after every step, so the final checkpoint follows the step in flight
  // when the signal came: mpirun kills the ranks odls_base_sigkill_timeout (1 s) after passing on
  // its SIGTERM, and a wait of several steps did not fit in it. The same 16 bytes carry whether
  // rank 0's clock says a checkpoint is due (checkpoint.every_seconds): ranks' clocks differ, and
  // all must write it after the same step.
  bool should_stop(int64_t step) override {
    step_in_flight_->store(step + 1);  // unless this stops the run: the next one
    if (!run_.lockstep()) return stop_requested();
    // bench and verify take no stop signals: no agreement to time along with their steps.
    if (!stop_signals_accepted()) return false;
    int64_t agreed[2] = {stop_signal(),
                         run_.leader && every_seconds_ > 0 && seconds_since(run_.last_checkpoint_at) >= every_seconds_};
    run_.train_comm->allreduce_max(agreed, 2);
    agreed_signal_ = static_cast<int>(agreed[0]);
    run_.checkpoint_due = agreed[1] != 0;
    return agreed[0] != 0;
  }

  void on_run_end(const RunEnd& end) override {
    if (!end.stopped) return;
    run_.result.stop_signal = agreed_signal_ != 0 ? agreed_signal_ : stop_signal();
    if (!run_.leader) return;
    // On stderr: mpirun stops reading the ranks' stdout while it ends the job, and a line there
    // could wait for it, ahead of the checkpoint.
    console::warning("stopped by signal " + std::to_string(run_.result.stop_signal) + " at step " +
                     std::to_string(end.step) +
                     (run_.lockstep() ? ": writing a final checkpoint"
                                      : " of rank 0: writing the servers' state as a final checkpoint") +
                     "; resubmit with --resume latest to continue\n");
  }

 private:
  Run& run_;
  const double every_seconds_ = run_.config.get_real("checkpoint.every_seconds");
  int agreed_signal_ = 0;
  std::shared_ptr<std::atomic<int64_t>> step_in_flight_ = std::make_shared<std::atomic<int64_t>>(0);
};

class CheckpointCallback final : public TrainingCallback {
 public:
  CheckpointCallback(Run& run, TrainingLoop& loop, int64_t every) : run_(run), loop_(loop), every_(every) {}

  void before_next_step(int64_t step) override {
    if (!run_.lockstep()) {
      if (run_.leader) write_served_checkpoint(run_);
      return;
    }
    const bool by_steps = every_ > 0 && step % every_ == 0;
    if ((!by_steps && !run_.checkpoint_due) || step >= run_.total_steps) return;
    TraceSpan checkpoint_span(run_.traced(), "checkpoint", "step", step);
    loop_.download_step_state();
    run_.meta.sync = gather_sync_state(run_);
    const auto whole_state = gather_sharded_optimizer_state(run_);
    if (run_.leader) {
      run_.result.checkpoint =
          start_run_checkpoint(run_, run_.meta, whole_state ? whole_state.get() : run_.optimizer.get());
    } else {
      for (auto phase : {fault::Phase::checkpoint_before_data, fault::Phase::checkpoint_after_data,
                         fault::Phase::checkpoint_before_rename})
        fault::at(phase, step);
    }
    // Nobody runs ahead of a checkpoint that may fail: its error ends every rank.
    run_.train_comm->barrier();
    run_.last_checkpoint_at = Clock::now();
    run_.checkpoint_due = false;
  }

 private:
  Run& run_;
  TrainingLoop& loop_;
  const int64_t every_;
};

// Where the non-finite gradient came from, for its message.
std::string nonfinite_origin(const NonFiniteFigures& figures) {
  if (!figures.diagnosed) return "NaN or Inf on some rank";
  if (figures.ranks.empty()) return "every rank's own gradient was finite: their sum overflowed the float range";
  std::string text;
  for (const auto& origin : figures.ranks) {
    text += (text.empty() ? "" : "; ") + std::string("rank ") + std::to_string(origin.rank) + "'s gradient";
    if (!origin.layer.empty()) text += ", first the output of layer '" + origin.layer + "'";
    text += ", first parameter in backward order '" + origin.parameter + "'";
  }
  return text;
}

class NonFiniteCallback final : public TrainingCallback {
 public:
  explicit NonFiniteCallback(Run& run) : run_(run) {}

  void on_nonfinite(const NonFiniteFigures& figures) override {
    if (!figures.skipped)
      throw StartupError("non-finite gradient at step " + std::to_string(figures.step) + " (" +
                             nonfinite_origin(figures) + "); train.nonfinite = skip skips such steps",
                         run_.leader);
    ++run_.result.skipped_steps;
    if (run_.leader)
      run_.log << "warning: non-finite gradient at step " << figures.step << " (" << nonfinite_origin(figures)
               << "): step skipped\n"
               << std::flush;
  }

 private:
  Run& run_;
};

}  // namespace

std::unique_ptr<TrainingCallback> make_trace_callback(Run& run) { return std::make_unique<TraceCallback>(*run.trace); }

std::unique_ptr<TrainingCallback> make_evaluation_callback(Run& run, TrainingLoop& loop) {
  return std::make_unique<EvaluationCallback>(run, loop);
}

std::unique_ptr<TrainingCallback> make_stop_signal_callback(Run& run) {
  return std::make_unique<StopSignalCallback>(run);
}

std::unique_ptr<TrainingCallback> make_checkpoint_callback(Run& run, TrainingLoop& loop) {
  return std::make_unique<CheckpointCallback>(run, loop, run.config.get_int("checkpoint.every_steps"));
}

std::unique_ptr<TrainingCallback> make_nonfinite_callback(Run& run) { return std::make_unique<NonFiniteCallback>(run); }

}  // namespace mgt
