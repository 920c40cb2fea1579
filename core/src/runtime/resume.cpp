#include "runtime/resume.hpp"

#include <ostream>

#include "runtime/agreement.hpp"
#include "runtime/checkpointing.hpp"
#include "runtime/run.hpp"
#include "runtime/serving_loop.hpp"

namespace mgt {

namespace {

// Rank 0, resuming: the optimizer the checkpoint's state is read into. A sharded optimizer's
// state is whole in the checkpoint: it goes into a whole-size one, which
// broadcast_optimizer_state() then cuts into every rank's shard.
Optimizer* resume_optimizer(Run& run) {
  if (!run.sync->sharding()) return run.optimizer.get();
  if (!run.whole_state) run.whole_state = whole_size_optimizer(run);
  return run.whole_state.get();
}

// Rank 0: loads the newest checkpoint of the directory other than `skipped` that loads and
// returns its path, "" when none does; each refused one is a warning on `warnings` where given.
std::string load_newest_checkpoint_but(Run& run, const std::string& skipped, std::ostream* warnings) {
  for (const std::string& older : list_checkpoints(run.checkpoint_dir)) {
    if (older == skipped) continue;
    try {
      run.meta = load_checkpoint(older, run.store, resume_optimizer(run));
      run.resumed_from = older;
      return older;
    } catch (const Error& e) {
      if (warnings) *warnings << "warning: " << e.what() << "\n" << std::flush;
    }
  }
  return "";
}

// Rank 0: the checkpoint --resume names, or with checkpoint.resume_fallback and "latest", the
// newest one in the directory that loads, each refused one named in a warning. Without the
// fallback, its error suggests it only where it would help: resuming from "latest", with an older
// checkpoint of the directory that loads.
void load_resume_checkpoint(Run& run) {
  const bool latest = run.options.resume == "latest";
  const bool fallback = latest && run.config.get_bool("checkpoint.resume_fallback");
  std::string path;
  try {
    path = resolve_resume(run.checkpoint_dir, run.options.resume);
    run.meta = load_checkpoint(path, run.store, resume_optimizer(run));
    run.resumed_from = path;
    return;
  } catch (const Error& e) {
    if (!fallback) {
      const std::string older = latest ? load_newest_checkpoint_but(run, path, nullptr) : "";
      if (older.empty()) throw;
      throw IoError(std::string(e.what()) + "; checkpoint.resume_fallback = true would resume from '" + older +
                    "', the newest other checkpoint of '" + run.checkpoint_dir + "' that loads");
    }
    run.log << "warning: " << e.what() << "\n" << std::flush;
  }
  const std::string older = load_newest_checkpoint_but(run, path, &run.log);
  if (older.empty())
    throw IoError("--resume latest: no checkpoint in '" + run.checkpoint_dir +
                  "' loads (checkpoint.resume_fallback tried each, newest first; see the warnings above)");
  run.log << "warning: checkpoint.resume_fallback: resuming from " << older << " instead\n" << std::flush;
}

// Rank 0: the checkpoint's position is a sample offset in its epoch, checked against the data;
// under another train.global_batch the run continues from that same sample, or is refused.
void continue_at_the_same_sample(Run& run) {
  const ResumePosition at =
      resume_position(run.resumed_from, run.meta, run.global_batch, run.reader->info().num_samples, run.per_epoch);
  run.meta.epoch = at.epoch;
  run.meta.batch_in_epoch = at.batch_in_epoch;
  run.resume_note = at.note;
}

// On resume: every training rank's arrays back to it (restore_state), when the checkpoint was
// written by a strategy of this name.
void restore_sync_state(Run& run) {
  int64_t saved_ranks = 0;
  if (run.leader && run.resumed_sync.strategy == run.choice.sync && !run.resumed_sync.arrays.empty())
    saved_ranks = run.meta.world_size;
  run.comm.broadcast(&saved_ranks, sizeof(saved_ranks), 0);
  if (saved_ranks == 0) return;
  std::vector<SyncStateArray> mine;
  if (run.leader) {
    for (int r = run.comm.size() - 1; r >= 0; --r) {
      const std::string suffix = ".rank" + std::to_string(r);
      std::vector<SyncStateArray> arrays;
      for (const auto& [name, values] : run.resumed_sync.arrays)
        if (name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0)
          arrays.push_back({name.substr(0, name.size() - suffix.size()), values});
      if (r == 0) {
        mine = std::move(arrays);
        break;
      }
      const std::vector<char> blob = pack_sync_arrays(arrays, r);
      const int64_t size = static_cast<int64_t>(blob.size());
      run.comm.send(&size, sizeof(size), r, kSyncStateTag);
      if (size > 0) run.comm.send(blob.data(), blob.size(), r, kSyncStateTag);
    }
  } else {
    int64_t size = 0;
    run.comm.recv(&size, sizeof(size), 0, kSyncStateTag);
    std::vector<char> blob(static_cast<size_t>(size));
    if (size > 0) run.comm.recv(blob.data(), blob.size(), 0, kSyncStateTag);
    mine = unpack_sync_arrays(blob);
  }
  run.sync->restore_state(mine, static_cast<int>(saved_ranks));
}

// After a resume read on rank 0: every rank's optimizer state and step count from rank 0's.
void broadcast_optimizer_state(Run& run) {
  OptimizerSharding* sharding = run.sync->sharding();
  if (!sharding) {
    for (auto& buffer : run.optimizer->state_buffers())
      run.comm.broadcast(buffer.data, run.store.flat_size() * sizeof(float), 0);
    return;
  }
  int64_t steps = run.whole_state ? run.whole_state->step_count() : 0;
  run.comm.broadcast(&steps, sizeof(steps), 0);
  run.optimizer->set_step_count(steps);
  auto shards = run.optimizer->state_buffers();
  const auto wholes = run.whole_state ? run.whole_state->state_buffers() : std::vector<OptimizerStateBuffer>{};
  for (size_t k = 0; k < shards.size(); ++k)
    sharding->scatter_state(run.leader ? wholes.at(k).data : nullptr, shards[k].data);
  run.whole_state.reset();
}

}  // namespace

void resume(Run& run) {
  agree(run.comm, [&] {
    if (run.leader) {
      load_resume_checkpoint(run);
      continue_at_the_same_sample(run);
      // The strategy that wrote it kept its own counters: this run's strategy may take them
      // (start_serving), its checkpoints keep their own.
      run.resumed_sync = std::move(run.meta.sync);
      run.meta.sync = SyncState{};
      if (run.serving && run.resumed_sync.strategy == run.choice.sync)
        serving_position(run.resumed_sync, run.resumed_from);
    }
  });
  int64_t position[4] = {run.meta.step, run.meta.epoch, run.meta.batch_in_epoch, run.optimizer->step_count()};
  run.comm.broadcast(position, sizeof(position), 0);
  run.meta.step = position[0];
  run.meta.epoch = position[1];
  run.meta.batch_in_epoch = position[2];
  run.optimizer->set_step_count(position[3]);
  // Parameters the node's ranks share (a shared update, one node) are rank 0's already.
  if (!run.store.params_placed()) run.comm.broadcast(run.store.params_data(), run.store.flat_size() * sizeof(float), 0);
  if (run.store.buffers_size() > 0)
    run.comm.broadcast(run.store.buffers_data(), run.store.buffers_size() * sizeof(float), 0);
  // A serving strategy's ranks hold parts of the optimizer state: it hands them out (start_serving).
  if (!run.serving) broadcast_optimizer_state(run);
  if (!run.serving) restore_sync_state(run);
  if (run.leader) {
    run.log << "resumed from step " << run.meta.step << " (epoch " << run.meta.epoch + 1 << ", batch "
            << run.meta.batch_in_epoch << ")\n";
    if (!run.resume_note.empty()) run.log << run.resume_note << "\n";
  }
}

}  // namespace mgt
