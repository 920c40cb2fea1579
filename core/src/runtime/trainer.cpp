#include "runtime/trainer.hpp"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <numeric>
#include <optional>
#include <ostream>
#include <sstream>
#include <thread>

#include "base/resident_memory.hpp"
#include "base/stop_signal.hpp"
#include "checkpoint/checkpoint.hpp"
#include "comm/mpi_communicator.hpp"
#include "datasets/token_reader.hpp"
#include "device/training_device.hpp"
#include "io/append_file.hpp"
#include "io/json_line.hpp"
#include "io/printable_stream.hpp"
#include "kernels/cpu/gemm.hpp"
#include "loader/plugin_loader.hpp"
#include "mgtrain/layers.hpp"
#include "mgtrain/rng.hpp"
#include "mgtrain/version.hpp"
#include "observers/observer.hpp"
#include "observers/trace.hpp"
#include "runtime/core_keys.hpp"
#include "runtime/decay_mask.hpp"
#include "runtime/evaluate.hpp"
#include "runtime/job_checks.hpp"
#include "runtime/lr_schedule.hpp"
#include "runtime/optimizer_check.hpp"
#include "testing/fault_injection.hpp"

namespace mgt {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// What every rank must share before step 1, in the order compared: a description and its text,
// as entries joined by `separator` so a difference can be shown entry by entry.
struct AgreementItem {
  const char* what;
  std::string text;
  char separator;
};

// Open file descriptors of this process: a leak shows as a count that grows with the steps.
int64_t open_file_descriptors() {
  std::error_code ec;
  int64_t n = 0;
  for (std::filesystem::directory_iterator it("/proc/self/fd", ec), end; !ec && it != end; it.increment(ec)) ++n;
  return n;
}

// %j in a path becomes the Slurm job id, as in sbatch's --output, or "local" outside Slurm. All
// ranks of a job see the same SLURM_JOB_ID, so they agree on the result.
void expand_job_id(Config& config, std::initializer_list<const char*> keys) {
  const char* job = std::getenv("SLURM_JOB_ID");
  const std::string id = job && *job ? job : "local";
  for (const char* key : keys) {
    std::string value = config.get_string(key);
    const auto at = value.find("%j");
    if (at == std::string::npos) continue;
    value.replace(at, 2, id);
    config.set(key, value, config.values().at(key).source);
  }
}

std::string metrics_path(const Config& config, const std::string& checkpoint_dir) {
  const std::string path = config.get_string("metrics.file");
  return path.empty() ? (std::filesystem::path(checkpoint_dir) / "metrics.jsonl").string() : path;
}

// The first entry where two texts differ, each side quoted ("(none)" past the end of one).
std::string first_difference(const std::string& a, const std::string& b, char separator, int rank_b) {
  std::vector<std::string> ea, eb;
  for (auto [text, out] : {std::pair{&a, &ea}, std::pair{&b, &eb}}) {
    std::stringstream in(*text);
    for (std::string entry; std::getline(in, entry, separator);) out->push_back(entry);
  }
  size_t i = 0;
  while (i < ea.size() && i < eb.size() && ea[i] == eb[i]) ++i;
  auto entry = [](const std::vector<std::string>& e, size_t k) {
    return k < e.size() ? "'" + e[k] + "'" : std::string("(none)");
  };
  return "rank 0 has " + entry(ea, i) + ", rank " + std::to_string(rank_b) + " has " + entry(eb, i);
}

// Compares fingerprints of the items across ranks; on a mismatch the first differing rank sends
// its text to rank 0, which names the first differing entry. Every rank then throws.
void check_agreement(Communicator& comm, const std::vector<AgreementItem>& items) {
  const size_t n = items.size();
  std::vector<uint64_t> mine(n), all(n * static_cast<size_t>(comm.size()));
  for (size_t i = 0; i < n; ++i) mine[i] = rng::purpose_hash(items[i].text);
  comm.allgather(mine.data(), all.data(), n * sizeof(uint64_t));
  for (int r = 1; r < comm.size(); ++r) {
    for (size_t i = 0; i < n; ++i) {
      if (all[i] == all[static_cast<size_t>(r) * n + i]) continue;
      constexpr int kTag = 91;
      std::string detail;
      if (comm.rank() == r) {
        const uint64_t size = items[i].text.size();
        comm.send(&size, sizeof(size), 0, kTag);
        comm.send(items[i].text.data(), size, 0, kTag);
      } else if (comm.rank() == 0) {
        uint64_t size = 0;
        comm.recv(&size, sizeof(size), r, kTag);
        std::string theirs(size, '\0');
        comm.recv(theirs.data(), size, r, kTag);
        detail = ": " + first_difference(items[i].text, theirs, items[i].separator, r);
      }
      throw StartupError("ranks 0 and " + std::to_string(r) + " differ in " + items[i].what + detail, comm.rank() == 0);
    }
  }
}

// "section.key = value" per line, in key order.
std::string flat_config(const Config& config) {
  std::string out;
  for (const auto& [key, value] : config.values()) out += key + " = " + value.value + "\n";
  return out;
}

// A rank's sync-strategy arrays as one message: per array its name's length, the name, its length
// and its floats. Names must be plain (letters, digits, '_', '-'): they become dataset names.
std::vector<char> pack_sync_arrays(const std::vector<SyncStateArray>& arrays, int rank) {
  std::vector<char> out;
  const auto put = [&](const void* data, size_t bytes) {
    out.insert(out.end(), static_cast<const char*>(data), static_cast<const char*>(data) + bytes);
  };
  for (const auto& a : arrays) {
    const bool plain = !a.name.empty() && std::all_of(a.name.begin(), a.name.end(), [](char c) {
      return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_' || c == '-';
    });
    MGT_CHECK(plain, Error,
              "rank " + std::to_string(rank) + ": the sync strategy's checkpoint_state() names an array '" + a.name +
                  "': expected letters, digits, '_' and '-' only");
    const uint64_t name_size = a.name.size(), count = a.values.size();
    put(&name_size, sizeof(name_size));
    put(a.name.data(), a.name.size());
    put(&count, sizeof(count));
    put(a.values.data(), a.values.size() * sizeof(float));
  }
  return out;
}

std::vector<SyncStateArray> unpack_sync_arrays(const std::vector<char>& blob) {
  std::vector<SyncStateArray> arrays;
  size_t at = 0;
  const auto get = [&](void* data, size_t bytes) {
    MGT_CHECK(at + bytes <= blob.size(), Error, "sync state message cut short");
    std::memcpy(data, blob.data() + at, bytes);
    at += bytes;
  };
  while (at < blob.size()) {
    SyncStateArray a;
    uint64_t name_size = 0, count = 0;
    get(&name_size, sizeof(name_size));
    a.name.resize(name_size);
    get(a.name.data(), name_size);
    get(&count, sizeof(count));
    a.values.resize(count);
    get(a.values.data(), count * sizeof(float));
    arrays.push_back(std::move(a));
  }
  return arrays;
}

// "name [shape]" per line, in parameter order.
std::string parameter_layout(const ParameterStore& store) {
  std::string out;
  for (const auto& p : store.params()) out += p.name + " " + shape_string(p.shape) + "\n";
  return out;
}

// Where the job's ranks run, as `mgtrain doctor` says it: "on 2 node(s): n1 (ranks 0-1), n2 (ranks
// 2-3)", from every rank's host name, so a log shows whether a job spans the nodes it was given.
std::string node_summary(const std::vector<std::string>& rank_hosts) {
  std::vector<int> every_rank(rank_hosts.size());
  std::iota(every_rank.begin(), every_rank.end(), 0);
  const HostRanks hosts = group_by_host(every_rank, rank_hosts);
  // Consecutive ranks as one run: "0-1, 4".
  const auto runs = [](const std::vector<int>& ranks) {
    std::string out;
    for (size_t i = 0; i < ranks.size();) {
      size_t j = i;
      while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
      out += (out.empty() ? "" : ", ") + std::to_string(ranks[i]) + (j > i ? "-" + std::to_string(ranks[j]) : "");
      i = j + 1;
    }
    return out;
  };
  constexpr size_t kShownHosts = 8;
  std::string out = "on " + std::to_string(hosts.size()) + " node(s): ";
  for (size_t i = 0; i < hosts.size() && i < kShownHosts; ++i) {
    const auto& [host, ranks] = hosts[i];
    out += (i ? ", " : "") + host + (ranks.size() > 1 ? " (ranks " : " (rank ") + runs(ranks) + ")";
  }
  return out + (hosts.size() > kShownHosts ? ", ..." : "");
}

// A model's input shape (model.input_shape) that the config leaves unset is the training file's
// image shape, so one model config trains on grey 28x28 and colour 32x32 images alike.
void take_input_shape_from_data(Config& config) {
  const auto it = config.values().find("model.input_shape");
  if (it == config.values().end() || it->second.source != "default") return;
  // A token file has no image shape: the check of the data against the model names it.
  if (data::is_token_file(config.get_string("data.train"))) return;
  const auto info = data::open_dataset_info(config.get_string("data.train"), config.get_string("data.x_name"),
                                            config.get_string("data.y_name"));
  // Only images [C, H, W]: other samples do not fit such a model, which the data check names.
  if (info.sample_shape.size() != 3) return;
  std::string shape;
  for (int64_t d : info.sample_shape) shape += (shape.empty() ? "" : ",") + std::to_string(d);
  config.set("model.input_shape", shape, "data.train");
}

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
  if (info.labels_per_sample > 1) {
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
  try {
    check_eval_data(model, test_path, config.get_string("data.x_name"), config.get_string("data.y_name"), micro_batch);
  } catch (const Error& e) {
    throw DataError(std::string("data.test: ") + e.what());
  }
}

}  // namespace

