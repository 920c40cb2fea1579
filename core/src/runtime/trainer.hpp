#pragma once
// One rank's run, from the launcher's side: what it is given and what it gives back. train() is
// the orchestration: start-up (startup.hpp), resume (resume.hpp), then the training loop
// (training_loop.hpp) or a parameter server's serving loop (serving_loop.hpp).
#include <cstdint>
#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

#include "mgtrain/communicator.hpp"
#include "mgtrain/config.hpp"
#include "mgtrain/error.hpp"
#include "mgtrain/model.hpp"
#include "runtime/agreement.hpp"
#include "runtime/startup.hpp"

namespace mgt {

struct TrainOptions {
  Config config;                          // as parsed: file plus command-line overrides
  std::string resume;                     // "", "latest" or a checkpoint path
  std::vector<std::string> plugin_paths;  // --plugin-path
  // For `mgtrain bench` and `mgtrain verify`: no progress output or metrics file (quiet), no
  // checkpoints, and the first `timing_warmup_steps` steps left out of the timings.
  bool quiet = false;
  bool write_checkpoints = true;
  int64_t timing_warmup_steps = 0;
  // For `mgtrain verify`: end the run after this step (0: no such stop), as a stop signal would,
  // with the schedule still told train.max_steps, so its curve is the uninterrupted run's.
  int64_t stop_at_step = 0;
};

// Where a step's time goes, in seconds.
struct StepPhases {
  double data_wait = 0;  // blocked on the prefetch thread
  double compute = 0;    // forward, loss and backward
  double sync = 0;       // the sync strategy after backward: communication not hidden by compute
  double optimizer = 0;  // the update
};

struct TrainResult {
  int64_t steps = 0;      // global optimizer step reached (counted from the start of training)
  int64_t steps_run = 0;  // steps taken by this run (fewer after a resume)
  int64_t samples = 0;    // samples consumed by this run, all ranks
  double train_seconds = 0;
  double samples_per_s = 0;
  double tokens_per_s = 0;     // a language model's samples_per_s x its window; 0 for other models
  double final_loss = 0;       // mean loss over the last logging interval
  std::string checkpoint;      // path of the last checkpoint written
  double peak_rss_mb = 0;      // peak resident memory of the largest rank
  bool stopped = false;        // ended early by a stop signal (after a final checkpoint)
  int stop_signal = 0;         // the signal it stopped for (some rank's)
  double test_accuracy = -1;   // of the final model on data.test, when set (rank 0)
  double test_loss = -1;       // its mean loss per label (per token: nats), when set (rank 0)
  int64_t skipped_steps = 0;   // steps skipped for a non-finite gradient (train.nonfinite = skip)
  StepPhases phases;           // mean per step, averaged over ranks
  size_t gradient_floats = 0;  // size of the flat gradient buffer the sync strategy reduces
  std::string device = "cpu";  // where the ranks trained: cpu or gpu (train.device)
  // Ranks the run went on without (ServingRole::lost_ranks). When set, the figures are this
  // rank's own and the caller must leave without MPI_Finalize, which would wait for them.
  std::vector<int> lost_ranks;
};

TrainResult train(Communicator& comm, TrainOptions options, std::ostream& log);

}  // namespace mgt
