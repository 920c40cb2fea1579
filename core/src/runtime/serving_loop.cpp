#include "runtime/serving_loop.hpp"

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "io/append_file.hpp"
#include "runtime/checkpointing.hpp"
#include "runtime/run.hpp"
#include "runtime/startup.hpp"

namespace mgt {

namespace {

// A serving run's position as its checkpoints keep it (/sync), and back.
SyncState sync_counters(const std::string& strategy, const ServingPosition& at) {
  return {strategy, {{"updates", {at.updates}}, {"worker_steps", at.worker_steps}}, {}};
}

}  // namespace

ServingPosition serving_position(const SyncState& sync, const std::string& path) {
  const auto value = [&](const char* name) {
    const auto it = sync.counters.find(name);
    if (it == sync.counters.end() || it->second.empty())
      throw DataError("checkpoint '" + path + "': '/sync' of strategy '" + sync.strategy + "' has no dataset '" + name +
                      "'");
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

void start_serving(Run& run) {
  ServingStart start;
  start.step = run.meta.step;
  start.checkpoint_every = run.options.write_checkpoints ? run.config.get_int("checkpoint.every_steps") : 0;
  start.resumed = !run.options.resume.empty();
  if (run.leader && start.resumed && run.resumed_sync.strategy == run.choice.sync)
    start.saved = serving_position(run.resumed_sync, run.resumed_from);
  run.serving->start(*run.optimizer, start);
}

CheckpointMeta served_meta(const Run& run, const ServingPosition& at) {
  CheckpointMeta meta = run.meta;
  // A push already on its way when the run's count was reached is applied too.
  meta.step = std::min(at.updates / run.train_world(), run.total_steps);
  const int64_t position = std::max<int64_t>(0, run.run_position + meta.step);
  meta.epoch = position / run.per_epoch;
  meta.batch_in_epoch = position % run.per_epoch;
  meta.sync = sync_counters(run.choice.sync, at);
  return meta;
}

void write_served_checkpoint(Run& run) {
  run.served_params.resize(run.store.flat_size());
  ServingPosition at;
  if (!run.serving->take_snapshot(run.served_params.data(), *run.optimizer, at)) return;
  TraceSpan checkpoint_span(run.traced(), "checkpoint", "updates", at.updates);
  CheckpointMeta meta = served_meta(run, at);
  float* params = run.store.params_data();
  std::swap_ranges(params, params + run.store.flat_size(), run.served_params.begin());
  try {
    run.result.checkpoint = write_run_checkpoint(run, meta, run.optimizer.get());
  } catch (...) {
    std::swap_ranges(params, params + run.store.flat_size(), run.served_params.begin());
    throw;
  }
  std::swap_ranges(params, params + run.store.flat_size(), run.served_params.begin());
}

TrainResult serve(Run& run) {
  ServeContext context;
  context.steps_per_worker = run.total_steps - run.meta.step;
  context.learning_rate = [&](int64_t step) { return run.schedule->at(step); };
  // <dir>/metrics.jsonl -> <dir>/metrics.rank<R>.jsonl, by whole lines and checked as the main
  // metrics file is: a file that cannot be written is a warning, and the run serves on without it.
  const std::filesystem::path main_file = metrics_path(run.config, run.checkpoint_dir);
  const std::string path =
      (main_file.parent_path() /
       (main_file.stem().string() + ".rank" + std::to_string(run.comm.rank()) + main_file.extension().string()))
          .string();
  std::error_code ec;
  std::filesystem::create_directories(main_file.parent_path(), ec);
  std::unique_ptr<AppendFile> metrics;
  const auto metrics_off = [&](const std::string& why) {
    std::fprintf(stderr, "mgtrain: warning: [rank %d] %s; metrics are off for the rest of the run\n", run.comm.rank(),
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
  context.log_every = run.log_every;
  TraceSpan serve_span(run.traced(), "serve");
  run.serving->serve(*run.optimizer, context);
  serve_span.end();
  run.serving->gather_state(*run.optimizer);
  run.result.lost_ranks = run.serving->lost_ranks();
  if (run.result.lost_ranks.empty()) run.comm.barrier();  // the final checkpoint is written
  if (run.trace) run.trace->write(run.comm, run.result.lost_ranks.empty(), run.log);
  return run.result;
}

}  // namespace mgt