void agree(Communicator& comm, const std::function<void()>& check) {
  std::string message;
  try {
    check();
  } catch (const std::exception& e) {
    message = e.what();
    if (message.empty()) message = "unknown error";
  }
  // The lowest failing rank wins: max over (size - rank) of the failing ranks.
  int64_t flag = message.empty() ? 0 : comm.size() - comm.rank();
  comm.allreduce_max(&flag, 1);
  if (flag == 0) return;
  const int failing = comm.size() - static_cast<int>(flag);
  if (failing == comm.rank()) throw StartupError(message, true);
  throw StartupError("rank " + std::to_string(failing) + " failed during start-up", false);
}

void agree_after_sleeping(Communicator& comm, const std::string& waiting_for, const std::function<void()>& part) {
  std::string message;
  bool reportable = false;
  try {
    part();
  } catch (const StartupError& e) {
    message = e.what();
    reportable = e.report();
  } catch (const std::exception& e) {
    message = e.what();
    reportable = true;
  }
  sleeping_barrier(comm, waiting_for);
  // [0]: the lowest failing rank, [1]: the lowest rank whose own error is to be printed; each as
  // size - rank, so a maximum picks the lowest.
  int64_t flags[2] = {message.empty() ? 0 : comm.size() - comm.rank(),
                      message.empty() || !reportable ? 0 : comm.size() - comm.rank()};
  comm.allreduce_max(flags, 2);
  if (flags[0] == 0) return;
  const int teller = comm.size() - static_cast<int>(flags[1] != 0 ? flags[1] : flags[0]);
  if (teller == comm.rank()) throw StartupError(message, true);
  throw StartupError("rank " + std::to_string(teller) + " failed during start-up", false);
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
  return choice;
}

