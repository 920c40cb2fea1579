#pragma once
// The serving role of a sync strategy that takes some ranks out of training (a parameter server):
// which ranks train and which serve, the serving loop, and how such a run ends. A strategy that
// has one returns it from SyncStrategy::serving(); every other strategy trains on all ranks in
// lock step and needs none of this.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "mgtrain/communicator.hpp"
#include "mgtrain/export.hpp"
#include "mgtrain/optimizer.hpp"

namespace mgt {

// Where an asynchronous run stands, as its checkpoints keep it (under /sync): the updates every
// server had applied, and the steps each training rank had pushed that were applied.
struct ServingPosition {
  int64_t updates = 0;
  std::vector<int64_t> worker_steps;
};

// How a run starts, told to every rank before it trains or serves.
struct ServingStart {
  int64_t step = 0;              // the run's first step: 0, or the step of the checkpoint it resumes
  int64_t checkpoint_every = 0;  // steps between checkpoints (checkpoint.every_steps); 0: the final one only
  bool resumed = false;
  // Rank 0 of a resumed run: what its checkpoint kept (nothing when another strategy wrote it).
  // Its optimizer then holds the checkpoint's whole state, of which the serving ranks take theirs.
  ServingPosition saved;
};

// What a serving rank (a parameter server) needs from the trainer.
struct ServeContext {
  int64_t steps_per_worker = 0;                       // the run's steps still to take, per training rank
  std::function<double(int64_t step)> learning_rate;  // the trainer's schedule
  // Appends one JSON record (no newline) to this rank's metrics file. The core writes whole lines
  // and checks each write: on a failure (a full disk) it warns once and drops later records.
  std::function<void(const std::string& json)> write_metrics;
  int64_t log_every = 50;  // steps between records
};

// What the trainer asks of a serving strategy, beyond what SyncStrategy asks of every one.
class MGT_API ServingRole {
 public:
  virtual ~ServingRole() = default;
  // False on ranks that serve: the trainer calls serve() there instead of the training loop.
  virtual bool trains() const = 0;
  // This rank's place among the training ranks, and their number, for sharding the data.
  virtual int train_rank(const Communicator& comm) const { return comm.rank(); }
  virtual int train_world(const Communicator& comm) const = 0;
  // Runs the serving side until every training rank is done; `optimizer` was set up for
  // serve_size() floats and updates this rank's shard, through optimizer.apply_update() (not
  // step(), which is the update of an optimizer without an element update alone).
  virtual void serve(Optimizer& optimizer, const ServeContext& context) = 0;
  virtual size_t serve_size() const = 0;
  // Where this serving rank's range starts in the flat buffer: its optimizer updates floats
  // [serve_offset(), serve_offset() + serve_size()). SIZE_MAX: not one contiguous range, which
  // optimizer.weight_decay_on = matrices then refuses (its mask follows the store's layout).
  virtual size_t serve_offset() const { return SIZE_MAX; }
  // True when the training ranks take every step together (the trainer may then combine their
  // figures each logging interval); false for asynchronous strategies.
  virtual bool lockstep() const { return true; }
  // True once a training rank should stop early (asynchronous runs end on the servers' count).
  virtual bool finished() const { return false; }
  // On every rank, before training or serving, after a resumed run's parameters reached every
  // rank: where the run starts (a collective among all ranks).
  virtual void start(Optimizer& optimizer, const ServingStart& start) {
    (void)optimizer;
    (void)start;
  }
  // The step this training rank takes next, from the run's first step: a resumed worker goes on
  // from its own position.
  virtual int64_t first_step(int64_t run_step) const { return run_step; }
  // Rank 0, between its steps, with checkpoints every few steps: true once the serving ranks' state
  // of one moment has arrived whole, its parameters then in `params` (the store's flat layout) and
  // its optimizer state in `optimizer` (set up for the whole buffer), where the run stood in `at`.
  virtual bool take_snapshot(float* params, Optimizer& optimizer, ServingPosition& at) {
    (void)params;
    (void)optimizer;
    (void)at;
    return false;
  }
  // On every rank after training: brings the authoritative parameters and optimizer state to
  // rank 0's store and optimizer, for the final checkpoint.
  virtual void gather_state(Optimizer& optimizer) = 0;
  // Rank 0, after gather_state: where the run stands (the final checkpoint's position).
  virtual ServingPosition position() const { return {}; }
  // After gather_state: ranks the run went on without (a parameter server configured to continue
  // when a worker is lost). Non-empty means no collective over all ranks may follow: the trainer
  // skips them, and rank 0 ends the job with MPI_Abort and status 0 instead of MPI_Finalize.
  virtual std::vector<int> lost_ranks() const { return {}; }
};

}  // namespace mgt
