#pragma once
// The run's checkpoints: the directory claimed at start-up, and each checkpoint's state gathered
// from every training rank (the sync strategy's own arrays, a sharded optimizer's shards) to rank
// 0, which writes it.
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "checkpoint/checkpoint.hpp"
#include "mgtrain/optimizer.hpp"
#include "mgtrain/sync.hpp"

namespace mgt {

struct Run;

// The checkpoint directory, before any step: it exists or can be made, takes new files, is no
// other running job's, and holds neither another run's checkpoints nor, resuming from one of its
// own, newer ones, unless checkpoint.overwrite lets the first checkpoint of this run remove them
// (write_run_checkpoint): a run that fails a check before then leaves them as they are. Rank 0
// writes the checkpoints and holds the directory's lock until the run ends.
void claim_checkpoint_dir(Run& run);

// Rank 0's checkpoint writes to disk beside training: the step's state is copied into an image at
// once (prepare_checkpoint), and its write, fsync and rename run on a thread of their own while the
// next steps run, so that a checkpoint costs the step little more than a copy. One write at a time:
// the next waits for this one. A failed write's error comes out of that wait, ending the run as a
// failed write always has, with `latest` naming the checkpoint before.
class CheckpointWriter {
 public:
  CheckpointWriter() = default;
  CheckpointWriter(const CheckpointWriter&) = delete;
  CheckpointWriter& operator=(const CheckpointWriter&) = delete;
  // Waits for a write in flight, so a run that fails elsewhere still leaves it whole.
  ~CheckpointWriter();
  void start(std::function<std::string()> write);
  // The path of the write in flight once it is on disk ("" for none); rethrows its error.
  std::string wait();

 private:
  std::future<std::string> pending_;
};

// Rank 0: a checkpoint of this run, on disk when it returns (after any write in flight); the
// first one also removes the checkpoints that checkpoint.overwrite replaces, now that the run has
// one of its own.
std::string write_run_checkpoint(Run& run, const CheckpointMeta& meta, Optimizer* optimizer);
// Rank 0: the same, its disk half in the background (CheckpointWriter); returns the path it will
// have. The first checkpoint of a run that replaces an earlier run's is written in full here.
std::string start_run_checkpoint(Run& run, const CheckpointMeta& meta, Optimizer* optimizer);

// Every training rank's own state of a lock-step sync strategy (checkpoint_state), on rank 0 as
// the arrays "<name>.rank<R>" of the checkpoint's /sync; empty when the strategy keeps none.
// Every training rank calls it at each checkpoint.
SyncState gather_sync_state(Run& run);

// Collective. A sharded optimizer's state, whole on rank 0 (null elsewhere, and null for an
// unsharded optimizer, whose own state is whole): what a checkpoint holds, so that it loads at
// any world size and under any strategy. Made for one write and then freed.
std::unique_ptr<Optimizer> gather_sharded_optimizer_state(Run& run);

// Another instance of the run's optimizer plugin, with state for the whole flat buffer.
std::unique_ptr<Optimizer> whole_size_optimizer(Run& run);

// A rank's sync-strategy arrays as one message and back (resume hands them out again). Names must
// be plain (letters, digits, '_', '-'): they become dataset names.
std::vector<char> pack_sync_arrays(const std::vector<SyncStateArray>& arrays, int rank);
std::vector<SyncStateArray> unpack_sync_arrays(const std::vector<char>& blob);
// The tag of the messages that carry them.
constexpr int kSyncStateTag = 7301;

}  // namespace mgt
