#include "runtime/startup.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <numeric>

#include "datasets/data_files.hpp"
#include "datasets/token_file.hpp"
#include "kernels/cpu/gemm.hpp"
#include "loader/plugin_loader.hpp"
#include "mgtrain/layers.hpp"
#include "mgtrain/version.hpp"
#include "runtime/agreement.hpp"
#include "runtime/checkpointing.hpp"
#include "runtime/core_keys.hpp"
#include "runtime/decay_mask.hpp"
#include "runtime/evaluate.hpp"
#include "runtime/job_checks.hpp"
#include "runtime/run.hpp"
#include "testing/fault_injection.hpp"

namespace mgt {

std::string with_job_id(std::string path) {
  const auto at = path.find("%j");
  if (at == std::string::npos) return path;
  const char* job = std::getenv("SLURM_JOB_ID");
  return path.replace(at, 2, job && *job ? job : "local");
}

namespace {

void expand_job_id(Config& config, std::initializer_list<const char*> keys) {
  for (const char* key : keys)
    if (const std::string value = config.get_string(key); value.find("%j") != std::string::npos)
      config.set(key, with_job_id(value), config.values().at(key).source);
}

// "section.key = value" per line, in key order.
std::string flat_config(const Config& config) {
  std::string out;
  for (const auto& [key, value] : config.values()) out += key + " = " + value.value + "\n";
  return out;
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

// Floats of the flat buffer this rank's optimizer updates, and keeps state for: all of it, a
// serving rank's shard (a parameter server), or a sharded optimizer's shard (ZeRO).
size_t optimizer_size(Run& run) {
  if (OptimizerSharding* sharding = run.sync->sharding()) return sharding->shard_size();
  return run.trains() ? run.store.flat_size() : run.serving->serve_size();
}

// train.threads, at most the cores this rank may use: more only contend for them, and tens of
// thousands make OpenMP fail to start them or crash. Said once per rank that lowers it.
void set_compute_threads(Run& run) {
  const int64_t requested = run.config.get_int("train.threads");
  const int usable = kernels::usable_cpu_cores();
  if (requested > usable) {
    std::fprintf(stderr,
                 "mgtrain: warning: [rank %d] train.threads = %lld is more than the %d core(s) this rank "
                 "may use (sched_getaffinity); using %d\n",
                 run.comm.rank(), static_cast<long long>(requested), usable, usable);
    std::fflush(stderr);
  }
  kernels::set_cpu_threads(static_cast<int>(std::min<int64_t>(requested, usable)));
}

// metrics.trace: rank 0 writes it at the end, so it checks now that it can.
void claim_trace_path(Run& run) {
  const std::string path = run.config.get_string("metrics.trace");
  if (path.empty()) return;
  agree(run.comm, [&] {
    if (run.leader) Trace::check_writable(path, "metrics.trace", run.config.values().at("metrics.trace").source);
  });
  run.trace = std::make_unique<Trace>(path, run.config.get_int("metrics.trace_steps"));
}

// Where this rank trains (train.device): every rank the same kind. Each GPU is bound and opened
// once the sync strategy has said which ranks train, and the communicator between the GPUs comes
// with it (build, below).
void choose_device(Run& run) {
  agree(run.comm, [&] { run.device = std::make_unique<TrainingDevice>(run.comm, run.config); });
}

// The learning rate the schedule starts from: optimizer.lr, or with optimizer.lr_scaling =
// linear, optimizer.lr x global batch / optimizer.lr_base_batch (Goyal et al., 2017).
double scaled_learning_rate(Run& run) {
  const double lr = run.optimizer->learning_rate();
  if (run.config.get_string("optimizer.lr_scaling") != "linear") return lr;
  return lr * static_cast<double>(run.global_batch) /
         static_cast<double>(run.config.get_int("optimizer.lr_base_batch"));
}

// The step this run ends at: train.epochs x steps per epoch, or train.max_steps where it is
// sooner, or sooner still where verify stops it midway (TrainOptions::stop_at_step).
int64_t last_step_of_run(const Run& run) {
  const int64_t horizon = run.config.get_int("train.epochs") * run.per_epoch;
  const int64_t max_steps = run.config.get_int("train.max_steps");
  int64_t last = max_steps > 0 ? std::min(max_steps, horizon) : horizon;
  if (run.options.stop_at_step > 0) last = std::min(last, run.options.stop_at_step);
  return last;
}

// What the schedule is told of the run (mgtrain/schedule.hpp): both its horizon, train.epochs,
// and where train.max_steps ends it, since which one a curve should end at is the schedule's call.
ScheduleRun schedule_run(Run& run) {
  ScheduleRun told;
  told.base_rate = scaled_learning_rate(run);
  told.warmup_steps = run.config.get_int("train.warmup_steps");
  told.steps_per_epoch = run.per_epoch;
  told.horizon_steps = run.config.get_int("train.epochs") * run.per_epoch;
  const int64_t max_steps = run.config.get_int("train.max_steps");
  told.run_steps = max_steps > 0 ? std::min(max_steps, told.horizon_steps) : told.horizon_steps;
  return told;
}

// Clipping needs the one reduced gradient every rank holds, and an evaluation mid-run every
// training rank at the same step with the same parameters: neither exists with an asynchronous
// strategy (a parameter server), whose workers push their own gradients at their own pace.
void check_training_options(Run& run) {
  if (!run.serving) return;
  for (const char* key : {"optimizer.clip_norm", "train.eval_every_epochs"}) {
    if (run.config.get_real(key) == 0) continue;
    throw ConfigError(std::string(key) + " = " + run.config.get_string(key) +
                      " is not supported with sync.name = " + run.choice.sync +
                      ": its workers push their own gradients asynchronously, with no reduced gradient to clip "
                      "nor a step at which all ranks hold the same parameters; set it to 0");
  }
}

// Deterministic mode sums batch statistics over all of a rank's micro-shards in one pass, which
// the step in device memory (a GPU's) does not make: it runs one micro-shard a pass. Whether the
// model normalises by batch statistics at all is asked of the model itself: one training forward
// of a row of zeros, stopped at its first sum.
void check_batch_statistics(Run& run) {
  if (!run.trains() || !run.sync->micro_batches_are_shards() || !run.device->own_memory() || run.accum == 1) return;
  struct Found {};
  struct Probe final : BatchStatistics {
    void sum(Ops&, const float*, int64_t, int64_t, float*, double*) override { throw Found{}; }
  } probe;
  Shape one_row = {1};
  for (int64_t d : run.reader->info().sample_shape) one_row.push_back(d);
  Tensor zeros(one_row);
  StepContext ctx;
  ctx.batch_statistics = &probe;
  ctx.pass = 1;          // not a first pass: nothing would move running statistics
  ctx.first_sample = 1;  // nor a pass holding the global batch's first row
  try {
    run.model->forward(zeros, ctx);
    return;
  } catch (const Found&) {
  }
  throw ConfigError(
      "sync.deterministic = true: the model normalises by batch statistics, which deterministic "
      "mode sums over every micro-shard of the global batch, so each rank's " +
      std::to_string(run.accum) +
      " micro-shards must go through one pass; the step in device memory (a GPU's) runs one "
      "micro-shard a pass: train.device = cpu runs them together, or set sync.micro_shards to the "
      "number of ranks (" +
      std::to_string(run.train_world()) + ")");
}

// Statistics over the whole batch need every rank at the same pass: not so with an asynchronous
// strategy, whose serving ranks take no pass at all.
void check_sync_bn(Run& run) {
  if (!run.serving) return;
  throw ConfigError("model.sync_bn = true is not supported with sync.name = " + run.choice.sync +
                    ": its workers take their steps at their own pace, so no pass sees every rank's rows; "
                    "set it to false (batch statistics per rank)");
}

// The test file is read by rank 0 at the end (and with train.eval_every_epochs after epochs, by
// every training rank): those ranks check it now.
void check_test_file(Run& run) {
  if (!run.leader && !(run.trains() && run.config.get_int("train.eval_every_epochs") > 0)) return;
  check_test_data(run.config, *run.model, run.micro_batch);
}

// Whether the GPU path can run this model and optimizer (it runs every sync strategy). When it
// cannot, asking for it (train.device = gpu) is an error; with auto the job trains on the CPU and
// says why. The answer depends on the config alone, so every rank gives the same.
bool compilable(Run& run) {
  try {
    check_compilable(*run.model, *run.optimizer, run.choice.model, run.choice.optimizer);
    return true;
  } catch (const ConfigError& e) {
    const std::string asked = run.config.get_string("train.device");
    if (asked == "gpu" || asked == "emulated_gpu") throw;
    if (run.leader && asked == "auto" && run.device->kind() == DeviceKind::gpu)
      run.log << "warning: training on the CPU (train.device = auto): " << e.what() << "\n" << std::flush;
    return false;
  }
}

void compile_step(Run& run) {
  CompiledStepOptions o;
  o.sample_shape = run.reader->info().sample_shape;
  o.classes = run.model->output_shape(run.micro_shape).back();
  o.pass_rows = run.micro_batch * run.shards_per_pass;
  o.micro_batches_per_pass = run.shards_per_pass;
  o.accumulation = run.accum;
  o.labels_per_row = run.labels_per_sample;
  o.token_windows = run.token_windows;
  // The mean over every label of the global batch: a language model's every token, a masked one's
  // masked tokens (a constant count per window, so every rank knows the global batch's).
  o.grad_scale = 1.0f / static_cast<float>(run.global_batch * run.labels_counted);
  o.label_smoothing = static_cast<float>(run.config.get_real("train.label_smoothing"));
  o.clip_norm = static_cast<float>(run.config.get_real("optimizer.clip_norm"));
  // The steps whose figures are logged (train_loop's log_interval).
  o.norm_every = run.config.get_int("train.log_every");
  o.last_step = last_step_of_run(run);
  o.record = run.config.get_bool("gpu.cuda_graphs") && run.device->can_record();
  o.bf16 = run.config.get_string("gpu.precision") == "bf16";
  o.timeout_s = run.config.get_real("comm.timeout_s");
  o.seed = run.seed;
  o.first_sample = run.train_rank() * run.reader->local_batch();
  o.rank = run.comm.rank();
  // Two steps in flight keep the GPU from waiting for the host between steps. The update of the
  // second is then set before the first is known to have applied its own, exact unless a step is
  // skipped: so not with train.nonfinite = skip.
  o.pipeline_depth = run.config.get_string("train.nonfinite") == "skip" ? 1 : 2;
  // Where a non-finite gradient came from: on a GPU found when the step's figures come back (in
  // place, the CPU, right after the step: run_step). Lock-step ranks all see it at once.
  o.diagnose_nonfinite = run.lockstep();
  if (run.device->own_memory() && !run.sync->reduces_device_memory()) o.host_sync = &run.store;
  o.statistics_comm = run.statistics_comm.get();
  o.deterministic_statistics = run.sync->micro_batches_are_shards();
  o.sync_seconds = &run.phases.sync;
  o.update_seconds = &run.phases.optimizer;
  o.trace = run.traced();
  run.compiled_step = &run.device->compile(*run.model, run.store, *run.optimizer, *run.sync, o);
}

void open_reader(Run& run, int train_world) {
  data::ReaderOptions ro = run_reader_options(run.config, *run.model, run.choice.model, run.train_rank(), train_world);
  // A rank bound to one core (mpirun's default for up to two ranks) reads while its step waits,
  // instead of when the scheduler lets the thread preempt the step. On a GPU the step's thread
  // mostly waits for the device: the reader runs then anyway.
  ro.share_core = run.device->kind() == DeviceKind::cpu && kernels::usable_cpu_cores() == 1;
  if (kernels::Backend* backend = run.device->kind() == DeviceKind::gpu ? &run.device->backend() : nullptr) {
    // Pinned prefetch slots: the copies to the GPU run asynchronously, beside the step in flight.
    ro.allocate_slot = [backend](size_t bytes) { return backend->allocate_host(bytes); };
    ro.release_slot = [backend](void* ptr) { backend->release_host(ptr); };
  }
  if (run.trace)
    ro.on_batch_read = [buffer = run.trace->reader_thread()](auto begin, auto end, int64_t batch) {
      buffer->record("read batch", begin, end, "batch", batch);
    };
  run.reader = data::open_batch_reader(ro);
  run.per_epoch = run.reader->batches_per_epoch();
  run.labels_per_sample = run.reader->info().labels_per_sample;
  run.labels_counted = ro.mlm.enabled() ? data::positions_per_window(ro.context) : run.labels_per_sample;
  run.token_windows = run.reader->info().token_windows();
  run.micro_shape = {run.micro_batch * run.shards_per_pass};
  for (int64_t d : run.reader->info().sample_shape) run.micro_shape.push_back(d);
  check_model_takes(*run.model, run.choice.model, run.reader->info(), run.micro_shape);
}

// A sharded optimizer updates its shard on the host between MPI collectives: the CPU path, in
// place. Asked for the GPU it is refused; under train.device = auto the job trains on the CPU.
void keep_sharded_optimizer_on_cpu(Run& run) {
  if (run.config.get_string("train.device") == "emulated_gpu")
    throw ConfigError("sync.name = " + run.choice.sync +
                      " shards the optimizer state on the CPU path only, and train.device = emulated_gpu runs the "
                      "GPU path's program: set train.device = cpu, or sync.name = allreduce");
  if (run.device->kind() == DeviceKind::gpu) {
    const std::string why = "sync.name = " + run.choice.sync +
                            " shards the optimizer state on the CPU path only (its shard is updated on the host "
                            "between MPI collectives)";
    if (run.config.get_string("train.device") == "gpu")
      throw ConfigError(why +
                        "; train.device = gpu asks for the GPU: set train.device = cpu, or sync.name = "
                        "allreduce for the GPU");
    if (run.leader) run.log << "warning: training on the CPU (train.device = auto): " << why << "\n" << std::flush;
  }
  run.device->fall_back_to_cpu();
}

// Rank 0 says what the optimizer state takes on each rank: under a sharded optimizer about
// 1 / ranks of the unsharded figure.
void log_optimizer_state(Run& run) {
  const size_t floats = optimizer_size(run);
  const size_t buffers = run.optimizer->state_buffers().size();
  run.log << "optimizer state: " << buffers * floats * sizeof(float) << " bytes per rank (" << buffers
          << " buffer(s) of " << floats << " floats";
  if (run.sync->sharding())
    run.log << ", this rank's shard of the " << run.store.flat_size() << " parameters over " << run.comm.size()
            << " rank(s), sync.name = " << run.choice.sync;
  run.log << ")\n" << std::flush;
}

// 1. Config and plugins: every key must be known to the core or to a loaded plugin.
void configure(Run& run) {
  // Across nodes, first of all the same build everywhere: another build may read the config,
  // the data and the messages otherwise.
  run.rank_hosts = gather_host_names(run.comm);
  if (run.spans_nodes()) agree(run.comm, [&] { check_same_build(run.comm, run.rank_hosts); });
  agree(run.comm, [&] {
    fault::configure(run.comm.rank());
    run.choice = configure_plugins(run.registry, run.config);
  });
  expand_job_id(run.config, {"checkpoint.dir", "metrics.file", "metrics.tensorboard_dir", "metrics.trace"});
  run.comm.set_timeout_seconds(run.config.get_real("comm.timeout_s"));
  set_compute_threads(run);
  run.seed = static_cast<uint64_t>(run.config.get_int("train.seed"));
  run.global_batch = run.config.get_int("train.global_batch");
  run.checkpoint_dir = run.config.get_string("checkpoint.dir");
  claim_checkpoint_dir(run);
  // Rank 0 writes the checkpoints, but a resume may put rank 0 on another node.
  if (run.spans_nodes() && run.options.write_checkpoints)
    agree(run.comm, [&] { check_directory_shared(run.comm, run.rank_hosts, run.checkpoint_dir, "checkpoint.dir"); });
  claim_trace_path(run);
  const std::string nodes = node_summary(run.rank_hosts);
  if (run.leader)
    run.log << "mgtrain " << MGTRAIN_VERSION << ": " << run.comm.size() << " rank(s) " << nodes << "\n"
            << "# resolved config\n"
            << run.config.to_ini() << std::flush;
  choose_device(run);
}

// 2. Model, optimizer, sync, parameters, data. Everything that reads input is checked here,
//    before any rank takes a step.
void build(Run& run) {
  bool device_sync = false;  // the sync strategy works on the step's own memory (a GPU's, through NCCL)
  agree(run.comm, [&] {
    run.model = run.registry.create_model(run.choice.model, run.config);
    run.optimizer = run.registry.create_optimizer(run.choice.optimizer, run.config);
    run.sync = run.registry.create_sync(run.choice.sync, run.config);
    run.serving = run.sync->serving();
    if (run.serving && !run.serving->lockstep() && run.config.get_real("checkpoint.every_seconds") > 0)
      throw ConfigError("checkpoint.every_seconds = " + run.config.get_string("checkpoint.every_seconds") +
                        ": sync.name = " + run.choice.sync +
                        " writes its servers' state counted in updates: use checkpoint.every_steps, or set "
                        "checkpoint.every_seconds = 0");
    run.model->declare(run.store);
    run.store.finalize();
    run.store.initialize(run.seed);
    if (run.device->own_memory() && !compilable(run)) run.device->fall_back_to_cpu();
    if (run.device->own_memory() && run.sync->sharding()) keep_sharded_optimizer_on_cpu(run);
    device_sync = run.device->own_memory() && run.sync->reduces_device_memory();
    // In place on the CPU, or a strategy that works on host memory: set up on the host store,
    // over MPI (local: roles and buffers, no communication yet), before any GPU is bound, since
    // its roles say which ranks train. A GPU's step hands it each micro-batch's gradients.
    if (!device_sync) run.sync->setup(run.comm, run.store);
  });
  // Batch norm's statistics over more than one pass get a communicator of their own, so that
  // their collectives never meet the sync strategy's.
  agree(run.comm, [&] {
    if (run.sync->micro_batches_are_shards() || run.config.get_bool("model.sync_bn")) check_sync_bn(run);
  });
  if (run.sync->micro_batches_are_shards() || (run.config.get_bool("model.sync_bn") && run.comm.size() > 1))
    run.statistics_comm = run.comm.split(0, run.comm.rank());
  // Each training rank's GPU, bound among the training ranks of its node (a serving rank runs
  // the optimizer on its shard on the CPU and gets none); then NCCL between the GPUs for a
  // strategy that reduces device memory. The answers depend on the config alone, so every rank
  // enters these collectives together or none does.
  agree(run.comm, [&] { run.device->open(run.comm, device_sync || run.trains()); });
  if (!run.device->warning().empty())
    std::fprintf(stderr, "mgtrain: warning: [rank %d] %s\n", run.comm.rank(), run.device->warning().c_str());
  if (device_sync) agree(run.comm, [&] { run.device->connect(run.comm); });
  agree(run.comm, [&] {
    if (device_sync) {
      // The sync strategy works on the device's copy of the parameters, through its communicator.
      run.sync->setup(run.device->communicator(), run.device->step_store(run.store));
    }
    run.optimizer->setup(optimizer_size(run));
    if (run.config.get_string("optimizer.weight_decay_on") == "matrices")
      run.optimizer->set_decay_mask(matrices_decay_mask(run.store, *run.sync, run.trains(), run.choice.sync));
    run.accum = run.sync->accumulation_steps();
    const int64_t train_world = run.train_world();
    run.micro_batch = micro_batch_rows(run.global_batch, train_world, run.accum);
    // Deterministic micro-shards through a model of row-wise layers: one pass for all of them
    // (in place on the CPU; a GPU's step runs each micro-shard as its own micro-batch).
    run.shards_per_pass = !run.device->own_memory() && run.accum > 1 && run.sync->micro_batches_are_shards() &&
                                  run.model->shard_batchable(run.micro_batch, run.accum)
                              ? run.accum
                              : 1;
    const std::string train_path = run.config.get_string("data.train");
    if (!run.trains()) {
      // A serving rank reads no data; it needs only the epoch length, for the schedule.
      run.per_epoch =
          data::open_data_info(train_path, run.config.get_string("data.x_name"), run.config.get_string("data.y_name"),
                               run.model->sequence_length(), run.choice.model)
              .num_samples /
          run.global_batch;
    } else {
      open_reader(run, static_cast<int>(train_world));
    }
    check_training_options(run);
    check_batch_statistics(run);
    check_test_file(run);
    run.schedule.emplace(run.registry, run.config, schedule_run(run));
    if (run.trains()) compile_step(run);
  });
  if (run.leader && !run.serving) log_optimizer_state(run);
  if (run.leader && run.config.get_string("optimizer.lr_scaling") == "linear")
    run.log << "learning rate " << scaled_learning_rate(run) << " = optimizer.lr " << run.optimizer->learning_rate()
            << " x train.global_batch " << run.global_batch << " / optimizer.lr_base_batch "
            << run.config.get_int("optimizer.lr_base_batch") << " (optimizer.lr_scaling = linear)\n"
            << std::flush;
  if (run.leader && run.device->own_memory()) {
    const std::string sync_path = !device_sync
                                      ? "sync '" + run.choice.sync + "' on host memory, " + run.comm.backend() +
                                            " between ranks, each micro-batch's gradients through the host"
                                  : run.comm.size() == 1 ? std::string("one rank")
                                                         : run.device->communicator().backend() + " between ranks";
    run.log << "device: " << device_kind_name(run.device->kind()) << " ("
            << (run.device->kind() == DeviceKind::gpu ? "rank 0 on " + run.device->describe() : run.device->describe())
            << ", " << sync_path << ")\n"
            << std::flush;
  }
}

}  // namespace

std::string metrics_path(const Config& config, const std::string& checkpoint_dir) {
  const std::string path = config.get_string("metrics.file");
  return path.empty() ? (std::filesystem::path(checkpoint_dir) / "metrics.jsonl").string() : path;
}

void prepare_run(Run& run) {
  // Under the directory's lock (claim_checkpoint_dir), so no running job's files are touched.
  agree(run.comm, [&] {
    if (!run.checkpoint_lock) return;
    const int removed = run.checkpoint_lock->remove_leftover_temporaries();
    if (removed > 0)
      run.log << "removed " << removed << " temporary file(s) of an interrupted checkpoint write in "
              << run.checkpoint_dir << "\n";
  });
  run.epochs = run.config.get_int("train.epochs");
  run.total_steps = last_step_of_run(run);
  run.log_every = run.config.get_int("train.log_every");
  run.skip_nonfinite = run.config.get_string("train.nonfinite") == "skip";
  // bench and verify (quiet) time or compare the steps alone.
  run.eval_every = run.config.get_string("data.test").empty() || run.options.quiet || !run.trains()
                       ? 0
                       : run.config.get_int("train.eval_every_epochs");
  // Training ranks among themselves: per-step figures and checkpoint barriers stay off the
  // serving ranks, which are busy serving.
  run.train_comm = run.comm.split(run.trains() ? 0 : 1, run.comm.rank());
  run.meta.seed = run.seed;
  run.meta.global_batch = run.global_batch;
  run.meta.world_size = run.comm.size();
  run.meta.mgtrain_version = MGTRAIN_VERSION;
  run.meta.plugins = run.registry.loaded_summary();
  run.meta.plugin_paths = run.registry.loaded_paths();
  run.meta.config_ini = run.config.to_ini();
  // The training file's tokenizer goes into every checkpoint: generate and eval use it unasked
  // (the first shard's: the reader has checked that every shard has the same).
  if (const std::string train = data::expand_data_files(run.config.get_string("data.train")).front();
      run.model->sequence_length() > 0 && data::is_token_file(train))
    run.meta.tokenizer_model = data::read_tokenizer_bytes(data::open_token_info(train));
  run.result.gradient_floats = run.store.flat_size();
  run.result.device = device_kind_name(run.device->kind());
  if (run.compiled_step) run.compiled_step->upload_state(run.store);
  if (run.trace) {
    run.trace->start(run.comm);
    // The bucketed all-reduces on host memory; NCCL's run inside the device's step.
    run.comm.set_allreduce_observer(run.trace.get());
  }
}

void start_run(Run& run) {
  configure(run);
  build(run);
  // All ranks run the same config, plugins and model.
  check_agreement(run.comm, {{"the resolved config and seed", flat_config(run.config), '\n'},
                             {"the plugin names and versions", run.registry.loaded_summary(), ';'},
                             {"the model's parameter names and shapes", parameter_layout(run.store), '\n'}});
}

}  // namespace mgt
