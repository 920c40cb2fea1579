#include "trainer.hpp"

#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <limits>
#include <memory>
#include <optional>
#include <ostream>
#include <sstream>
#include <thread>

#include "checkpoint.hpp"
#include "core_keys.hpp"
#include "datasets/sharded_reader.hpp"
#include "lr_schedule.hpp"
#include "kernels/cpu/gemm.hpp"
#include "mgtrain/layers.hpp"
#include "mgtrain/rng.hpp"
#include "mgtrain/version.hpp"
#include "plugin_loader.hpp"

namespace mgt {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// The fingerprints every rank must share before step 1, in the order they are compared.
struct Agreement {
  uint64_t config_hash;
  uint64_t plugins_hash;
  uint64_t layout_hash;
};

// Test-only: MGTRAIN_TEST_SLOW_RANK="R:MS" makes rank R sleep MS milliseconds every step, to
// measure how a strategy copes with one slow rank.
int test_slowdown_ms(int rank) {
  const char* spec = std::getenv("MGTRAIN_TEST_SLOW_RANK");
  int slow_rank = -1, ms = 0;
  if (spec && std::sscanf(spec, "%d:%d", &slow_rank, &ms) == 2 && slow_rank == rank) return ms;
  return 0;
}

std::string metrics_path(const Config& config, const std::string& checkpoint_dir) {
  const std::string path = config.get_string("metrics.file");
  return path.empty() ? (std::filesystem::path(checkpoint_dir) / "metrics.jsonl").string() : path;
}

void check_agreement(Communicator& comm, const Agreement& mine) {
  std::vector<Agreement> all(static_cast<size_t>(comm.size()));
  comm.allgather(&mine, all.data(), sizeof(Agreement));
  const char* items[] = {"the resolved config and seed", "the plugin names and versions",
                         "the model's parameter names and shapes"};
  for (int r = 1; r < comm.size(); ++r) {
    const uint64_t a[] = {all[0].config_hash, all[0].plugins_hash, all[0].layout_hash};
    const uint64_t b[] = {all[r].config_hash, all[r].plugins_hash, all[r].layout_hash};
    for (int i = 0; i < 3; ++i)
      if (a[i] != b[i])
        throw StartupError("ranks 0 and " + std::to_string(r) + " differ in " + items[i] +
                               " (fingerprints " + std::to_string(a[i]) + " and " +
                               std::to_string(b[i]) + ")",
                           comm.rank() == 0);
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
  for (const auto& [kind, name] : {std::pair{"model", choice.model},
                                   std::pair{"optimizer", choice.optimizer},
                                   std::pair{"sync", choice.sync}}) {
    const auto plugin_keys = registry.config_keys(kind, name);
    keys.insert(keys.end(), plugin_keys.begin(), plugin_keys.end());
  }
  return keys;
}

TrainResult train(Communicator& comm, TrainOptions options, std::ostream& log_stream) {
  const bool leader = comm.rank() == 0;
  std::ostream null_stream(nullptr);
  std::ostream& log = options.benchmark ? null_stream : log_stream;
  Config& config = options.config;
  PluginRegistry registry(options.plugin_paths);
  PluginChoice choice;

  // 1. Config and plugins: every key must be known to the core or to a loaded plugin.
  agree(comm, [&] {
    choice = plugin_choice(config);
    config.validate(known_config_keys(registry, choice));
  });
  comm.set_timeout_seconds(config.get_real("comm.timeout_s"));
  kernels::set_cpu_threads(static_cast<int>(config.get_int("train.threads")));
  if (leader) log << "mgtrain " << MGTRAIN_VERSION << ": " << comm.size() << " rank(s)\n"
                  << "# resolved config\n" << config.to_ini() << std::flush;

  const uint64_t seed = static_cast<uint64_t>(config.get_int("train.seed"));
  const int64_t global_batch = config.get_int("train.global_batch");
  const std::string checkpoint_dir = config.get_string("checkpoint.dir");

  // 2. Objects: model, optimizer, sync, parameters, data. Everything that reads input is
  //    checked here, before any rank takes a step.
  std::unique_ptr<Model> model;
  std::unique_ptr<Optimizer> optimizer;
  std::unique_ptr<SyncStrategy> sync;
  ParameterStore store;
  std::unique_ptr<data::ShardedReader> reader;
  int64_t accum = 1, micro_batch = 0, per_epoch = 0;
  std::optional<LearningRateSchedule> schedule;
  agree(comm, [&] {
    model = registry.create_model(choice.model, config);
    optimizer = registry.create_optimizer(choice.optimizer, config);
    sync = registry.create_sync(choice.sync, config);
    model->declare(store);
    store.finalize();
    store.initialize(seed);
    sync->setup(comm, store);  // local: roles and buffers, no communication yet
    optimizer->setup(sync->trains() ? store.flat_size() : sync->serve_size());
    accum = sync->accumulation_steps();
    const int64_t train_world = sync->train_world(comm);
    if (global_batch % (train_world * accum) != 0)
      throw ConfigError("train.global_batch = " + std::to_string(global_batch) +
                        " is not divisible by training ranks x accumulation steps = " +
                        std::to_string(train_world) + " x " + std::to_string(accum));
    micro_batch = global_batch / (train_world * accum);
    const std::string train_path = config.get_string("data.train");
    if (!sync->trains()) {
      // A serving rank reads no data; it needs only the epoch length, for the schedule.
      const auto info = data::open_dataset_info(train_path, config.get_string("data.x_name"),
                                                config.get_string("data.y_name"));
      per_epoch = info.num_samples / global_batch;
      schedule.emplace(config.get_string("train.lr_schedule"), optimizer->learning_rate(),
                       config.get_int("train.warmup_steps"), config.get_int("train.epochs") * per_epoch);
      return;
    }
    data::ReaderOptions ro;
    ro.path = train_path;
    ro.x_name = config.get_string("data.x_name");
    ro.y_name = config.get_string("data.y_name");
    ro.global_batch = global_batch;
    ro.rank = sync->train_rank(comm);
    ro.world = static_cast<int>(train_world);
    ro.seed = seed;
    ro.prefetch_depth = static_cast<int>(config.get_int("data.prefetch"));
    ro.chunk_cache_bytes = static_cast<size_t>(config.get_real("data.cache_mb") * 1e6);
    reader = std::make_unique<data::ShardedReader>(ro);
    per_epoch = reader->batches_per_epoch();
    schedule.emplace(config.get_string("train.lr_schedule"), optimizer->learning_rate(),
                     config.get_int("train.warmup_steps"),
                     config.get_int("train.epochs") * reader->batches_per_epoch());
    Shape input = {micro_batch};
    for (int64_t d : reader->info().sample_shape) input.push_back(d);
    Shape logits;
    try {
      logits = model->output_shape(input);
    } catch (const Error& e) {
      throw DataError("model '" + choice.model + "' cannot take the samples of '" + ro.path +
                      "' (shape " + shape_string(reader->info().sample_shape) + "): " + e.what());
    }
    if (logits.size() != 2 || logits[1] < reader->info().num_classes)
      throw DataError("model '" + choice.model + "' produces logits of shape " + shape_string(logits) +
                      " for input " + shape_string(input) + ", expected [" +
                      std::to_string(micro_batch) + ", " + std::to_string(reader->info().num_classes) +
                      "] for the classes of '" + ro.path + "'");
  });

  // 3. All ranks run the same config, plugins and model.
  check_agreement(comm, Agreement{rng::purpose_hash(config.to_ini()),
                                  rng::purpose_hash(registry.loaded_summary()), store.layout_hash()});

  // 4. Resume: rank 0 reads the checkpoint, every rank receives its state.
  CheckpointMeta meta;
  if (!options.resume.empty()) {
    agree(comm, [&] {
      if (!sync->lockstep())
        throw ConfigError("--resume is not supported with sync.name = " + choice.sync +
                          " yet: its optimizer state lives sharded on the serving ranks");
      if (leader) meta = load_checkpoint(resolve_resume(checkpoint_dir, options.resume), store,
                                         optimizer.get());
    });
    int64_t position[3] = {meta.step, meta.epoch, meta.batch_in_epoch};
    comm.broadcast(position, sizeof(position), 0);
    meta.step = position[0];
    meta.epoch = position[1];
    meta.batch_in_epoch = position[2];
    comm.broadcast(store.params_data(), store.flat_size() * sizeof(float), 0);
    for (auto& buffer : optimizer->state_buffers())
      comm.broadcast(buffer.data, store.flat_size() * sizeof(float), 0);
    int64_t opt_steps = optimizer->step_count();
    comm.broadcast(&opt_steps, sizeof(opt_steps), 0);
    optimizer->set_step_count(opt_steps);
    if (leader) log << "resumed from step " << meta.step << " (epoch " << meta.epoch + 1
                    << ", batch " << meta.batch_in_epoch << ")\n";
  }

  const int64_t epochs = config.get_int("train.epochs");
  const int64_t max_steps = config.get_int("train.max_steps");
  const int64_t total_steps = max_steps > 0 ? std::min(max_steps, epochs * per_epoch) : epochs * per_epoch;
  const int64_t log_every = config.get_int("train.log_every");
  const int64_t checkpoint_every = config.get_int("checkpoint.every_steps");
  const int64_t keep = config.get_int("checkpoint.keep");
  // Training ranks among themselves: per-step figures and checkpoint barriers stay off the
  // serving ranks, which are busy serving.
  const auto train_comm = comm.split(sync->trains() ? 0 : 1, comm.rank());
  meta.seed = seed;
  meta.world_size = comm.size();
  meta.mgtrain_version = MGTRAIN_VERSION;
  meta.plugins = registry.loaded_summary();
  meta.config_ini = config.to_ini();
  TrainResult result;
  result.gradient_floats = store.flat_size();

  if (!sync->trains()) {
    ServeContext context;
    context.steps_per_worker = total_steps - meta.step;
    context.learning_rate = [&](int64_t s) { return schedule->at(s); };
    {  // <dir>/metrics.jsonl -> <dir>/metrics.rank<R>.jsonl
      const std::filesystem::path main_file = metrics_path(config, checkpoint_dir);
      context.metrics_path = (main_file.parent_path() / (main_file.stem().string() + ".rank" +
                              std::to_string(comm.rank()) + main_file.extension().string())).string();
      std::error_code ec;
      std::filesystem::create_directories(main_file.parent_path(), ec);
    }
    context.log_every = log_every;
    sync->serve(*optimizer, context);
    sync->gather_state(*optimizer);
    comm.barrier();  // the final checkpoint is written
    return result;
  }

  const auto sample_numel = shape_numel(reader->info().sample_shape);
  const int64_t local_batch = reader->local_batch();
  const int train_rank = sync->train_rank(comm);

  std::ofstream metrics;
  if (leader && !options.benchmark) {
    const std::string path = metrics_path(config, checkpoint_dir);
    std::error_code ec;
    std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
    metrics.open(path, std::ios::app);
    if (!metrics) throw IoError("metrics file '" + path + "' cannot be opened for writing");
  }

  Shape micro_shape = {micro_batch};
  for (int64_t d : reader->info().sample_shape) micro_shape.push_back(d);
  Tensor grad_logits(model->output_shape(micro_shape));
  const float grad_scale = 1.0f / static_cast<float>(global_batch);
  const GradientsReady on_ready = [&](const std::vector<ParamHandle>& h) { sync->gradients_ready(h); };

  int64_t step = meta.step;
  const int64_t start_step = step;
  reader->start(meta.epoch, meta.batch_in_epoch);
  if (leader) log << "training " << total_steps - step << " steps: " << per_epoch
                  << " steps/epoch, global batch " << global_batch << " (" << train_comm->size()
                  << " training ranks x " << micro_batch << " x " << accum << " micro-batches)\n" << std::flush;

  StepPhases phases;
  double interval_loss = 0, interval_wait = 0;
  int64_t interval_samples = 0;
  auto interval_start = Clock::now();
  auto run_start = Clock::now();
  // An asynchronous run ends when the servers have applied all its pushes: a fast rank may take
  // over a slow one's share, up to every step of the run.
  const int64_t step_limit = sync->lockstep() ? total_steps : start_step + (total_steps - start_step) * train_comm->size();
  const int slow_ms = test_slowdown_ms(comm.rank());
  while (step < step_limit && !sync->finished()) {
    if (slow_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(slow_ms));
    comm.set_step(step + 1);
    data::Batch batch = reader->next();
    interval_wait += batch.wait_seconds;
    phases.data_wait += batch.wait_seconds;
    bool apply = false;
    for (int64_t m = 0; m < accum; ++m) {
      const Tensor x = Tensor::view(batch.x.data() + m * micro_batch * sample_numel, micro_shape);
      StepContext ctx;
      ctx.seed = seed;
      ctx.step = step;
      ctx.micro_step = m;
      ctx.first_sample = train_rank * local_batch + m * micro_batch;
      ctx.training = true;
      sync->begin_micro_batch(m);
      auto t = Clock::now();
      const Tensor& logits = model->forward(x, ctx);
      interval_loss += softmax_cross_entropy(logits, batch.y + m * micro_batch, grad_logits, grad_scale);
      model->backward(grad_logits, ctx, on_ready);
      phases.compute += seconds_since(t);
      t = Clock::now();
      apply = sync->end_backward(m);
      phases.sync += seconds_since(t);
    }
    if (apply) {
      const auto t = Clock::now();
      optimizer->set_learning_rate(schedule->at(step));
      optimizer->step(store.params_data(), store.grads_data(), store.flat_size());
      store.zero_grads();
      phases.optimizer += seconds_since(t);
    }
    ++step;
    if (step - start_step == options.timing_warmup_steps) {
      run_start = Clock::now();
      phases = StepPhases{};
    }
    interval_samples += global_batch;
    meta.step = step;
    meta.epoch = batch.epoch + (batch.batch_in_epoch + 1 == per_epoch ? 1 : 0);
    meta.batch_in_epoch = (batch.batch_in_epoch + 1) % per_epoch;

    if (step % log_every == 0 || step == total_steps) {
      // Lock-step strategies average over the training ranks; asynchronous ones report rank 0's
      // own figures, since the ranks are not at the same step.
      double sums[2] = {interval_loss, interval_wait};
      const int reporting = sync->lockstep() ? train_comm->size() : 1;
      if (sync->lockstep()) train_comm->allreduce_sum(sums, 2);
      const double elapsed = seconds_since(interval_start);
      const double loss = sums[0] * train_comm->size() / reporting / static_cast<double>(interval_samples);
      const double wait_share = sums[1] / reporting / std::max(elapsed, 1e-9);
      const double rate = static_cast<double>(interval_samples) / std::max(elapsed, 1e-9);
      result.final_loss = loss;
      if (leader) {
        char line[256];
        std::snprintf(line, sizeof(line),
                      "epoch %lld/%lld step %lld/%lld loss %.4f samples/s %.0f data-wait %.1f%%\n",
                      static_cast<long long>(batch.epoch + 1), static_cast<long long>(epochs),
                      static_cast<long long>(step), static_cast<long long>(total_steps), loss, rate,
                      100.0 * wait_share);
        log << line << std::flush;
        metrics << std::setprecision(9) << "{\"step\":" << step << ",\"epoch\":" << batch.epoch + 1
                << ",\"loss\":" << loss << ",\"samples_per_s\":" << rate
                << ",\"data_wait_share\":" << wait_share << ",\"lr\":" << optimizer->learning_rate()
                << ",\"time_s\":" << seconds_since(run_start) << "}\n" << std::flush;
      }
      interval_loss = interval_wait = 0;
      interval_samples = 0;
      interval_start = Clock::now();
    }
    if (!options.benchmark && checkpoint_every > 0 && step % checkpoint_every == 0 && step < total_steps) {
      if (leader) result.checkpoint = write_checkpoint(checkpoint_dir, meta, store, optimizer.get(), keep);
      // Nobody runs ahead of a checkpoint that may fail: its error ends every rank.
      train_comm->barrier();
    }
  }
  const double run_seconds = seconds_since(run_start);
  if (!sync->lockstep()) meta.step = total_steps;  // the run's length, whoever took the steps
  sync->gather_state(*optimizer);
  if (!options.benchmark && step > start_step) {
    if (leader) result.checkpoint = write_checkpoint(checkpoint_dir, meta, store, optimizer.get(), keep);
  }
  comm.barrier();
  result.train_seconds = run_seconds;
  result.steps = step;
  result.steps_run = step - start_step;
  const int64_t timed_steps = std::max<int64_t>(result.steps_run - options.timing_warmup_steps, 0);
  // Samples over all training ranks: with an asynchronous strategy they take different numbers
  // of steps.
  double totals[5] = {phases.data_wait, phases.compute, phases.sync, phases.optimizer,
                      static_cast<double>(timed_steps * local_batch)};
  train_comm->allreduce_sum(totals, 5);
  result.samples = static_cast<int64_t>(totals[4]);
  result.samples_per_s = static_cast<double>(result.samples) / std::max(result.train_seconds, 1e-9);
  // Mean seconds per step of each phase, averaged over ranks.
  const double per_step = 1.0 / static_cast<double>(std::max<int64_t>(timed_steps, 1) * train_comm->size());
  result.phases = {totals[0] * per_step, totals[1] * per_step, totals[2] * per_step, totals[3] * per_step};
  // Peak resident memory of the largest rank (ru_maxrss is in KiB on Linux).
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  int64_t peak_kib = usage.ru_maxrss;
  train_comm->allreduce_max(&peak_kib, 1);
  result.peak_rss_mb = static_cast<double>(peak_kib) / 1024.0;
  return result;
}

}  // namespace mgt
