#include "runtime/startup_checks.hpp"

#include <string>

#include "datasets/data_files.hpp"
#include "datasets/token_reader.hpp"
#include "loader/plugin_loader.hpp"
#include "mgtrain/serving.hpp"
#include "mgtrain/sync.hpp"
#include "runtime/core_keys.hpp"
#include "runtime/evaluate.hpp"
#include "runtime/lr_schedule.hpp"

namespace mgt {

namespace {

// A model's input shape (model.input_shape) that the config leaves unset is the training file's
// image shape, so one model config trains on grey 28x28 and colour 32x32 images alike.
void take_input_shape_from_data(Config& config) {
  const auto it = config.values().find("model.input_shape");
  if (it == config.values().end() || it->second.source != "default") return;
  // A token file has no image shape: the check of the data against the model names it.
  const std::string train = config.get_string("data.train");
  if (data::is_token_file(data::expand_data_files(train).front())) return;
  const auto info =
      data::open_sample_set_info(train, config.get_string("data.x_name"), config.get_string("data.y_name"));
  // Only images [C, H, W]: other samples do not fit such a model, which the data check names.
  if (info.sample_shape.size() != 3) return;
  std::string shape;
  for (int64_t d : info.sample_shape) shape += (shape.empty() ? "" : ",") + std::to_string(d);
  config.set("model.input_shape", shape, "data.train");
}

// The data keys that name files expand to at least one file each, each named once: said with
// the key and where it was set, before anything reads the files.
void check_data_file_lists(const Config& config) {
  for (const char* key : {"data.train", "data.test"}) {
    if (!config.has(key) || config.get_string(key).empty()) continue;
    try {
      data::expand_data_files(config.get_string(key));
    } catch (const ConfigError& e) {
      throw ConfigError(std::string("config key '") + key + "' (" + config.values().at(key).source + "): " + e.what());
    }
  }
}

}  // namespace

// Rows of one micro-batch: the global batch over the training ranks and accumulation steps.
int64_t micro_batch_rows(int64_t global_batch, int64_t train_world, int64_t accumulation) {
  if (global_batch % (train_world * accumulation) != 0)
    throw ConfigError("train.global_batch = " + std::to_string(global_batch) +
                      " is not divisible by training ranks x accumulation steps = " + std::to_string(train_world) +
                      " x " + std::to_string(accumulation));
  return global_batch / (train_world * accumulation);
}

// What a training rank's reader of data.train takes from the config and the model (`model_name`),
// as rank `rank` of `world` training ranks; the caller adds what its device and trace need.
data::ReaderOptions run_reader_options(const Config& config, const Model& model, const std::string& model_name,
                                       int rank, int world) {
  data::ReaderOptions ro;
  ro.path = config.get_string("data.train");
  ro.x_name = config.get_string("data.x_name");
  ro.y_name = config.get_string("data.y_name");
  ro.global_batch = config.get_int("train.global_batch");
  ro.rank = rank;
  ro.world = world;
  ro.seed = static_cast<uint64_t>(config.get_int("train.seed"));
  ro.prefetch_depth = static_cast<int>(config.get_int("data.prefetch"));
  ro.chunk_cache_bytes = static_cast<size_t>(config.get_real("data.cache_mb") * 1e6);
  ro.in_memory = config.get_bool("data.in_memory");
  try {
    ro.augment = data::parse_augmentation(config.get_string("data.augment"));
  } catch (const ConfigError& e) {
    throw ConfigError("config key 'data.augment' (" + config.values().at("data.augment").source + "): " + e.what());
  }
  // A language model reads windows of its context from a token file.
  ro.context = model.sequence_length();
  ro.model_name = model_name;
  if (ro.context > 0) ro.vocab_limit = model.output_shape({1, ro.context}).back();
  // A masked language model's last id is its mask token, which no file's token may be.
  ro.mlm = model_masking(config, model, ro.seed);
  if (ro.mlm.enabled()) ro.vocab_limit = ro.mlm.vocab;
  return ro;
}

// The model takes the samples of data file `info` in micro-batches of shape `micro_shape` and
// gives logits for every class of the file (a language model: for each token of its window, over
// the file's vocabulary).
void check_model_takes(const Model& model, const std::string& model_name, const data::DatasetInfo& info,
                       const Shape& micro_shape) {
  Shape logits;
  try {
    logits = model.output_shape(micro_shape);
  } catch (const Error& e) {
    throw DataError("model '" + model_name + "' cannot take the samples of '" + info.path + "' (shape " +
                    shape_string(info.sample_shape) + "): " + e.what());
  }
  if (info.token_windows()) {
    const int64_t T = info.labels_per_sample, V = info.num_classes;
    if (logits.size() != 3 || logits[0] != micro_shape[0] || logits[1] != T || logits[2] < V)
      throw DataError("model '" + model_name + "' produces logits of shape " + shape_string(logits) + " for input " +
                      shape_string(micro_shape) + ", expected [" + std::to_string(micro_shape[0]) + ", " +
                      std::to_string(T) + ", " + std::to_string(V) + "] for the vocabulary of '" + info.path + "'");
    return;
  }
  if (logits.size() != 2 || logits[1] < info.num_classes)
    throw DataError("model '" + model_name + "' produces logits of shape " + shape_string(logits) + " for input " +
                    shape_string(micro_shape) + ", expected [" + std::to_string(micro_shape[0]) + ", " +
                    std::to_string(info.num_classes) + "] for the classes of '" + info.path + "'");
}

// The test file is read at the end, after training (and with train.eval_every_epochs after
// epochs): a file the model cannot take (its sample shape, its classes, a label out of range) must
// not wait until then.
void check_test_data(const Config& config, const Model& model, int64_t micro_batch) {
  const std::string test_path = config.get_string("data.test");
  if (test_path.empty()) return;
  // Ids of one tokenizer mean nothing to a model trained on another's.
  // The first shard of each: the readers check that every shard has the same tokenizer.
  const std::string train_path = data::expand_data_files(config.get_string("data.train")).front();
  const std::string first_test = data::expand_data_files(test_path).front();
  if (model.sequence_length() > 0 && data::is_token_file(train_path) && data::is_token_file(first_test)) {
    const data::TokenFileInfo train = data::open_token_info(train_path);
    data::require_tokenizer(data::open_token_info(first_test), "data.test: ", train.tokenizer, train.tokenizer_sha256,
                            "data.train '" + train_path + "'");
  }
  try {
    check_eval_data(model, test_path, config.get_string("data.x_name"), config.get_string("data.y_name"), micro_batch);
  } catch (const Error& e) {
    throw DataError(std::string("data.test: ") + e.what());
  }
}

PluginChoice plugin_choice(const Config& config) {
  auto need = [&](const char* key) {
    if (!config.has(key)) throw ConfigError(std::string("config key '") + key + "' is required");
    return config.get_string(key);
  };
  PluginChoice choice;
  choice.model = need("model.name");
  choice.optimizer = need("optimizer.name");
  choice.sync = config.has("sync.name") ? config.get_string("sync.name") : "allreduce";
  choice.schedule = config.has("train.lr_schedule") ? config.get_string("train.lr_schedule") : "constant";
  return choice;
}

std::vector<ConfigKey> known_config_keys(PluginRegistry& registry, const PluginChoice& choice) {
  std::vector<ConfigKey> keys = core_config_keys();
  for (const auto& [kind, name] :
       {std::pair{"model", choice.model}, std::pair{"optimizer", choice.optimizer}, std::pair{"sync", choice.sync}}) {
    const auto plugin_keys = registry.config_keys(kind, name);
    keys.insert(keys.end(), plugin_keys.begin(), plugin_keys.end());
  }
  if (!is_builtin_schedule(choice.schedule)) {
    std::vector<ConfigKey> schedule_keys;
    try {
      schedule_keys = registry.config_keys("schedule", choice.schedule);
    } catch (const PluginError& e) {
      // Said as a bad value of the key, since a misspelt built-in ends up here too.
      throw ConfigError("config key 'train.lr_schedule' = '" + choice.schedule +
                        "': not a built-in schedule (constant, cosine), and " + e.what());
    }
    keys.insert(keys.end(), schedule_keys.begin(), schedule_keys.end());
  }
  return keys;
}

std::unique_ptr<Model> build_model(PluginRegistry& registry, Config& config, ParameterStore& store) {
  const PluginChoice choice = plugin_choice(config);
  config.validate(known_config_keys(registry, choice));
  auto model = registry.create_model(choice.model, config);
  model->declare(store);
  store.finalize();
  return model;
}

PluginChoice configure_plugins(PluginRegistry& registry, Config& config) {
  const PluginChoice choice = plugin_choice(config);
  config.validate(known_config_keys(registry, choice));
  check_core_key_ranges(config);
  check_data_file_lists(config);
  take_input_shape_from_data(config);
  return choice;
}

RankPlan plan_rank(Communicator& comm, Config config, const std::vector<std::string>& plugin_paths) {
  PluginRegistry registry(plugin_paths);  // outlives the objects its libraries made
  const PluginChoice choice = configure_plugins(registry, config);
  ParameterStore store;
  const auto model = build_model(registry, config, store);
  const auto sync = registry.create_sync(choice.sync, config);
  sync->setup(comm, store);
  // A schedule plugin's constructor checks its keys; its setup needs the optimizer's rate and the
  // epoch length, which the run's start-up gives it.
  if (!is_builtin_schedule(choice.schedule)) registry.create_schedule(choice.schedule, config);
  const ServingRole* serving = sync->serving();
  const bool trains = !serving || serving->trains();
  // The data as the run's start-up reads it, with its messages: a training rank opens data.train
  // as its reader (every label, at least one global batch), the model must take its samples, and
  // data.test must suit the model. A serving rank reads none.
  if (trains) {
    const int train_world = serving ? serving->train_world(comm) : comm.size();
    const int64_t micro_batch =
        micro_batch_rows(config.get_int("train.global_batch"), train_world, sync->accumulation_steps());
    data::ReaderOptions ro = run_reader_options(config, *model, choice.model,
                                                serving ? serving->train_rank(comm) : comm.rank(), train_world);
    ro.in_memory = false;  // a check: nothing needs the rows in memory
    const auto reader = data::open_batch_reader(ro);
    Shape micro_shape = {micro_batch};
    for (int64_t d : reader->info().sample_shape) micro_shape.push_back(d);
    check_model_takes(*model, choice.model, reader->info(), micro_shape);
    check_test_data(config, *model, micro_batch);
  }
  return {trains, config.get_string("train.device"), config.get_bool("gpu.allow_shared")};
}

}  // namespace mgt
