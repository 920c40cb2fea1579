#pragma once
// The checks of a config and its data that every run makes before step 1, shared by the run's
// start-up (startup.cpp) and `mgtrain doctor --config` (plan_rank), so the doctor cannot drift
// from the run.
#include <memory>
#include <string>
#include <vector>

#include "datasets/token_reader.hpp"
#include "mgtrain/communicator.hpp"
#include "mgtrain/config.hpp"
#include "mgtrain/model.hpp"
#include "mgtrain/parameters.hpp"

namespace mgt {

class PluginRegistry;

// Plugin names a config asks for, read before validation so their keys can be added. `schedule`
// is train.lr_schedule: a plugin's name unless is_builtin_schedule (runtime/lr_schedule.hpp).
struct PluginChoice {
  std::string model, optimizer, sync, schedule;
};
PluginChoice plugin_choice(const Config& config);

// The keys the core and the chosen plugins know: what a config is validated against.
std::vector<ConfigKey> known_config_keys(PluginRegistry& registry, const PluginChoice& choice);

// The config as every run takes it: checked against the keys of the core and of the plugins it
// chooses and the core's ranges, the model's input shape taken from the training file where the
// config leaves it unset. Returns the plugins chosen.
PluginChoice configure_plugins(PluginRegistry& registry, Config& config);

// Validates `config` against the keys of the core and of the plugins it chooses, then builds the
// model and lays out its parameters in `store` (finalized, not initialized).
std::unique_ptr<Model> build_model(PluginRegistry& registry, Config& config, ParameterStore& store);

// Rows of one micro-batch: the global batch over the training ranks and accumulation steps.
int64_t micro_batch_rows(int64_t global_batch, int64_t train_world, int64_t accumulation);

// What a training rank's reader of data.train takes from the config and the model (`model_name`),
// as rank `rank` of `world` training ranks; the caller adds what its device and trace need.
data::ReaderOptions run_reader_options(const Config& config, const Model& model, const std::string& model_name,
                                       int rank, int world);

// The model takes the samples of data file `info` in micro-batches of shape `micro_shape` and
// gives logits for every class of the file (a language model: for each token of its window, over
// the file's vocabulary).
void check_model_takes(const Model& model, const std::string& model_name, const data::DatasetInfo& info,
                       const Shape& micro_shape);

// The test file is read at the end, after training (and with train.eval_every_epochs after
// epochs): a file the model cannot take (its sample shape, its classes, a label out of range) must
// not wait until then.
void check_test_data(const Config& config, const Model& model, int64_t micro_batch);

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
