#pragma once
// The training loop's one callback interface, and what it reports. The loop reads, steps and calls
// its callbacks; everything else that happens at a step's, an epoch's or the run's end is one:
// here the metrics file, TensorBoard, the progress display and the slow-rank warning (rank 0's);
// in the runtime the timeline, evaluation, stop signals, checkpoints and non-finite handling.
#include <cstdint>
#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

#include "kernels/gpu_runtime.hpp"

namespace mgt {

// The run as it starts: what a display needs to place a step.
struct RunStart {
  int64_t epochs = 0;  // train.epochs; the run may end sooner, at total_steps
  int64_t steps_per_epoch = 0;
  int64_t first_step = 0;   // the step the run starts from (after a resume, not 0)
  int64_t total_steps = 0;  // the step the run ends at
};

// One logging interval's figures, averaged over the training ranks for lock-step strategies and
// rank 0's own for asynchronous ones.
struct IntervalFigures {
  int64_t step = 0;   // global optimizer step reached
  int64_t epoch = 0;  // 0-based epoch of that step
  double loss = 0, accuracy = 0, samples_per_s = 0, data_wait_share = 0, learning_rate = 0;
  double tokens_per_s = 0;           // a language model's: samples_per_s x its window; else 0
  double grad_norm = 0;              // the last step's reduced gradient's L2 norm, before clipping
  double time_s = 0;                 // since the run's start (or the end of its timing warm-up)
  double rss_mb = 0;                 // resident memory of the largest rank
  int64_t open_fds = 0;              // open file descriptors of the rank with the most
  std::vector<double> rank_step_ms;  // each reporting rank's mean step time over the interval
  std::vector<GpuSample> gpu;        // each reporting rank's GPU; empty off the GPU path
};

// An evaluation on the test file after an epoch (train.eval_every_epochs), over all training ranks.
struct EvalFigures {
  int64_t step = 0;
  int64_t epoch = 0;  // 0-based epoch just ended
  double accuracy = 0, loss = 0;
  int64_t samples = 0;
  std::string path;  // data.test
};

// A step whose reduced gradient held NaN or Inf (train.nonfinite), with where it came from on each
// rank whose own gradient did (empty: no rank looked, as on a GPU, or each rank's was finite and
// their sum overflowed).
struct NonFiniteFigures {
  struct Origin {
    int rank = 0;
    std::string layer;      // the first layer whose output held NaN or Inf ("" none)
    std::string parameter;  // the first parameter, in backward order, whose gradient did
  };
  int64_t step = 0;        // 1-based, as the messages count
  bool skipped = false;    // train.nonfinite = skip; otherwise the run ends
  bool diagnosed = false;  // the ranks looked (on the CPU)
  std::vector<Origin> ranks;
};

// The run as it ends, after the last step it took.
struct RunEnd {
  int64_t step = 0;
  int64_t epoch = 0;     // 0-based epoch of the last step
  bool stopped = false;  // by a stop signal
};

// One participant in the training loop. The loop calls each hook on every callback in the order
// they were added, at these points of a step:
//   on_step_begin, the step, on_interval (when a logging interval ends), on_step_end,
//   on_epoch_end (when an epoch ends), should_stop, before_next_step (when the run goes on).
// Each hook has a default that ignores it, so a callback overrides only what it does.
class TrainingCallback {
 public:
  virtual ~TrainingCallback() = default;
  virtual void on_run_start(const RunStart& run) { (void)run; }
  // Before the step that takes the run from `step` steps to step + 1.
  virtual void on_step_begin(int64_t step) { (void)step; }
  // After the step that ends a logging interval, before on_step_end for it.
  virtual void on_interval(const IntervalFigures& figures) { (void)figures; }
  // After every step.
  virtual void on_step_end(int64_t step, int64_t epoch) { (void)step, (void)epoch; }
  // After the last step of an epoch, after on_step_end for it.
  virtual void on_epoch_end(int64_t step, int64_t epoch) { (void)step, (void)epoch; }
  // An epoch evaluated on the test file, after on_epoch_end.
  virtual void on_evaluation(const EvalFigures& figures) { (void)figures; }
  // A step with a non-finite gradient, skipped or about to end the run.
  virtual void on_nonfinite(const NonFiniteFigures& figures) { (void)figures; }
  // After a step's other hooks: true ends the run after this step. Every callback is asked, so a
  // callback whose answer is a collective is asked on every rank.
  virtual bool should_stop(int64_t step) { return (void)step, false; }
  // After should_stop, when the run goes on past `step` (not after its last step): where state
  // is saved between steps.
  virtual void before_next_step(int64_t step) { (void)step; }
  virtual void on_run_end(const RunEnd& run) { (void)run; }
};

// Rank 0's reporting callbacks: JSON lines appended to `path` (metrics_file.cpp); created with its
// directory, throwing IoError naming the path and the reason when it cannot be opened. A line that
// cannot be written later is a warning on stderr, and the file gets no more.
std::unique_ptr<TrainingCallback> make_metrics_file(const std::string& path);
// Scalars in TensorBoard event files under `dir` (tensorboard_observer.cpp); a write that fails
// is a warning on stderr, as for the metrics file.
std::unique_ptr<TrainingCallback> make_tensorboard_observer(const std::string& dir);
// A live bar or plain lines on `out` (progress_observer.cpp), by `mode` (train.progress).
std::unique_ptr<TrainingCallback> make_progress_observer(std::ostream& out, const std::string& mode);
// A warning on `out` when one rank's step time stands far above the others' (slow_rank_warning.cpp).
std::unique_ptr<TrainingCallback> make_slow_rank_warning(std::ostream& out);

}  // namespace mgt
