#include "runtime/checkpointing.hpp"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <filesystem>
#include <new>

#include "base/host_memory.hpp"
#include "runtime/run.hpp"

namespace mgt {

// Per array: its name's length, the name, its length and its floats.
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

void claim_checkpoint_dir(Run& run) {
  agree(run.comm, [&] {
    if (!run.leader || !run.options.write_checkpoints) return;
    run.checkpoint_lock = std::make_unique<CheckpointDirLock>(run.checkpoint_dir);
    const std::string other_run = checkpoint_of_another_run(run.checkpoint_dir, run.options.resume);
    const std::vector<std::string> newer =
        other_run.empty() ? checkpoints_after(run.checkpoint_dir, run.options.resume) : std::vector<std::string>{};
    if (other_run.empty() && newer.empty()) return;
    if (run.config.get_bool("checkpoint.overwrite")) {
      run.replaced_checkpoints = other_run.empty() ? newer : list_checkpoints(run.checkpoint_dir);
      return;
    }
    if (!other_run.empty())
      throw IoError(
          "checkpoint.dir '" + run.checkpoint_dir + "' holds the checkpoints of another run (newest '" + other_run +
          "') and this run " +
          (run.options.resume.empty() ? "starts afresh" : "resumes from '" + run.options.resume + "', outside it") +
          ": its checkpoints would mix with them, pruning would delete theirs and 'latest' would move "
          "back; --resume latest continues that run, --checkpoint.overwrite=true removes its checkpoints "
          "once this run writes its first, or give another checkpoint.dir");
    std::string names;
    for (size_t i = 0; i < newer.size() && i < 5; ++i) names += (i ? ", '" : "'") + newer[i] + "'";
    if (newer.size() > 5) names += " and " + std::to_string(newer.size() - 5) + " more";
    const std::string resumed =
        run.options.resume == "latest" ? resolve_resume(run.checkpoint_dir, run.options.resume) : run.options.resume;
    throw IoError(
        "checkpoint.dir '" + run.checkpoint_dir + "' holds " + std::to_string(newer.size()) +
        " checkpoint(s) newer than '" + resumed + "', which this run resumes from" +
        (run.options.resume == "latest" ? " ('latest' names it)" : "") + ": " + names +
        "; rolled back, this run's checkpoints would mix with them, pruning would delete the wrong ones "
        "and 'latest' would move back; " +
        (run.options.resume == "latest" ? "--resume '" + newer.front() + "'" : std::string("--resume latest")) +
        " continues from the newest, "
        "--checkpoint.overwrite=true removes the newer ones once this run writes its first checkpoint, "
        "or give another checkpoint.dir");
  });
}

CheckpointWriter::~CheckpointWriter() {
  try {
    wait();
  } catch (...) {
    // The run is failing already (or ends with this error reported by an earlier wait).
  }
}

void CheckpointWriter::start(std::function<std::string()> write) {
  wait();
  pending_ = std::async(std::launch::async, std::move(write));
}

std::string CheckpointWriter::wait() {
  if (!pending_.valid()) return "";
  return pending_.get();
}

std::string start_run_checkpoint(Run& run, const CheckpointMeta& meta, Optimizer* optimizer) {
  if (!run.replaced_checkpoints.empty()) return write_run_checkpoint(run, meta, optimizer);
  run.checkpoint_writer.wait();
  auto prepared =
      std::make_shared<PreparedCheckpoint>(prepare_checkpoint(run.checkpoint_dir, meta, run.store, optimizer));
  const int64_t keep = run.config.get_int("checkpoint.keep");
  const std::string path = (std::filesystem::path(run.checkpoint_dir) / prepared->name).string();
  run.checkpoint_writer.start([prepared, keep] { return commit_checkpoint(*prepared, keep); });
  return path;
}

std::string write_run_checkpoint(Run& run, const CheckpointMeta& meta, Optimizer* optimizer) {
  run.checkpoint_writer.wait();
  int removed = 0;
  const std::string path = write_checkpoint(run.checkpoint_dir, meta, run.store, optimizer,
                                            run.config.get_int("checkpoint.keep"), run.replaced_checkpoints, &removed);
  if (!run.replaced_checkpoints.empty()) {
    run.replaced_checkpoints.clear();
    run.log << "removed " << removed << " checkpoint(s) of an earlier run in " << run.checkpoint_dir
            << " (checkpoint.overwrite = true)\n"
            << std::flush;
  }
  return path;
}

SyncState gather_sync_state(Run& run) {
  std::vector<char> mine;
  std::string why;
  try {
    mine = pack_sync_arrays(run.sync->checkpoint_state(), run.comm.rank());
  } catch (const std::bad_alloc&) {
    why = out_of_host_memory("packing the sync strategy's state for the checkpoint", kLowerTheMicroBatch);
  } catch (const std::exception& e) {
    why = e.what();
  }
  // A rank that cannot give its state says so with a size of -1: every rank then stops.
  const int64_t my_size = why.empty() ? static_cast<int64_t>(mine.size()) : -1;
  std::vector<int64_t> sizes(static_cast<size_t>(run.train_comm->size()));
  run.train_comm->allgather(&my_size, sizes.data(), sizeof(int64_t));
  if (!why.empty()) throw Error(why);
  for (size_t r = 0; r < sizes.size(); ++r)
    if (sizes[r] < 0)
      throw Error("rank " + std::to_string(r) + " could not give the sync strategy's state for the checkpoint");
  SyncState state;
  if (std::all_of(sizes.begin(), sizes.end(), [](int64_t n) { return n == 0; })) return state;
  if (!run.leader) {
    if (my_size > 0) run.train_comm->send(mine.data(), mine.size(), 0, kSyncStateTag);
    return state;
  }
  state.strategy = run.choice.sync;
  for (int r = 0; r < run.train_comm->size(); ++r) {
    std::vector<char> blob = r == 0 ? mine : std::vector<char>(static_cast<size_t>(sizes[r]));
    if (r > 0 && !blob.empty()) run.train_comm->recv(blob.data(), blob.size(), r, kSyncStateTag);
    for (auto& array : unpack_sync_arrays(blob))
      state.arrays[array.name + ".rank" + std::to_string(r)] = std::move(array.values);
  }
  return state;
}

std::unique_ptr<Optimizer> whole_size_optimizer(Run& run) {
  auto whole = run.registry.create_optimizer(run.choice.optimizer, run.config);
  whole->setup(run.store.flat_size());
  return whole;
}

std::unique_ptr<Optimizer> gather_sharded_optimizer_state(Run& run) {
  OptimizerSharding* sharding = run.sync->sharding();
  if (!sharding) return nullptr;
  std::unique_ptr<Optimizer> whole = run.leader ? whole_size_optimizer(run) : nullptr;
  auto shards = run.optimizer->state_buffers();
  const auto wholes = whole ? whole->state_buffers() : std::vector<OptimizerStateBuffer>{};
  for (size_t k = 0; k < shards.size(); ++k)
    sharding->gather_state(shards[k].data, whole ? wholes.at(k).data : nullptr);
  if (whole) whole->set_step_count(run.optimizer->step_count());
  return whole;
}

}  // namespace mgt
