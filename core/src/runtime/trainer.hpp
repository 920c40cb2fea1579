#pragma once
// The training loop of one rank: start-up checks agreed by all ranks, then
// read -> forward -> loss -> backward -> sync -> optimizer -> metrics -> checkpoint.
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

#include "mgtrain/communicator.hpp"
#include "mgtrain/config.hpp"
#include "mgtrain/error.hpp"
#include "mgtrain/model.hpp"

namespace mgt {

// An error found before step 1 and agreed on by all ranks: every rank ends cleanly with it, and
// only the lowest rank that saw it prints it (`report` is true there).
class StartupError : public Error {
 public:
  StartupError(const std::string& message, bool report) : Error(message), report_(report) {}
  bool report() const { return report_; }

 private:
  bool report_;
};

struct TrainOptions {
  Config config;                          // as parsed: file plus command-line overrides
  std::string resume;                     // "", "latest" or a checkpoint path
  std::vector<std::string> plugin_paths;  // --plugin-path
  // For `mgtrain bench` and `mgtrain verify`: no progress output or metrics file (quiet), no
  // checkpoints, and the first `timing_warmup_steps` steps left out of the timings.
  bool quiet = false;
  bool write_checkpoints = true;
  int64_t timing_warmup_steps = 0;
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

// Runs `check` on every rank, then agrees: if it threw on any rank, every rank throws
// StartupError, flagged for printing on the lowest failing rank only.
void agree(Communicator& comm, const std::function<void()>& check);

// agree() for work that only some ranks do while the others wait without using the cores (the
// reference runs of `mgtrain bench` and `mgtrain verify`): `part` runs on every rank (a no-op where
// there is nothing to do), the ranks meet in a sleeping barrier with the communicator's deadline,
// naming `waiting_for` if it passes, then all throw StartupError if `part` threw anywhere. The
// message of a rank whose error was to be reported wins over a rank's "rank R failed" echo.
void agree_after_sleeping(Communicator& comm, const std::string& waiting_for, const std::function<void()>& part);

// Plugin names a config asks for, read before validation so their keys can be added.
struct PluginChoice {
  std::string model, optimizer, sync;
};
PluginChoice plugin_choice(const Config& config);

class PluginRegistry;
// The keys the core and the chosen plugins know: what a config is validated against.
std::vector<ConfigKey> known_config_keys(PluginRegistry& registry, const PluginChoice& choice);

// Validates `config` against the keys of the core and of the plugins it chooses, then builds the
// model and lays out its parameters in `store` (finalized, not initialized).
std::unique_ptr<Model> build_model(PluginRegistry& registry, Config& config, ParameterStore& store);

// What this rank would do under `config`: the config checked as a run checks it, the sync
// strategy set up on `comm` as a run sets it up (roles and buffers; no device, no message), and
// the data checked as the run's start-up checks it, with its messages (data.train opened as a
// training rank's reader opens it, the model taking its samples, data.test). What `mgtrain doctor
// --config` checks and binds the GPUs by.
struct RankPlan {
  bool trains = true;             // false on a parameter server's serving ranks: they take no GPU
  std::string device;             // train.device
  bool allow_shared_gpu = false;  // gpu.allow_shared
};
RankPlan plan_rank(Communicator& comm, Config config, const std::vector<std::string>& plugin_paths);

}  // namespace mgt
