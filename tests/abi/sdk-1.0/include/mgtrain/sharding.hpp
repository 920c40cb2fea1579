#pragma once
// The optimizer sharding of a sync strategy that updates only a shard of the parameters on each
// rank (ZeRO stage 1, `sync.name = zero`): each rank keeps the optimizer state of its shard alone,
// so that state's memory falls as 1 / ranks. A strategy that shards returns this from
// SyncStrategy::sharding(); the others update the whole buffer on every rank and need none of it.
//
// The core, per step: after end_backward returns true, the non-finite check and the gradient's
// norm over this rank's shard (combined over the ranks, so every rank skips and clips alike; over
// the store's whole gradient where whole_gradient() says every rank holds it), the update of the
// shard with the optimizer set up for shard_size() floats, then gather_parameters(). Checkpoints
// hold the whole, unsharded state: gather_state() before rank 0 writes one, scatter_state() after
// rank 0 read one for a resume, so a checkpoint loads at any world size and under any strategy.
#include <cstddef>

#include "mgtrain/export.hpp"

namespace mgt {

class MGT_API OptimizerSharding {
 public:
  virtual ~OptimizerSharding() = default;
  // Floats this rank updates (padding included): what the optimizer is set up for, the length of
  // shard_params() and shard_grads(), and of every optimizer state buffer.
  virtual size_t shard_size() const = 0;
  // This rank's shard of the parameters and of the reduced gradient, contiguous; current once
  // end_backward returned true. Padding elements are zero in both.
  virtual float* shard_params() = 0;
  virtual float* shard_grads() = 0;
  // True when end_backward also leaves the whole reduced gradient in the store's gradient buffer,
  // the same on every rank (deterministic mode): the core then takes its norm over all of it, in
  // one fixed order, so the bits do not depend on the number of ranks.
  virtual bool whole_gradient() const = 0;
  // Sums `count` doubles over the ranks, in place (the core's per-step agreement).
  virtual void sum_over_ranks(double* values, size_t count) = 0;
  // After the shard's update: every rank's shard into the store's parameters, on every rank.
  virtual void gather_parameters() = 0;
  // One optimizer state buffer, shard_size() floats on every rank, into `whole` (the store's
  // flat_size() floats, in its layout) on rank 0; `whole` is ignored elsewhere. Collective.
  virtual void gather_state(const float* shard, float* whole) = 0;
  // The reverse: rank 0's `whole` (ignored elsewhere) cut into every rank's `shard`. Collective.
  virtual void scatter_state(const float* whole, float* shard) = 0;
};

}  // namespace mgt
