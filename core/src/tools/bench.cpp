#include "tools/bench.hpp"

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <ostream>

#include "base/resident_memory.hpp"
#include "comm/mpi_communicator.hpp"
#include "io/json_line.hpp"
#include "loader/plugin_loader.hpp"

namespace mgt {

namespace {

using Clock = std::chrono::steady_clock;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n == 0 ? 0 : n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double bus_bandwidth_gbs(size_t bytes, int ranks, double seconds) {
  if (seconds <= 0 || ranks < 2) return 0;
  return 2.0 * (ranks - 1) / ranks * static_cast<double>(bytes) / seconds / 1e9;
}

}  // namespace

BenchResult run_bench(Communicator& world, const TrainOptions& base, int64_t steps, int64_t warmup,
                      int64_t allreduce_iterations, int64_t repeats) {
  TrainOptions options = base;
  options.quiet = true;
  options.write_checkpoints = false;
  options.timing_warmup_steps = warmup;
  options.config.set("train.max_steps", std::to_string(warmup + steps), "mgtrain bench");
  options.config.set("train.epochs", "1000000", "mgtrain bench");  // max_steps decides
  options.config.set("data.test", "", "mgtrain bench");            // no evaluation in a benchmark
  std::ostream silent(nullptr);
  BenchResult result;

  std::vector<double> np1_runs, all_runs;
  for (int64_t repeat = 0; repeat < std::max<int64_t>(repeats, 1); ++repeat) {
    // 1. The single-rank reference: rank 0 alone, same config and global batch.
    double np1 = 0;
    if (world.size() > 1) {
      // The others wait for it, asleep; a failure of rank 0's run (a missing data file) ends
      // every rank together instead of leaving them in the barrier.
      agree_after_sleeping(world, "rank 0's single-rank reference run", [&] {
        if (world.rank() != 0) return;
        auto self = make_mpi_self_communicator();
        TrainOptions alone = options;
        alone.config.set("metrics.trace", "", "mgtrain bench");  // the trace is the all-rank run's
        try {
          np1 = train(*self, alone, silent).samples_per_s;
        } catch (const std::exception& e) {
          // Said plainly: an error of this run speaks of one rank where the user started several.
          throw Error(std::string("bench's single-rank reference run (rank 0 alone, which bench compares with all "
                                  "ranks): ") +
                      e.what());
        }
      });
      world.broadcast(&np1, sizeof(double), 0);
    }
    // 2. All ranks. Each rank's peak memory from here on is this run's alone: rank 0's reference
    // run above, with every rank's rows, would otherwise be what it reports.
    reset_peak_rss();
    result.run = train(world, options, silent);
    if (world.size() == 1) np1 = result.run.samples_per_s;
    np1_runs.push_back(np1);
    all_runs.push_back(result.run.samples_per_s);
    result.scaling_runs.push_back(result.run.samples_per_s / (world.size() * std::max(np1, 1e-9)));
  }
  result.run.samples_per_s = median(all_runs);
  result.samples_per_s_np1 = median(np1_runs);
  result.scaling_efficiency = median(result.scaling_runs);

  // 3. All-reduce of the gradient buffer through the sync strategy, against raw MPI_Allreduce.
  Config config = options.config;
  PluginRegistry registry(options.plugin_paths);
  ParameterStore store;
  build_model(registry, config, store);
  auto sync = registry.create_sync(config.get_string("sync.name"), config);
  sync->setup(world, store);
  std::vector<std::vector<ParamHandle>> backward_order;
  for (size_t h = store.params().size(); h-- > 0;) backward_order.push_back({h});
  // Everything the strategy does in one optimizer step: every micro-batch (a deterministic
  // strategy's micro-shards, an accumulating one's local steps), then the reduction.
  // A strategy that splits the optimizer step among the ranks (sharding()) also gathers the updated
  // parameters, after the step's agreement: its communication per step, as an all-reduce's is.
  auto step_of = [&](SyncStrategy& strategy) {
    return [&strategy, &backward_order] {
      for (int64_t m = 0; m < strategy.accumulation_steps(); ++m) {
        strategy.begin_micro_batch(m);
        for (const auto& handles : backward_order) strategy.gradients_ready(handles);
        strategy.end_backward(m);
      }
      if (OptimizerSharding* sharding = strategy.sharding()) {
        double checks[2] = {0, 0};
        sharding->sum_over_ranks(checks, 2);
        sharding->gather_parameters();
      }
    };
  };
  const auto sync_once = step_of(*sync);
  auto mpi_once = [&] {
    MPI_Allreduce(MPI_IN_PLACE, store.grads_data(), static_cast<int>(store.flat_size()), MPI_FLOAT, MPI_SUM,
                  MPI_COMM_WORLD);
  };
  auto time_per_call = [&](const auto& once) {
    for (int i = 0; i < 5; ++i) once();
    world.barrier();
    const auto start = Clock::now();
    for (int64_t i = 0; i < allreduce_iterations; ++i) once();
    double seconds =
        std::chrono::duration<double>(Clock::now() - start).count() / static_cast<double>(allreduce_iterations);
    world.allreduce_sum(&seconds, 1);  // the mean over ranks, as nccl-tests reports
    return seconds / world.size();
  };
  result.gradient_bytes = store.flat_size() * sizeof(float);
  const double sync_seconds = time_per_call(sync_once);
  const double mpi_seconds = time_per_call(mpi_once);
  result.allreduce_ms = sync_seconds * 1e3;
  result.mpi_allreduce_ms = mpi_seconds * 1e3;
  result.allreduce_busbw_gbs = bus_bandwidth_gbs(result.gradient_bytes, world.size(), sync_seconds);
  result.mpi_busbw_gbs = bus_bandwidth_gbs(result.gradient_bytes, world.size(), mpi_seconds);

  // 4. A strategy with sync.hierarchical and sync.shared_memory, timed three ways on this topology:
  // flat through MPI, through one leader per node, through each node's shared memory (blocking,
  // with the FP32 wire: the forms the shared memory applies to).
  const bool deterministic = config.has("sync.deterministic") && config.get_bool("sync.deterministic");
  if (config.has("sync.hierarchical") && config.has("sync.shared_memory") && !deterministic) {
    struct Form {
      const char *hierarchical, *shared_memory;
      double* busbw;
    };
    for (const Form& f : {Form{"off", "off", &result.flat_busbw_gbs}, Form{"on", "off", &result.hierarchical_busbw_gbs},
                          Form{"off", "on", &result.shared_memory_busbw_gbs}}) {
      Config form = config;
      form.set("sync.hierarchical", f.hierarchical, "mgtrain bench");
      form.set("sync.shared_memory", f.shared_memory, "mgtrain bench");
      form.set("sync.overlap", "false", "mgtrain bench");
      form.set("sync.wire", "fp32", "mgtrain bench");
      auto strategy = registry.create_sync(form.get_string("sync.name"), form);
      strategy->setup(world, store);
      *f.busbw = bus_bandwidth_gbs(result.gradient_bytes, world.size(), time_per_call(step_of(*strategy)));
    }
  }
  return result;
}

std::string bench_result_json(const BenchResult& b, int world_size, int64_t steps, int64_t repeats) {
  const StepPhases& p = b.run.phases;
  JsonValue runs = JsonValue::array();
  for (double s : b.scaling_runs) runs.push_back(json_fixed(s, 6));
  JsonValue o;
  o["world_size"] = world_size;
  o["steps"] = steps;
  o["samples_per_s"] = json_fixed(b.run.samples_per_s, 3);
  o["samples_per_s_np1"] = json_fixed(b.samples_per_s_np1, 3);
  o["scaling_efficiency"] = json_fixed(b.scaling_efficiency, 4);
  o["compute_ms"] = json_fixed(1e3 * p.compute, 4);
  o["sync_ms"] = json_fixed(1e3 * p.sync, 4);
  o["data_wait_ms"] = json_fixed(1e3 * p.data_wait, 4);
  o["optimizer_ms"] = json_fixed(1e3 * p.optimizer, 4);
  o["gradient_bytes"] = b.gradient_bytes;
  o["allreduce_ms"] = json_fixed(b.allreduce_ms, 4);
  o["mpi_allreduce_ms"] = json_fixed(b.mpi_allreduce_ms, 4);
  o["allreduce_busbw_gbs"] = json_fixed(b.allreduce_busbw_gbs, 4);
  o["mpi_busbw_gbs"] = json_fixed(b.mpi_busbw_gbs, 4);
  o["flat_busbw_gbs"] = json_fixed(b.flat_busbw_gbs, 4);
  o["hierarchical_busbw_gbs"] = json_fixed(b.hierarchical_busbw_gbs, 4);
  o["shared_memory_busbw_gbs"] = json_fixed(b.shared_memory_busbw_gbs, 4);
  o["peak_rss_mb"] = json_fixed(b.run.peak_rss_mb, 1);
  o["repeats"] = repeats;
  o["scaling_efficiency_runs"] = std::move(runs);
  o["device"] = b.run.device;
  return json_line(o);
}

}  // namespace mgt
