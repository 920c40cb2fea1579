#pragma once
// The training loop of a training rank: read a batch, run the step, hand the step's figures to the
// callbacks; at the end the final checkpoint and the run's figures. What happens at a step's, an
// epoch's or the run's end (checkpoints, evaluation, stop signals, the timeline, metrics,
// TensorBoard, progress, non-finite gradients) is a callback (callbacks.hpp, observers/).
#include <memory>
#include <vector>

#include "device/compiled_step.hpp"
#include "observers/observer.hpp"
#include "runtime/run.hpp"

namespace mgt {

class TrainingLoop {
 public:
  // Adds the run's callbacks: rank 0's reporting ones (unless quiet), then the runtime's.
  explicit TrainingLoop(Run& run);
  TrainingLoop(const TrainingLoop&) = delete;
  TrainingLoop& operator=(const TrainingLoop&) = delete;

  // From the run's position to its end (or a stop), then the final checkpoint and the figures.
  TrainResult run();

  // For callbacks that read the parameters: waits for every step in flight, taking its figures,
  // and brings the step's parameters and optimizer state into the host store (on a GPU).
  void download_step_state();
  // Rank 0: an evaluation's figures to every callback.
  void report_evaluation(const EvalFigures& figures);
  // Time the run spent on something else (an evaluation): left out of the interval's rate.
  void leave_out_of_interval(Clock::duration spent) { interval_start_ += spent; }

 private:
  struct Interval {
    double loss = 0, wait = 0, correct = 0;
    double grad_norm = 0;  // the last step's, before clipping
    // The last step's rate, as the schedule gave it to the optimizer: the metrics' lr is what was
    // applied, whatever the optimizer's learning_rate() reports.
    double learning_rate = 0;
    double busy = 0;  // this rank's seconds outside the sync strategy: compute, data wait, update
    int64_t steps = 0;
    int64_t samples = 0;
  };

  void say_what_is_trained(int64_t step) const;
  void run_step(data::Batch& batch, int64_t step);
  double scheduled_rate(int64_t step) const;
  void finish_steps();
  void diagnose_nonfinite(int64_t step);
  void absorb(const StepFigures& f);
  void log_interval(int64_t step, int64_t epoch);
  TrainResult finish(int64_t start_step, int64_t step);

  Run& run_;
  std::vector<std::unique_ptr<TrainingCallback>> callbacks_;
  Interval interval_;
  Clock::time_point interval_start_, run_start_;
  NonFiniteFigures nonfinite_;  // the latest non-finite step's
  const int64_t nan_step_;      // test builds: MGTRAIN_TEST_NAN_AT's step for this rank, or 0
};

}  // namespace mgt