std::vector<ConfigKey> known_config_keys(PluginRegistry& registry, const PluginChoice& choice) {
  std::vector<ConfigKey> keys = core_config_keys();
  for (const auto& [kind, name] :
       {std::pair{"model", choice.model}, std::pair{"optimizer", choice.optimizer}, std::pair{"sync", choice.sync}}) {
    const auto plugin_keys = registry.config_keys(kind, name);
    keys.insert(keys.end(), plugin_keys.begin(), plugin_keys.end());
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

RankPlan plan_rank(Communicator& comm, Config config, const std::vector<std::string>& plugin_paths) {
  PluginRegistry registry(plugin_paths);  // outlives the objects its libraries made
  const PluginChoice choice = plugin_choice(config);
  config.validate(known_config_keys(registry, choice));
  take_input_shape_from_data(config);
  ParameterStore store;
  const auto model = build_model(registry, config, store);
  const auto sync = registry.create_sync(choice.sync, config);
  sync->setup(comm, store);
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

namespace {

// One rank's run: start-up agreed by all ranks, then either serving (a parameter server's
// shard) or the training loop, then the final checkpoint and figures.
class Trainer {
 public:
  Trainer(Communicator& comm, TrainOptions options, std::ostream& log)
      : comm_(comm),
        options_(std::move(options)),
        config_(options_.config),
        printable_log_(log),
        drawn_log_(options_.quiet ? null_log_ : log),
        log_(options_.quiet ? null_log_ : printable_log_),
        registry_(options_.plugin_paths),
        leader_(comm.rank() == 0) {}
  // The communicator outlives the run (mgtrain bench runs several on it).
  ~Trainer() { comm_.set_allreduce_observer(nullptr); }

  TrainResult run() {
    configure();
    build();
    // All ranks run the same config, plugins and model.
    check_agreement(comm_, {{"the resolved config and seed", flat_config(config_), '\n'},
                            {"the plugin names and versions", registry_.loaded_summary(), ';'},
                            {"the model's parameter names and shapes", parameter_layout(store_), '\n'}});
    if (!options_.resume.empty()) resume();
    prepare_run();
    if (serving_) start_serving_run();
    try {
      return trains() ? train_loop() : serve();
    } catch (const StartupError&) {
      // Every lock-step rank stops here together (a non-finite gradient): the trace shows the run up to it.
      if (trace_ && !serving_) trace_->write(comm_, true, log_);
      throw;
    }
  }

 private:
  // 1. Config and plugins: every key must be known to the core or to a loaded plugin.
  void configure() {
    // Across nodes, first of all the same build everywhere: another build may read the config,
    // the data and the messages otherwise.
    rank_hosts_ = gather_host_names(comm_);
    if (spans_nodes()) agree(comm_, [&] { check_same_build(comm_, rank_hosts_); });
    agree(comm_, [&] {
      choice_ = plugin_choice(config_);
      config_.validate(known_config_keys(registry_, choice_));
      check_core_key_ranges(config_);
      fault::configure(comm_.rank());
      take_input_shape_from_data(config_);
    });
    expand_job_id(config_, {"checkpoint.dir", "metrics.file", "metrics.tensorboard_dir", "metrics.trace"});
    comm_.set_timeout_seconds(config_.get_real("comm.timeout_s"));
    set_compute_threads();
    seed_ = static_cast<uint64_t>(config_.get_int("train.seed"));
    global_batch_ = config_.get_int("train.global_batch");
    checkpoint_dir_ = config_.get_string("checkpoint.dir");
    claim_checkpoint_dir();
    // Rank 0 writes the checkpoints, but a resume may put rank 0 on another node.
    if (spans_nodes() && options_.write_checkpoints)
      agree(comm_, [&] { check_directory_shared(comm_, rank_hosts_, checkpoint_dir_, "checkpoint.dir"); });
    claim_trace_path();
    const std::string nodes = node_summary(rank_hosts_);
    if (leader_)
      log_ << "mgtrain " << MGTRAIN_VERSION << ": " << comm_.size() << " rank(s) " << nodes << "\n"
           << "# resolved config\n"
           << config_.to_ini() << std::flush;
    choose_device();
  }

  // train.threads, at most the cores this rank may use: more only contend for them, and tens of
  // thousands make OpenMP fail to start them or crash. Said once per rank that lowers it.
  void set_compute_threads() {
    const int64_t requested = config_.get_int("train.threads");
    const int usable = kernels::usable_cpu_cores();
    if (requested > usable) {
      std::fprintf(stderr,
                   "mgtrain: warning: [rank %d] train.threads = %lld is more than the %d core(s) this rank "
                   "may use (sched_getaffinity); using %d\n",
                   comm_.rank(), static_cast<long long>(requested), usable, usable);
      std::fflush(stderr);
    }
    kernels::set_cpu_threads(static_cast<int>(std::min<int64_t>(requested, usable)));
  }

  // The checkpoint directory, before any step: it exists or can be made, takes new files, is no
  // other running job's, and holds neither another run's checkpoints nor, resuming from one of its
  // own, newer ones, unless checkpoint.overwrite lets the first checkpoint of this run remove them
  // (write_run_checkpoint): a run that fails a check before then leaves them as they are. Rank 0
  // writes the checkpoints and holds the directory's lock until the run ends.
  void claim_checkpoint_dir() {
    agree(comm_, [&] {
      if (!leader_ || !options_.write_checkpoints) return;
      checkpoint_lock_ = std::make_unique<CheckpointDirLock>(checkpoint_dir_);
      const std::string other_run = checkpoint_of_another_run(checkpoint_dir_, options_.resume);
      const std::vector<std::string> newer =
          other_run.empty() ? checkpoints_after(checkpoint_dir_, options_.resume) : std::vector<std::string>{};
      if (other_run.empty() && newer.empty()) return;
      if (config_.get_bool("checkpoint.overwrite")) {
        replaced_checkpoints_ = other_run.empty() ? newer : list_checkpoints(checkpoint_dir_);
        return;
      }
      if (!other_run.empty())
        throw IoError(
            "checkpoint.dir '" + checkpoint_dir_ + "' holds the checkpoints of another run (newest '" + other_run +
            "') and this run " +
            (options_.resume.empty() ? "starts afresh" : "resumes from '" + options_.resume + "', outside it") +
            ": its checkpoints would mix with them, pruning would delete theirs and 'latest' would move "
            "back; --resume latest continues that run, --checkpoint.overwrite=true removes its checkpoints "
            "once this run writes its first, or give another checkpoint.dir");
      std::string names;
      for (size_t i = 0; i < newer.size() && i < 5; ++i) names += (i ? ", '" : "'") + newer[i] + "'";
      if (newer.size() > 5) names += " and " + std::to_string(newer.size() - 5) + " more";
      const std::string resumed =
          options_.resume == "latest" ? resolve_resume(checkpoint_dir_, options_.resume) : options_.resume;
      throw IoError(
          "checkpoint.dir '" + checkpoint_dir_ + "' holds " + std::to_string(newer.size()) +
          " checkpoint(s) newer than '" + resumed + "', which this run resumes from" +
          (options_.resume == "latest" ? " ('latest' names it)" : "") + ": " + names +
          "; rolled back, this run's checkpoints would mix with them, pruning would delete the wrong ones "
          "and 'latest' would move back; " +
          (options_.resume == "latest" ? "--resume '" + newer.front() + "'" : std::string("--resume latest")) +
          " continues from the newest, "
          "--checkpoint.overwrite=true removes the newer ones once this run writes its first checkpoint, "
          "or give another checkpoint.dir");
    });
  }

  // Rank 0: a checkpoint of this run; the first one also removes the checkpoints that
  // checkpoint.overwrite replaces, now that the run has one of its own.
  std::string write_run_checkpoint(const CheckpointMeta& meta, Optimizer* optimizer) {
    int removed = 0;
    const std::string path = write_checkpoint(checkpoint_dir_, meta, store_, optimizer,
                                              config_.get_int("checkpoint.keep"), replaced_checkpoints_, &removed);
    if (!replaced_checkpoints_.empty()) {
      replaced_checkpoints_.clear();
      log_ << "removed " << removed << " checkpoint(s) of an earlier run in " << checkpoint_dir_
           << " (checkpoint.overwrite = true)\n"
           << std::flush;
    }
    return path;
  }

  // metrics.trace: rank 0 writes it at the end, so it checks now that it can.
  void claim_trace_path() {
    const std::string path = config_.get_string("metrics.trace");
    if (path.empty()) return;
    agree(comm_, [&] {
      if (leader_) Trace::check_writable(path, "metrics.trace", config_.values().at("metrics.trace").source);
    });
    trace_ = std::make_unique<Trace>(path, config_.get_int("metrics.trace_steps"));
  }

  // Where this rank trains (train.device): every rank the same kind. Each GPU is bound and opened
  // once the sync strategy has said which ranks train, and the communicator between the GPUs comes
  // with it (build).
  void choose_device() {
    agree(comm_, [&] { device_ = std::make_unique<TrainingDevice>(comm_, config_); });
  }

  // 2. Model, optimizer, sync, parameters, data. Everything that reads input is checked here,
  //    before any rank takes a step.
  void build() {
    bool device_sync = false;  // the sync strategy works on the step's own memory (a GPU's, through NCCL)
    agree(comm_, [&] {
      model_ = registry_.create_model(choice_.model, config_);
      optimizer_ = registry_.create_optimizer(choice_.optimizer, config_);
      check_step_matches_element_update(*registry_.create_optimizer(choice_.optimizer, config_),
                                        *registry_.create_optimizer(choice_.optimizer, config_), choice_.optimizer);
      sync_ = registry_.create_sync(choice_.sync, config_);
      serving_ = sync_->serving();
      model_->declare(store_);
      store_.finalize();
      store_.initialize(seed_);
      if (device_->own_memory() && !compilable()) device_->fall_back_to_cpu();
      if (device_->own_memory() && sync_->sharding()) keep_sharded_optimizer_on_cpu();
      device_sync = device_->own_memory() && sync_->reduces_device_memory();
      // In place on the CPU, or a strategy that works on host memory: set up on the host store,
      // over MPI (local: roles and buffers, no communication yet), before any GPU is bound, since
      // its roles say which ranks train. A GPU's step hands it each micro-batch's gradients.
      if (!device_sync) sync_->setup(comm_, store_);
    });
    // Batch norm's statistics over more than one pass get a communicator of their own, so that
    // their collectives never meet the sync strategy's.
    agree(comm_, [&] {
      if (sync_->micro_batches_are_shards() || config_.get_bool("model.sync_bn")) check_sync_bn();
    });
    if (sync_->micro_batches_are_shards() || (config_.get_bool("model.sync_bn") && comm_.size() > 1))
      statistics_comm_ = comm_.split(0, comm_.rank());
    // Each training rank's GPU, bound among the training ranks of its node (a serving rank runs
    // the optimizer on its shard on the CPU and gets none); then NCCL between the GPUs for a
    // strategy that reduces device memory. The answers depend on the config alone, so every rank
    // enters these collectives together or none does.
    agree(comm_, [&] { device_->open(comm_, device_sync || trains()); });
    if (!device_->warning().empty())
      std::fprintf(stderr, "mgtrain: warning: [rank %d] %s\n", comm_.rank(), device_->warning().c_str());
    if (device_sync) agree(comm_, [&] { device_->connect(comm_); });
    agree(comm_, [&] {
      if (device_sync) {
        // The sync strategy works on the device's copy of the parameters, through its communicator.
        sync_->setup(device_->communicator(), device_->step_store(store_));
      }
      optimizer_->setup(optimizer_size());
      if (config_.get_string("optimizer.weight_decay_on") == "matrices")
        optimizer_->set_decay_mask(matrices_decay_mask(store_, *sync_, trains(), choice_.sync));
      accum_ = sync_->accumulation_steps();
      const int64_t train_world = this->train_world();
      micro_batch_ = micro_batch_rows(global_batch_, train_world, accum_);
      // Deterministic micro-shards through a model of row-wise layers: one pass for all of them
      // (in place on the CPU; a GPU's step runs each micro-shard as its own micro-batch).
      shards_per_pass_ = !device_->own_memory() && accum_ > 1 && sync_->micro_batches_are_shards() &&
                                 model_->shard_batchable(micro_batch_, accum_)
                             ? accum_
                             : 1;
      const std::string train_path = config_.get_string("data.train");
      if (!trains()) {
        // A serving rank reads no data; it needs only the epoch length, for the schedule.
        per_epoch_ = data::open_data_info(train_path, config_.get_string("data.x_name"),
                                          config_.get_string("data.y_name"), model_->sequence_length(), choice_.model)
                         .num_samples /
                     global_batch_;
      } else {
        open_reader(static_cast<int>(train_world));
      }
      check_training_options();
      check_batch_statistics();
      check_test_file();
      schedule_.emplace(config_.get_string("train.lr_schedule"), scaled_learning_rate(),
                        config_.get_int("train.warmup_steps"), config_.get_int("train.epochs") * per_epoch_);
      if (trains()) compile_step();
    });
    if (leader_ && !serving_) log_optimizer_state();
    if (leader_ && config_.get_string("optimizer.lr_scaling") == "linear")
      log_ << "learning rate " << scaled_learning_rate() << " = optimizer.lr " << optimizer_->learning_rate()
           << " x train.global_batch " << global_batch_ << " / optimizer.lr_base_batch "
           << config_.get_int("optimizer.lr_base_batch") << " (optimizer.lr_scaling = linear)\n"
           << std::flush;
    if (leader_ && device_->own_memory()) {
      const std::string sync_path = !device_sync ? "sync '" + choice_.sync + "' on host memory, " + comm_.backend() +
                                                       " between ranks, each micro-batch's gradients through the host"
                                    : comm_.size() == 1 ? std::string("one rank")
                                                        : device_->communicator().backend() + " between ranks";
      log_ << "device: " << device_kind_name(device_->kind()) << " ("
           << (device_->kind() == DeviceKind::gpu ? "rank 0 on " + device_->describe() : device_->describe()) << ", "
           << sync_path << ")\n"
           << std::flush;
    }
  }

  // The learning rate the schedule starts from: optimizer.lr, or with optimizer.lr_scaling =
  // linear, optimizer.lr x global batch / optimizer.lr_base_batch (Goyal et al., 2017).
  double scaled_learning_rate() const {
    const double lr = optimizer_->learning_rate();
    if (config_.get_string("optimizer.lr_scaling") != "linear") return lr;
    return lr * static_cast<double>(global_batch_) / static_cast<double>(config_.get_int("optimizer.lr_base_batch"));
  }

  // Clipping needs the one reduced gradient every rank holds, and an evaluation mid-run every
  // training rank at the same step with the same parameters: neither exists with an asynchronous
  // strategy (a parameter server), whose workers push their own gradients at their own pace.
  void check_training_options() {
    if (!serving_) return;
    for (const char* key : {"optimizer.clip_norm", "train.eval_every_epochs"}) {
      if (config_.get_real(key) == 0) continue;
      throw ConfigError(std::string(key) + " = " + config_.get_string(key) +
                        " is not supported with sync.name = " + choice_.sync +
                        ": its workers push their own gradients asynchronously, with no reduced gradient to clip "
                        "nor a step at which all ranks hold the same parameters; set it to 0");
    }
  }

  // Deterministic mode sums batch statistics over all of a rank's micro-shards in one pass, which
  // the step in device memory (a GPU's) does not make: it runs one micro-shard a pass. Whether the
  // model normalises by batch statistics at all is asked of the model itself: one training forward
  // of a row of zeros, stopped at its first sum.
  void check_batch_statistics() {
    if (!trains() || !sync_->micro_batches_are_shards() || !device_->own_memory() || accum_ == 1) return;
    struct Found {};
    struct Probe final : BatchStatistics {
      void sum(Ops&, const float*, int64_t, int64_t, float*, double*) override { throw Found{}; }
    } probe;
    Shape one_row = {1};
    for (int64_t d : reader_->info().sample_shape) one_row.push_back(d);
    Tensor zeros(one_row);
    StepContext ctx;
    ctx.batch_statistics = &probe;
    ctx.pass = 1;          // not a first pass: nothing would move running statistics
    ctx.first_sample = 1;  // nor a pass holding the global batch's first row
    try {
      model_->forward(zeros, ctx);
      return;
    } catch (const Found&) {
    }
    throw ConfigError(
        "sync.deterministic = true: the model normalises by batch statistics, which deterministic "
        "mode sums over every micro-shard of the global batch, so each rank's " +
        std::to_string(accum_) +
        " micro-shards must go through one pass; the step in device memory (a GPU's) runs one "
        "micro-shard a pass: train.device = cpu runs them together, or set sync.micro_shards to the "
        "number of ranks (" +
        std::to_string(train_world()) + ")");
  }

  // Statistics over the whole batch need every rank at the same pass: not so with an asynchronous
  // strategy, whose serving ranks take no pass at all.
  void check_sync_bn() {
    if (!serving_) return;
    throw ConfigError("model.sync_bn = true is not supported with sync.name = " + choice_.sync +
                      ": its workers take their steps at their own pace, so no pass sees every rank's rows; "
                      "set it to false (batch statistics per rank)");
  }

  // The test file is read by rank 0 at the end (and with train.eval_every_epochs after epochs, by
  // every training rank): those ranks check it now.
  void check_test_file() {
    if (!leader_ && !(trains() && config_.get_int("train.eval_every_epochs") > 0)) return;
    check_test_data(config_, *model_, micro_batch_);
  }

  // Whether the GPU path can run this model and optimizer (it runs every sync strategy). When it
  // cannot, asking for it (train.device = gpu) is an error; with auto the job trains on the CPU and
  // says why. The answer depends on the config alone, so every rank gives the same.
  bool compilable() {
    try {
      check_compilable(*model_, *optimizer_, choice_.model, choice_.optimizer);
      return true;
    } catch (const ConfigError& e) {
      const std::string asked = config_.get_string("train.device");
      if (asked == "gpu" || asked == "emulated_gpu") throw;
      if (leader_ && asked == "auto" && device_->kind() == DeviceKind::gpu)
        log_ << "warning: training on the CPU (train.device = auto): " << e.what() << "\n" << std::flush;
      return false;
    }
  }

  void compile_step() {
    CompiledStepOptions o;
    o.sample_shape = reader_->info().sample_shape;
    o.classes = model_->output_shape(micro_shape_).back();
    o.pass_rows = micro_batch_ * shards_per_pass_;
    o.micro_batches_per_pass = shards_per_pass_;
    o.accumulation = accum_;
    o.labels_per_row = labels_per_sample_;
    // The mean over every label of the global batch: a language model's every token.
    o.grad_scale = 1.0f / static_cast<float>(global_batch_ * labels_per_sample_);
    o.label_smoothing = static_cast<float>(config_.get_real("train.label_smoothing"));
    o.clip_norm = static_cast<float>(config_.get_real("optimizer.clip_norm"));
    // The steps whose figures are logged (train_loop's log_interval).
    o.norm_every = config_.get_int("train.log_every");
    o.last_step = std::min(config_.get_int("train.max_steps") > 0 ? config_.get_int("train.max_steps")
                                                                  : config_.get_int("train.epochs") * per_epoch_,
                           config_.get_int("train.epochs") * per_epoch_);
    o.record = config_.get_bool("gpu.cuda_graphs") && device_->can_record();
    o.bf16 = config_.get_string("gpu.precision") == "bf16";
    o.timeout_s = config_.get_real("comm.timeout_s");
    o.seed = seed_;
    o.first_sample = train_rank() * reader_->local_batch();
    o.rank = comm_.rank();
    // Two steps in flight keep the GPU from waiting for the host between steps. The update of the
    // second is then set before the first is known to have applied its own, exact unless a step is
    // skipped: so not with train.nonfinite = skip.
    o.pipeline_depth = config_.get_string("train.nonfinite") == "skip" ? 1 : 2;
    // Where a non-finite gradient came from: on a GPU found when the step's figures come back (in
    // place, the CPU, right after the step: run_step). Lock-step ranks all see it at once.
    o.diagnose_nonfinite = lockstep();
    if (device_->own_memory() && !sync_->reduces_device_memory()) o.host_sync = &store_;
    o.statistics_comm = statistics_comm_.get();
    o.deterministic_statistics = sync_->micro_batches_are_shards();
    o.sync_seconds = &phases_.sync;
    o.update_seconds = &phases_.optimizer;
    o.trace = traced();
    step_ = &device_->compile(*model_, store_, *optimizer_, *sync_, o);
  }

  void open_reader(int train_world) {
    data::ReaderOptions ro = run_reader_options(config_, *model_, choice_.model, train_rank(), train_world);
    // A rank bound to one core (mpirun's default for up to two ranks) reads while its step waits,
    // instead of when the scheduler lets the thread preempt the step. On a GPU the step's thread
    // mostly waits for the device: the reader runs then anyway.
    ro.share_core = device_->kind() == DeviceKind::cpu && kernels::usable_cpu_cores() == 1;
    if (kernels::Backend* backend = device_->kind() == DeviceKind::gpu ? &device_->backend() : nullptr) {
      // Pinned prefetch slots: the copies to the GPU run asynchronously, beside the step in flight.
      ro.allocate_slot = [backend](size_t bytes) { return backend->allocate_host(bytes); };
      ro.release_slot = [backend](void* ptr) { backend->release_host(ptr); };
    }
    if (trace_)
      ro.on_batch_read = [buffer = trace_->reader_thread()](auto begin, auto end, int64_t batch) {
        buffer->record("read batch", begin, end, "batch", batch);
      };
    reader_ = data::open_batch_reader(ro);
    per_epoch_ = reader_->batches_per_epoch();
    labels_per_sample_ = reader_->info().labels_per_sample;
    micro_shape_ = {micro_batch_ * shards_per_pass_};
    for (int64_t d : reader_->info().sample_shape) micro_shape_.push_back(d);
    check_model_takes(*model_, choice_.model, reader_->info(), micro_shape_);
  }

  // 4. Resume: rank 0 reads the checkpoint, every rank receives its state.
  void resume() {
    agree(comm_, [&] {
      if (leader_) {
        load_resume_checkpoint();
        continue_at_the_same_sample();
        // The strategy that wrote it kept its own counters: this run's strategy may take them
        // (start_serving_run), its checkpoints keep their own.
        resumed_sync_ = std::move(meta_.sync);
        meta_.sync = SyncState{};
        if (serving_ && resumed_sync_.strategy == choice_.sync) serving_position(resumed_sync_, resumed_from_);
      }
    });
    int64_t position[4] = {meta_.step, meta_.epoch, meta_.batch_in_epoch, optimizer_->step_count()};
    comm_.broadcast(position, sizeof(position), 0);
    meta_.step = position[0];
    meta_.epoch = position[1];
    meta_.batch_in_epoch = position[2];
    optimizer_->set_step_count(position[3]);
    // Parameters the node's ranks share (a shared update, one node) are rank 0's already.
    if (!store_.params_placed()) comm_.broadcast(store_.params_data(), store_.flat_size() * sizeof(float), 0);
    if (store_.buffers_size() > 0) comm_.broadcast(store_.buffers_data(), store_.buffers_size() * sizeof(float), 0);
    // A serving strategy's ranks hold parts of the optimizer state: it hands them out (start).
    if (!serving_) broadcast_optimizer_state();
    if (!serving_) restore_sync_state();
    if (leader_) {
      log_ << "resumed from step " << meta_.step << " (epoch " << meta_.epoch + 1 << ", batch " << meta_.batch_in_epoch
           << ")\n";
      if (!resume_note_.empty()) log_ << resume_note_ << "\n";
    }
  }

  // Rank 0: the checkpoint's position is a sample offset in its epoch, checked against the data;
  // under another train.global_batch the run continues from that same sample, or is refused.
  void continue_at_the_same_sample() {
    const ResumePosition at =
        resume_position(resumed_from_, meta_, global_batch_, reader_->info().num_samples, per_epoch_);
    meta_.epoch = at.epoch;
    meta_.batch_in_epoch = at.batch_in_epoch;
    resume_note_ = at.note;
  }

  // Rank 0: the checkpoint --resume names, or with checkpoint.resume_fallback and "latest", the
  // newest one in the directory that loads, each refused one named in a warning. Without the
  // fallback, its error suggests it only where it would help: resuming from "latest", with an older
  // checkpoint of the directory that loads.
  void load_resume_checkpoint() {
    const bool latest = options_.resume == "latest";
    const bool fallback = latest && config_.get_bool("checkpoint.resume_fallback");
    std::string path;
    try {
      path = resolve_resume(checkpoint_dir_, options_.resume);
      meta_ = load_checkpoint(path, store_, resume_optimizer());
      resumed_from_ = path;
      return;
    } catch (const Error& e) {
      if (!fallback) {
        const std::string older = latest ? load_newest_checkpoint_but(path, nullptr) : "";
        if (older.empty()) throw;
        throw IoError(std::string(e.what()) + "; checkpoint.resume_fallback = true would resume from '" + older +
                      "', the newest other checkpoint of '" + checkpoint_dir_ + "' that loads");
      }
      log_ << "warning: " << e.what() << "\n" << std::flush;
    }
    const std::string older = load_newest_checkpoint_but(path, &log_);
    if (older.empty())
      throw IoError("--resume latest: no checkpoint in '" + checkpoint_dir_ +
                    "' loads (checkpoint.resume_fallback tried each, newest first; see the warnings above)");
    log_ << "warning: checkpoint.resume_fallback: resuming from " << older << " instead\n" << std::flush;
  }

  // Rank 0: loads the newest checkpoint of the directory other than `skipped` that loads and
  // returns its path, "" when none does; each refused one is a warning on `warnings` where given.
  std::string load_newest_checkpoint_but(const std::string& skipped, std::ostream* warnings) {
    for (const std::string& older : list_checkpoints(checkpoint_dir_)) {
      if (older == skipped) continue;
      try {
        meta_ = load_checkpoint(older, store_, resume_optimizer());
        resumed_from_ = older;
        return older;
      } catch (const Error& e) {
        if (warnings) *warnings << "warning: " << e.what() << "\n" << std::flush;
      }
    }
    return "";
  }

  void prepare_run() {
    // Under the directory's lock (claim_checkpoint_dir), so no running job's files are touched.
    agree(comm_, [&] {
      if (!checkpoint_lock_) return;
      const int removed = checkpoint_lock_->remove_leftover_temporaries();
      if (removed > 0)
        log_ << "removed " << removed << " temporary file(s) of an interrupted checkpoint write in " << checkpoint_dir_
             << "\n";
    });
    epochs_ = config_.get_int("train.epochs");
    const int64_t max_steps = config_.get_int("train.max_steps");
    total_steps_ = max_steps > 0 ? std::min(max_steps, epochs_ * per_epoch_) : epochs_ * per_epoch_;
    log_every_ = config_.get_int("train.log_every");
    skip_nonfinite_ = config_.get_string("train.nonfinite") == "skip";
    // bench and verify (quiet) time or compare the steps alone.
    eval_every_ = config_.get_string("data.test").empty() || options_.quiet || !trains()
                      ? 0
                      : config_.get_int("train.eval_every_epochs");
    nan_step_ = fault::nan_step(comm_.rank());
    // Training ranks among themselves: per-step figures and checkpoint barriers stay off the
    // serving ranks, which are busy serving.
    train_comm_ = comm_.split(trains() ? 0 : 1, comm_.rank());
    meta_.seed = seed_;
    meta_.global_batch = global_batch_;
    meta_.world_size = comm_.size();
    meta_.mgtrain_version = MGTRAIN_VERSION;
    meta_.plugins = registry_.loaded_summary();
    meta_.plugin_paths = registry_.loaded_paths();
    meta_.config_ini = config_.to_ini();
    result_.gradient_floats = store_.flat_size();
    result_.device = device_kind_name(device_->kind());
    if (step_) step_->upload_state(store_);
    if (trace_) {
      trace_->start(comm_);
      // The bucketed all-reduces on host memory; NCCL's run inside the device's step.
      comm_.set_allreduce_observer(trace_.get());
    }
  }

  // Every training rank's own state of a lock-step sync strategy (checkpoint_state), on rank 0 as
  // the arrays "<name>.rank<R>" of the checkpoint's /sync; empty when the strategy keeps none.
  // Every training rank calls it at each checkpoint.
  SyncState gather_sync_state() {
    std::vector<char> mine;
    std::string why;
    try {
      mine = pack_sync_arrays(sync_->checkpoint_state(), comm_.rank());
    } catch (const std::exception& e) {
      why = e.what();
    }
    // A rank that cannot give its state says so with a size of -1: every rank then stops.
    const int64_t my_size = why.empty() ? static_cast<int64_t>(mine.size()) : -1;
    std::vector<int64_t> sizes(static_cast<size_t>(train_comm_->size()));
    train_comm_->allgather(&my_size, sizes.data(), sizeof(int64_t));
    if (!why.empty()) throw Error(why);
    for (size_t r = 0; r < sizes.size(); ++r)
      if (sizes[r] < 0)
        throw Error("rank " + std::to_string(r) + " could not give the sync strategy's state for the checkpoint");
    SyncState state;
    if (std::all_of(sizes.begin(), sizes.end(), [](int64_t n) { return n == 0; })) return state;
    if (!leader_) {
      if (my_size > 0) train_comm_->send(mine.data(), mine.size(), 0, kSyncStateTag);
      return state;
    }
    state.strategy = choice_.sync;
    for (int r = 0; r < train_comm_->size(); ++r) {
      std::vector<char> blob = r == 0 ? mine : std::vector<char>(static_cast<size_t>(sizes[r]));
      if (r > 0 && !blob.empty()) train_comm_->recv(blob.data(), blob.size(), r, kSyncStateTag);
      for (auto& array : unpack_sync_arrays(blob))
        state.arrays[array.name + ".rank" + std::to_string(r)] = std::move(array.values);
    }
    return state;
  }

  // On resume: every training rank's arrays back to it (restore_state), when the checkpoint was
  // written by a strategy of this name.
  void restore_sync_state() {
    int64_t saved_ranks = 0;
    if (leader_ && resumed_sync_.strategy == choice_.sync && !resumed_sync_.arrays.empty())
      saved_ranks = meta_.world_size;
    comm_.broadcast(&saved_ranks, sizeof(saved_ranks), 0);
    if (saved_ranks == 0) return;
    std::vector<SyncStateArray> mine;
    if (leader_) {
      for (int r = comm_.size() - 1; r >= 0; --r) {
        const std::string suffix = ".rank" + std::to_string(r);
        std::vector<SyncStateArray> arrays;
        for (const auto& [name, values] : resumed_sync_.arrays)
          if (name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0)
            arrays.push_back({name.substr(0, name.size() - suffix.size()), values});
        if (r == 0) {
          mine = std::move(arrays);
          break;
        }
        const std::vector<char> blob = pack_sync_arrays(arrays, r);
        const int64_t size = static_cast<int64_t>(blob.size());
        comm_.send(&size, sizeof(size), r, kSyncStateTag);
        if (size > 0) comm_.send(blob.data(), blob.size(), r, kSyncStateTag);
      }
    } else {
      int64_t size = 0;
      comm_.recv(&size, sizeof(size), 0, kSyncStateTag);
      std::vector<char> blob(static_cast<size_t>(size));
      if (size > 0) comm_.recv(blob.data(), blob.size(), 0, kSyncStateTag);
      mine = unpack_sync_arrays(blob);
    }
    sync_->restore_state(mine, static_cast<int>(saved_ranks));
  }
  static constexpr int kSyncStateTag = 7301;

  // Every rank of a serving strategy's run: where it starts (a resumed run's position, the servers'
  // parts of the optimizer state) and how often rank 0 checkpoints it.
  void start_serving_run() {
    ServingStart start;
    start.step = meta_.step;
    start.checkpoint_every = options_.write_checkpoints ? config_.get_int("checkpoint.every_steps") : 0;
    start.resumed = !options_.resume.empty();
    if (leader_ && start.resumed && resumed_sync_.strategy == choice_.sync)
      start.saved = serving_position(resumed_sync_, resumed_from_);
    serving_->start(*optimizer_, start);
  }

  // A serving run's position as its checkpoints keep it (/sync), and back.
  static SyncState sync_counters(const std::string& strategy, const ServingPosition& at) {
    return {strategy, {{"updates", {at.updates}}, {"worker_steps", at.worker_steps}}, {}};
  }
  // Checked: every push applied is one worker's step, so the steps add up to the updates.
  static ServingPosition serving_position(const SyncState& sync, const std::string& path) {
    const auto value = [&](const char* name) {
      const auto it = sync.counters.find(name);
      if (it == sync.counters.end() || it->second.empty())
        throw DataError("checkpoint '" + path + "': '/sync' of strategy '" + sync.strategy + "' has no dataset '" +
                        name + "'");
      return it->second;
    };
    ServingPosition at;
    at.updates = value("updates")[0];
    at.worker_steps = value("worker_steps");
    int64_t sum = 0;
    for (int64_t s : at.worker_steps) sum += s;
    if (sum != at.updates || *std::min_element(at.worker_steps.begin(), at.worker_steps.end()) < 0)
      throw DataError("checkpoint '" + path + "': '/sync/worker_steps' add up to " + std::to_string(sum) +
                      " steps, '/sync/updates' = " + std::to_string(at.updates) + ": expected equal, none negative");
    return at;
  }

  TrainResult serve() {
    ServeContext context;
    context.steps_per_worker = total_steps_ - meta_.step;
    context.learning_rate = [&](int64_t step) { return schedule_->at(step); };
    // <dir>/metrics.jsonl -> <dir>/metrics.rank<R>.jsonl, by whole lines and checked as the main
    // metrics file is: a file that cannot be written is a warning, and the run serves on without it.
    const std::filesystem::path main_file = metrics_path(config_, checkpoint_dir_);
    const std::string path = (main_file.parent_path() / (main_file.stem().string() + ".rank" +
                                                         std::to_string(comm_.rank()) + main_file.extension().string()))
                                 .string();
    std::error_code ec;
    std::filesystem::create_directories(main_file.parent_path(), ec);
    std::unique_ptr<AppendFile> metrics;
    const auto metrics_off = [&](const std::string& why) {
      std::fprintf(stderr, "mgtrain: warning: [rank %d] %s; metrics are off for the rest of the run\n", comm_.rank(),
                   why.c_str());
      metrics.reset();
    };
    try {
      metrics = std::make_unique<AppendFile>(path, "metrics file");
    } catch (const IoError& e) {
      metrics_off(e.what());
    }
    context.write_metrics = [&](const std::string& json) {
      if (!metrics) return;
      const std::string why = metrics->append(json + "\n");
      if (!why.empty()) metrics_off("metrics file '" + path + "' cannot be written: " + why);
    };
    context.log_every = log_every_;
    TraceSpan serve_span(traced(), "serve");
    serving_->serve(*optimizer_, context);
    serve_span.end();
    serving_->gather_state(*optimizer_);
    result_.lost_ranks = serving_->lost_ranks();
    if (result_.lost_ranks.empty()) comm_.barrier();  // the final checkpoint is written
    if (trace_) trace_->write(comm_, result_.lost_ranks.empty(), log_);
    return result_;
  }

  TrainResult train_loop() {
    if (leader_ && !options_.quiet) add_observers();
    const int64_t checkpoint_every = config_.get_int("checkpoint.every_steps");
    const int64_t start_step = meta_.step;
    // A resumed asynchronous worker goes on from its own step, a few ahead of or behind the run's.
    const int64_t first_step = serving_ ? serving_->first_step(start_step) : start_step;
    int64_t step = first_step;
    run_position_ = meta_.epoch * per_epoch_ + meta_.batch_in_epoch - start_step;
    const int64_t first_position = std::max<int64_t>(0, run_position_ + first_step);
    reader_->start(first_position / per_epoch_, first_position % per_epoch_);
    if (leader_ && step >= total_steps_)
      log_ << "nothing to train: " << resumed_from_ << " is at step " << step << ", and the run ends at step "
           << total_steps_ << " (train.epochs x " << per_epoch_ << " steps/epoch, or train.max_steps)\n"
           << std::flush;
    else if (leader_)
      log_ << "training " << total_steps_ - step << " steps: " << per_epoch_ << " steps/epoch, global batch "
           << global_batch_ << " (" << train_comm_->size() << " training ranks x " << micro_batch_ << " x " << accum_
           << " micro-batches"
           << (shards_per_pass_ > 1 ? ", deterministic micro-shards " + std::to_string(shards_per_pass_) + " to a pass"
                                    : std::string())
           << ")\n"
           << std::flush;

    interval_start_ = run_start_ = Clock::now();
    for (auto& o : observers_) o->on_run_start({epochs_, per_epoch_, start_step, total_steps_});
    bool stopped = false;
    int64_t epoch = meta_.epoch;  // of the last step taken
    // An asynchronous run ends when the servers have applied all its pushes: a fast rank may take
    // over a slow one's share, up to every step of the run.
    const int64_t step_limit =
        lockstep() ? total_steps_ : start_step + (total_steps_ - start_step) * train_comm_->size();
    const int slow_ms = fault::slowdown_ms(comm_.rank());
    while (step < step_limit && !(serving_ && serving_->finished())) {
      if (trace_) trace_->at_step(step - start_step);
      TraceSpan step_span(traced(), "step", "step", step + 1);
      const auto step_start = Clock::now();
      if (slow_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(slow_ms));
      comm_.set_step(step + 1);
      train_comm_->set_step(step + 1);
      TraceSpan wait_span(traced(), "data wait");
      data::Batch batch = reader_->next();
      wait_span.end();
      epoch = batch.epoch;
      interval_.wait += batch.wait_seconds;
      phases_.data_wait += batch.wait_seconds;
      const double sync_before = phases_.sync;
      run_step(batch, step);
      step_span.end();
      interval_.busy += seconds_since(step_start) - (phases_.sync - sync_before);
      ++interval_.steps;
      ++step;
      if (step - start_step == options_.timing_warmup_steps) {
        run_start_ = Clock::now();
        phases_ = StepPhases{};
      }
      interval_.samples += global_batch_;
      meta_.step = step;
      meta_.epoch = batch.epoch + (batch.batch_in_epoch + 1 == per_epoch_ ? 1 : 0);
      meta_.batch_in_epoch = (batch.batch_in_epoch + 1) % per_epoch_;
      if (step % log_every_ == 0 || step == total_steps_) {
        TraceSpan metrics_span(traced(), "metrics", "step", step);
        finish_steps();
        log_interval(step, epoch);
      }
      for (auto& o : observers_) o->on_step_end(step, epoch);
      if (meta_.batch_in_epoch == 0) {
        for (auto& o : observers_) o->on_epoch_end(step, epoch);
        if (eval_every_ > 0 && (epoch + 1) % eval_every_ == 0) evaluate_epoch(step, epoch);
      }
      if (stop_agreed(step)) {
        stopped = true;
        break;
      }
      if (!lockstep() && leader_ && options_.write_checkpoints && checkpoint_every > 0) write_served_checkpoint();
      if (lockstep() && options_.write_checkpoints && checkpoint_every > 0 && step % checkpoint_every == 0 &&
          step < total_steps_) {
        TraceSpan checkpoint_span(traced(), "checkpoint", "step", step);
        download_step_state();
        meta_.sync = gather_sync_state();
        const auto whole_state = gather_sharded_optimizer_state();
        if (leader_) {
          result_.checkpoint = write_run_checkpoint(meta_, whole_state ? whole_state.get() : optimizer_.get());
        } else {
          for (auto phase : {fault::Phase::checkpoint_before_data, fault::Phase::checkpoint_after_data,
                             fault::Phase::checkpoint_before_rename})
            fault::at(phase, step);
        }
        // Nobody runs ahead of a checkpoint that may fail: its error ends every rank.
        train_comm_->barrier();
      }
    }
    // The device's parameters and optimizer state, for the final checkpoint and the test set.
    download_step_state();
    for (auto& o : observers_) o->on_run_end({step, epoch, stopped});
    if (stopped && leader_)
      log_ << "stopped by signal " << (agreed_stop_signal_ != 0 ? agreed_stop_signal_ : stop_signal()) << " at step "
           << step
           << (lockstep() ? ": writing a final checkpoint"
                          : " of rank 0: writing the servers' state as a final checkpoint")
           << "; resubmit with --resume latest to continue\n"
           << std::flush;
    result_.stopped = stopped;
    return finish(start_step, step);
  }

  // Rank 0 of an asynchronous run, between its steps: a checkpoint of the servers' state once all
  // of one moment has come (the others train on meanwhile). This rank's own parameters, which its
  // next step computes on, are put aside while the snapshot's are written.
  void write_served_checkpoint() {
    served_params_.resize(store_.flat_size());
    ServingPosition at;
    if (!serving_->take_snapshot(served_params_.data(), *optimizer_, at)) return;
    TraceSpan checkpoint_span(traced(), "checkpoint", "updates", at.updates);
    CheckpointMeta meta = served_meta(at);
    float* params = store_.params_data();
    std::swap_ranges(params, params + store_.flat_size(), served_params_.begin());
    try {
      result_.checkpoint = write_run_checkpoint(meta, optimizer_.get());
    } catch (...) {
      std::swap_ranges(params, params + store_.flat_size(), served_params_.begin());
      throw;
    }
    std::swap_ranges(params, params + store_.flat_size(), served_params_.begin());
  }

  // The checkpoint metadata of an asynchronous run at `at`: its step is the updates per worker,
  // its data position that many global batches from the run's start.
  CheckpointMeta served_meta(const ServingPosition& at) const {
    CheckpointMeta meta = meta_;
    // A push already on its way when the run's count was reached is applied too.
    meta.step = std::min(at.updates / train_world(), total_steps_);
    const int64_t position = std::max<int64_t>(0, run_position_ + meta.step);
    meta.epoch = position / per_epoch_;
    meta.batch_in_epoch = position % per_epoch_;
    meta.sync = sync_counters(choice_.sync, at);
    return meta;
  }

  // The model after epoch `epoch` on the test file, every training rank evaluating its share on
  // the host (a GPU rank's parameters downloaded first) and the sums added up, so no rank waits
  // alone. Rank 0 says it and tells its observers. Its time is left out of the interval's rate.
  void evaluate_epoch(int64_t step, int64_t epoch) {
    TraceSpan span(traced(), "evaluation", "epoch", epoch + 1);
    const auto start = Clock::now();
    download_step_state();
    // Batch norm's running statistics move on rank 0 only (make_batch_norm2d): every rank
    // evaluates with those.
    if (store_.buffers_size() > 0)
      train_comm_->broadcast(store_.buffers_data(), store_.buffers_size() * sizeof(float), 0);
    const std::string test_path = config_.get_string("data.test");
    const EvalSums mine =
        evaluate_share(*model_, test_path, config_.get_string("data.x_name"), config_.get_string("data.y_name"),
                       micro_batch_, train_rank(), train_comm_->size());
    double sums[4] = {mine.loss_sum, mine.correct, mine.samples, mine.tokens};
    train_comm_->allreduce_sum(sums, 4);
    const EvalResult test = eval_result({sums[0], sums[1], sums[2], sums[3]});
    if (leader_) {
      log_ << "epoch " << epoch + 1 << ": " << test_line(test, test_path) << std::flush;
      for (auto& o : observers_) o->on_evaluation({step, epoch, test.accuracy, test.loss, test.samples, test_path});
    }
    interval_start_ += Clock::now() - start;
  }

  // Whether the run should stop now because some rank was asked to (scancel, a time limit).
  // Lock-step ranks agree every few steps, so they all stop after the same step.
  // The ranks agree on the signal too (the largest any was sent), so the log names it even where
  // rank 0's own copy of it had not arrived yet (scancel signals each node's tasks separately).
  bool stop_agreed(int64_t step) {
    if (!lockstep()) return stop_requested();
    if (step % kStopCheckEvery != 0) return false;
    int64_t signal = stop_signal();
    train_comm_->allreduce_max(&signal, 1);
    agreed_stop_signal_ = static_cast<int>(signal);
    return signal != 0;
  }
  int agreed_stop_signal_ = 0;
  static constexpr int64_t kStopCheckEvery = 10;

  // The step: stage this step's rows, take the previous step's figures (on a GPU while the copy
  // runs), then launch it (on the CPU: run it).
  void run_step(data::Batch& batch, int64_t step) {
    MGT_CHECK(batch.rows == step_->step_rows(), Error,
              "the step takes full batches: batch of " + std::to_string(batch.rows) + " rows, expected " +
                  std::to_string(step_->step_rows()));
    // Test-only fault: a NaN in this rank's first sample, which reaches every rank's gradient.
    if (step + 1 == nan_step_) batch.x.data()[0] = std::numeric_limits<float>::quiet_NaN();
    const auto t = Clock::now();
    const double host_phases_before = phases_.sync + phases_.optimizer;
    absorb(step_->begin(batch.x.data(), batch.y));
    step_->launch(step, schedule_->at(step));
    // On the CPU the step is done and its rows still here: where a non-finite gradient came from.
    if (step_->launched_nonfinite() && lockstep()) diagnose_nonfinite(step);
    // The rest of the step is compute: forward, loss and backward (on a GPU: staging and enqueueing).
    phases_.compute += seconds_since(t) - (phases_.sync + phases_.optimizer - host_phases_before);
  }

  // Waits for every step in flight, taking its figures.
  void finish_steps() {
    for (StepFigures f = step_->finish(); f.valid; f = step_->finish()) absorb(f);
  }

  // The step's parameters and optimizer state into the host store (on a GPU), once every step is
  // done.
  void download_step_state() {
    finish_steps();
    step_->download_state(store_);
  }

  // Every training rank looks at the step it just ran again, alone, and rank 0 learns from each
  // whose own gradient held NaN or Inf the first layer whose output did and the first parameter
  // (in backward order) whose gradient did. A fixed-size record a rank: names are cut at 255 bytes.
  void diagnose_nonfinite(int64_t step) {
    const NonFiniteOrigin origin =
        device_->own_memory() ? step_->collected_nonfinite_origin(step) : step_->diagnose_nonfinite();
    struct Record {
      char gradient;
      char layer[256];
      char parameter[256];
    } mine{};
    mine.gradient = origin.gradient ? 1 : 0;
    std::snprintf(mine.layer, sizeof mine.layer, "%s", origin.layer.c_str());
    std::snprintf(mine.parameter, sizeof mine.parameter, "%s", origin.parameter.c_str());
    std::vector<Record> all(static_cast<size_t>(train_comm_->size()));
    train_comm_->allgather(&mine, all.data(), sizeof(Record));
    nonfinite_ = NonFiniteFigures{};
    nonfinite_.step = step + 1;
    nonfinite_.diagnosed = true;
    for (size_t r = 0; r < all.size(); ++r)
      if (all[r].gradient) nonfinite_.ranks.push_back({static_cast<int>(r), all[r].layer, all[r].parameter});
  }

  // Where the non-finite gradient of step `step` (1-based) came from, for its message.
  std::string nonfinite_origin(int64_t step) const {
    if (nonfinite_.step != step || !nonfinite_.diagnosed) return "NaN or Inf on some rank";
    if (nonfinite_.ranks.empty()) return "every rank's own gradient was finite: their sum overflowed the float range";
    std::string text;
    for (const auto& origin : nonfinite_.ranks) {
      text += (text.empty() ? "" : "; ") + std::string("rank ") + std::to_string(origin.rank) + "'s gradient";
      if (!origin.layer.empty()) text += ", first the output of layer '" + origin.layer + "'";
      text += ", first parameter in backward order '" + origin.parameter + "'";
    }
    return text;
  }

  // A finished step's figures into the interval; a non-finite gradient ends the run or is counted
  // as skipped (the step already skipped its update), with a metrics record either way.
  void absorb(const StepFigures& f) {
    if (!f.valid) return;
    interval_.loss += f.loss_sum;
    interval_.correct += static_cast<double>(f.correct);
    interval_.grad_norm = f.grad_norm;  // figures come in launch order: the last step's stays
    if (!f.nonfinite) return;
    const int64_t step = f.step + 1;
    // A GPU's step found where it came from as its figures came back: every rank says so now.
    if (device_->own_memory() && lockstep() && nonfinite_.step != step) diagnose_nonfinite(f.step);
    if (nonfinite_.step != step) nonfinite_ = NonFiniteFigures{step};
    nonfinite_.skipped = skip_nonfinite_;
    for (auto& o : observers_) o->on_nonfinite(nonfinite_);
    if (!skip_nonfinite_)
      throw StartupError("non-finite gradient at step " + std::to_string(step) + " (" + nonfinite_origin(step) +
                             "); train.nonfinite = skip skips such steps",
                         leader_);
    ++result_.skipped_steps;
    if (leader_)
      log_ << "warning: non-finite gradient at step " << step << " (" << nonfinite_origin(step) << "): step skipped\n"
           << std::flush;
  }

  // Rank 0's observers, in the order they report: the slow-rank warning and the progress output
  // on the log, then the metrics file and TensorBoard.
  void add_observers() {
    observers_.push_back(make_slow_rank_warning(log_));
    observers_.push_back(make_progress_observer(drawn_log_, config_.get_string("train.progress")));
    observers_.push_back(make_metrics_file(metrics_path(config_, checkpoint_dir_)));
    const std::string tensorboard_dir = config_.get_string("metrics.tensorboard_dir");
    if (!tensorboard_dir.empty()) observers_.push_back(make_tensorboard_observer(tensorboard_dir));
  }

  // The interval's figures, for the observers. Lock-step strategies average over the training
  // ranks; asynchronous ones report rank 0's own figures, since the ranks are not at the same step.
  void log_interval(int64_t step, int64_t epoch) {
    double sums[3] = {interval_.loss, interval_.wait, interval_.correct};
    const int ranks = train_comm_->size();
    const int reporting = lockstep() ? ranks : 1;
    IntervalFigures f;
    f.step = step;
    f.epoch = epoch;
    // Each training rank's own step time, to point at a slow one.
    f.rank_step_ms.assign(static_cast<size_t>(reporting), 0.0);
    const double mine = 1e3 * interval_.busy / static_cast<double>(std::max<int64_t>(interval_.steps, 1));
    // The largest rank's memory and descriptors now: a slow leak shows as a trend over the run.
    int64_t resources[2] = {current_rss_kib(), open_file_descriptors()};
    // Each rank's GPU as NVML saw it last (GPU path only).
    const bool gpu = device_->kind() == DeviceKind::gpu;
    const GpuSample my_gpu = gpu ? device_->gpu_sample() : GpuSample{};
    if (gpu) f.gpu.assign(static_cast<size_t>(reporting), GpuSample{});
    if (lockstep()) {
      train_comm_->allreduce_sum(sums, 3);
      train_comm_->allgather(&mine, f.rank_step_ms.data(), sizeof(double));
      train_comm_->allreduce_max(resources, 2);
      if (gpu) train_comm_->allgather(&my_gpu, f.gpu.data(), sizeof(GpuSample));
    } else {
      f.rank_step_ms[0] = mine;
      if (gpu) f.gpu[0] = my_gpu;
    }
    const double elapsed = std::max(seconds_since(interval_start_), 1e-9);
    // Loss and accuracy per label: per token for a language model.
    const double seen = static_cast<double>(interval_.samples * labels_per_sample_) * reporting / ranks;
    f.loss = sums[0] / seen;
    f.accuracy = sums[2] / seen;
    f.data_wait_share = sums[1] / reporting / elapsed;
    f.samples_per_s = static_cast<double>(interval_.samples) / elapsed;
    f.tokens_per_s = labels_per_sample_ > 1 ? f.samples_per_s * static_cast<double>(labels_per_sample_) : 0.0;
    f.learning_rate = optimizer_->learning_rate();
    f.grad_norm = interval_.grad_norm;  // rank 0's: every lock-step rank holds the same gradient
    f.time_s = seconds_since(run_start_);
    f.rss_mb = static_cast<double>(resources[0]) / 1024.0;
    f.open_fds = resources[1];
    result_.final_loss = f.loss;
    for (auto& o : observers_) o->on_interval(f);
    interval_ = Interval{};
    interval_start_ = Clock::now();
  }

  // The final checkpoint (after the sync strategy brought the authoritative state to rank 0)
  // and the run's figures over the training ranks.
  TrainResult finish(int64_t start_step, int64_t step) {
    const double run_seconds = seconds_since(run_start_);
    if (serving_) {
      serving_->gather_state(*optimizer_);
      result_.lost_ranks = serving_->lost_ranks();
      // Where the servers stand, whoever took the steps: the run's end, or where it stopped.
      if (leader_) meta_ = served_meta(serving_->position());
    }
    const bool all_ranks_here = result_.lost_ranks.empty();
    if (leader_ && !all_ranks_here)
      log_ << "warning: the run went on without rank(s) " << rank_list(result_.lost_ranks)
           << " (sync.on_lost_worker = continue); figures below are rank 0's own\n"
           << std::flush;
    if (trace_) trace_->resume_recording();
    if (lockstep() && options_.write_checkpoints && step > start_step) meta_.sync = gather_sync_state();
    TraceSpan checkpoint_span(leader_ && options_.write_checkpoints && step > start_step ? traced() : nullptr,
                              "checkpoint", "step", step);
    const auto whole_state =
        options_.write_checkpoints && step > start_step ? gather_sharded_optimizer_state() : nullptr;
    if (leader_ && options_.write_checkpoints && step > start_step)
      result_.checkpoint = write_run_checkpoint(meta_, whole_state ? whole_state.get() : optimizer_.get());
    checkpoint_span.end();
    if (step <= start_step) {
      // Nothing trained: the newest checkpoint is still the one resumed from, and no loss was seen.
      if (result_.checkpoint.empty()) result_.checkpoint = resumed_from_;
      result_.final_loss = std::numeric_limits<double>::quiet_NaN();
    }
    // The final model on the test set, by rank 0 (the parameters are the same everywhere now), in
    // batches of the training micro-batch so the model's activations are reused, not grown.
    const std::string test_path = config_.get_string("data.test");
    if (leader_ && !test_path.empty() && !options_.quiet && step > start_step) {
      TraceSpan span(traced(), "evaluation");
      const EvalResult test = evaluate_model(*model_, test_path, config_.get_string("data.x_name"),
                                             config_.get_string("data.y_name"), micro_batch_);
      result_.test_accuracy = test.accuracy;
      result_.test_loss = test.loss;
      log_ << test_line(test, test_path) << std::flush;
    }
    if (all_ranks_here) comm_.barrier();
    if (trace_) trace_->write(comm_, all_ranks_here, log_);
    result_.train_seconds = run_seconds;
    result_.steps = step;
    result_.steps_run = step - start_step;
    const int64_t timed_steps = std::max<int64_t>(result_.steps_run - options_.timing_warmup_steps, 0);
    // Samples over all training ranks: asynchronous strategies take different numbers of steps.
    double totals[5] = {phases_.data_wait, phases_.compute, phases_.sync, phases_.optimizer,
                        static_cast<double>(timed_steps * reader_->local_batch())};
    if (all_ranks_here) train_comm_->allreduce_sum(totals, 5);
    result_.samples = static_cast<int64_t>(totals[4]);
    result_.samples_per_s = static_cast<double>(result_.samples) / std::max(result_.train_seconds, 1e-9);
    if (labels_per_sample_ > 1) result_.tokens_per_s = result_.samples_per_s * static_cast<double>(labels_per_sample_);
    // Mean seconds per step of each phase, averaged over ranks.
    const int ranks_summed = all_ranks_here ? train_comm_->size() : 1;
    const double per_step = 1.0 / static_cast<double>(std::max<int64_t>(timed_steps, 1) * ranks_summed);
    result_.phases = {totals[0] * per_step, totals[1] * per_step, totals[2] * per_step, totals[3] * per_step};
    // Peak resident memory of the largest rank.
    int64_t peak_kib = peak_rss_kib();
    if (all_ranks_here) train_comm_->allreduce_max(&peak_kib, 1);
    result_.peak_rss_mb = static_cast<double>(peak_kib) / 1024.0;
    return result_;
  }

  // Floats of the flat buffer this rank's optimizer updates, and keeps state for: all of it, a
  // serving rank's shard (a parameter server), or a sharded optimizer's shard (ZeRO).
  size_t optimizer_size() const {
    if (OptimizerSharding* sharding = sync_->sharding()) return sharding->shard_size();
    return trains() ? store_.flat_size() : serving_->serve_size();
  }

  // A sharded optimizer updates its shard on the host between MPI collectives: the CPU path, in
  // place. Asked for the GPU it is refused; under train.device = auto the job trains on the CPU.
  void keep_sharded_optimizer_on_cpu() {
    if (config_.get_string("train.device") == "emulated_gpu")
      throw ConfigError("sync.name = " + choice_.sync +
                        " shards the optimizer state on the CPU path only, and train.device = emulated_gpu runs the "
                        "GPU path's program: set train.device = cpu, or sync.name = allreduce");
    if (device_->kind() == DeviceKind::gpu) {
      const std::string why = "sync.name = " + choice_.sync +
                              " shards the optimizer state on the CPU path only (its shard is updated on the host "
                              "between MPI collectives)";
      if (config_.get_string("train.device") == "gpu")
        throw ConfigError(why +
                          "; train.device = gpu asks for the GPU: set train.device = cpu, or sync.name = "
                          "allreduce for the GPU");
      if (leader_) log_ << "warning: training on the CPU (train.device = auto): " << why << "\n" << std::flush;
    }
    device_->fall_back_to_cpu();
  }

  // Rank 0 says what the optimizer state takes on each rank: under a sharded optimizer about
  // 1 / ranks of the unsharded figure.
  void log_optimizer_state() {
    const size_t floats = optimizer_size();
    const size_t buffers = optimizer_->state_buffers().size();
    log_ << "optimizer state: " << buffers * floats * sizeof(float) << " bytes per rank (" << buffers
         << " buffer(s) of " << floats << " floats";
    if (sync_->sharding())
      log_ << ", this rank's shard of the " << store_.flat_size() << " parameters over " << comm_.size()
           << " rank(s), sync.name = " << choice_.sync;
    log_ << ")\n" << std::flush;
  }

  // Rank 0, resuming: the optimizer the checkpoint's state is read into. A sharded optimizer's
  // state is whole in the checkpoint: it goes into a whole-size one, which
  // broadcast_optimizer_state() then cuts into every rank's shard.
  Optimizer* resume_optimizer() {
    if (!sync_->sharding()) return optimizer_.get();
    if (!whole_state_) whole_state_ = whole_size_optimizer();
    return whole_state_.get();
  }

  // After a resume read on rank 0: every rank's optimizer state and step count from rank 0's.
  void broadcast_optimizer_state() {
    OptimizerSharding* sharding = sync_->sharding();
    if (!sharding) {
      for (auto& buffer : optimizer_->state_buffers())
        comm_.broadcast(buffer.data, store_.flat_size() * sizeof(float), 0);
      return;
    }
    int64_t steps = whole_state_ ? whole_state_->step_count() : 0;
    comm_.broadcast(&steps, sizeof(steps), 0);
    optimizer_->set_step_count(steps);
    auto shards = optimizer_->state_buffers();
    const auto wholes = whole_state_ ? whole_state_->state_buffers() : std::vector<OptimizerStateBuffer>{};
    for (size_t k = 0; k < shards.size(); ++k)
      sharding->scatter_state(leader_ ? wholes.at(k).data : nullptr, shards[k].data);
    whole_state_.reset();
  }

  // Collective. A sharded optimizer's state, whole on rank 0 (null elsewhere, and null for an
  // unsharded optimizer, whose own state is whole): what a checkpoint holds, so that it loads at
  // any world size and under any strategy. Made for one write and then freed.
  std::unique_ptr<Optimizer> gather_sharded_optimizer_state() {
    OptimizerSharding* sharding = sync_->sharding();
    if (!sharding) return nullptr;
    std::unique_ptr<Optimizer> whole = leader_ ? whole_size_optimizer() : nullptr;
    auto shards = optimizer_->state_buffers();
    const auto wholes = whole ? whole->state_buffers() : std::vector<OptimizerStateBuffer>{};
    for (size_t k = 0; k < shards.size(); ++k)
      sharding->gather_state(shards[k].data, whole ? wholes.at(k).data : nullptr);
    if (whole) whole->set_step_count(optimizer_->step_count());
    return whole;
  }

  // Another instance of the run's optimizer plugin, with state for the whole flat buffer.
  std::unique_ptr<Optimizer> whole_size_optimizer() {
    auto whole = registry_.create_optimizer(choice_.optimizer, config_);
    whole->setup(store_.flat_size());
    return whole;
  }

  bool spans_nodes() const {
    return std::any_of(rank_hosts_.begin(), rank_hosts_.end(), [&](const auto& h) { return h != rank_hosts_[0]; });
  }

  // The main thread's timeline, or null: metrics.trace is off.
  TraceBuffer* traced() const { return trace_ ? trace_->main_thread() : nullptr; }

  // Rank 0 of an asynchronous run: a snapshot's parameters, or its own while one is written.
  std::vector<float> served_params_;
  SyncState resumed_sync_;  // rank 0: what the resumed checkpoint's strategy kept
  // The global batch (from the first epoch's) that step 0 of this run would read: its data position
  // is this plus the step.
  int64_t run_position_ = 0;
  // The serving role's answers, or a replicated strategy's: every rank trains, in lock step.
  bool trains() const { return !serving_ || serving_->trains(); }
  bool lockstep() const { return !serving_ || serving_->lockstep(); }
  int train_rank() const { return serving_ ? serving_->train_rank(comm_) : comm_.rank(); }
  int train_world() const { return serving_ ? serving_->train_world(comm_) : comm_.size(); }

  struct Interval {
    double loss = 0, wait = 0, correct = 0;
    double grad_norm = 0;  // the last step's, before clipping
    double busy = 0;       // this rank's seconds outside the sync strategy: compute, data wait, update
    int64_t steps = 0;
    int64_t samples = 0;
  };

  Communicator& comm_;
  TrainOptions options_;
  Config& config_;
  std::ostream null_log_{nullptr};
  PrintableStream printable_log_;
  // Rank 0's output: drawn_log_ for the progress bar's own control bytes, log_ for every line,
  // which quotes config values, paths and file contents with their control bytes escaped.
  std::ostream& drawn_log_;
  std::ostream& log_;
  PluginRegistry registry_;
  const bool leader_;
  PluginChoice choice_;
  uint64_t seed_ = 0;
  int64_t global_batch_ = 0, accum_ = 1, micro_batch_ = 0, per_epoch_ = 0;
  int64_t shards_per_pass_ = 1;  // micro-batches run through the model together (see build)
  int64_t epochs_ = 0, total_steps_ = 0, log_every_ = 1;
  std::string checkpoint_dir_;
  std::unique_ptr<CheckpointDirLock> checkpoint_lock_;  // rank 0's, while it writes checkpoints
  // Rank 0: the checkpoints checkpoint.overwrite replaces, removed by the run's first checkpoint.
  std::vector<std::string> replaced_checkpoints_;
  std::string resumed_from_, resume_note_;  // rank 0's resume checkpoint, position note

  // metrics.trace's recorder, or null. Declared before what records into it (the reader's thread).
  std::unique_ptr<Trace> trace_;
  std::unique_ptr<TrainingDevice> device_;
  CompiledStep* step_ = nullptr;  // every training rank's step (device_'s); null on a serving rank
  std::unique_ptr<Model> model_;
  std::unique_ptr<Optimizer> optimizer_;
  std::unique_ptr<SyncStrategy> sync_;
  ServingRole* serving_ = nullptr;  // sync_'s, or null when every rank trains
  ParameterStore store_;
  std::unique_ptr<data::BatchReader> reader_;
  int64_t labels_per_sample_ = 1;  // a language model's window: one label per token
  std::optional<LearningRateSchedule> schedule_;
  std::unique_ptr<Communicator> train_comm_;
  // Batch statistics over more than one pass (deterministic mode, model.sync_bn); null otherwise.
  std::unique_ptr<Communicator> statistics_comm_;
  CheckpointMeta meta_;
  std::vector<std::string> rank_hosts_;  // every rank's host name, by rank
  // Rank 0, resuming under a sharded optimizer: the checkpoint's whole optimizer state until it is
  // scattered (broadcast_optimizer_state).
  std::unique_ptr<Optimizer> whole_state_;

  Shape micro_shape_;  // input of one forward pass: micro_batch_ x shards_per_pass_ rows
  StepPhases phases_;
  Interval interval_;
  Clock::time_point interval_start_, run_start_;
  TrainResult result_;
  bool skip_nonfinite_ = false;
  NonFiniteFigures nonfinite_;  // the latest non-finite step's
  int64_t eval_every_ = 0;      // train.eval_every_epochs where there is a test file to evaluate on
  int64_t nan_step_ = 0;
  std::vector<std::unique_ptr<TrainingObserver>> observers_;  // rank 0's, unless quiet
};

}  // namespace

TrainResult train(Communicator& comm, TrainOptions options, std::ostream& log) {
  return Trainer(comm, std::move(options), log).run();
}

}  // namespace mgt
