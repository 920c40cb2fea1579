#pragma once
// What rank 0's run reports, and to whom. The trainer is the training loop; the metrics file,
// TensorBoard, the progress display and the slow-rank warning are observers it calls at the
// run's start, after each step, at each logging interval, at each epoch's end and at the end.
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

// One consumer of the run's progress. Each hook has a default that ignores it, so an observer
// overrides only what it reports.
class TrainingObserver {
 public:
  virtual ~TrainingObserver() = default;
  virtual void on_run_start(const RunStart& run) { (void)run; }
  // After every step.
  virtual void on_step_end(int64_t step, int64_t epoch) { (void)step, (void)epoch; }
  // After the step that ends a logging interval, before on_step_end for it.
  virtual void on_interval(const IntervalFigures& figures) { (void)figures; }
  // After the last step of an epoch, after on_step_end for it.
  virtual void on_epoch_end(int64_t step, int64_t epoch) { (void)step, (void)epoch; }
  // After on_epoch_end, for an epoch evaluated on the test file.
  virtual void on_evaluation(const EvalFigures& figures) { (void)figures; }
  // A step with a non-finite gradient, skipped or about to end the run.
  virtual void on_nonfinite(const NonFiniteFigures& figures) { (void)figures; }
  virtual void on_run_end(const RunEnd& run) { (void)run; }
};

// The trainer's observers: JSON lines appended to `path` (metrics_file.cpp); created with its
// directory, throwing IoError naming the path and the reason when it cannot be opened. A line that
// cannot be written later is a warning on stderr, and the file gets no more.
std::unique_ptr<TrainingObserver> make_metrics_file(const std::string& path);
// Scalars in TensorBoard event files under `dir` (tensorboard_observer.cpp); a write that fails
// is a warning on stderr, as for the metrics file.
std::unique_ptr<TrainingObserver> make_tensorboard_observer(const std::string& dir);
// A live bar or plain lines on `out` (progress_observer.cpp), by `mode` (train.progress).
std::unique_ptr<TrainingObserver> make_progress_observer(std::ostream& out, const std::string& mode);
// A warning on `out` when one rank's step time stands far above the others' (slow_rank_warning.cpp).
std::unique_ptr<TrainingObserver> make_slow_rank_warning(std::ostream& out);

}  // namespace mgt
