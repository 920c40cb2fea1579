#pragma once
// Batch norm's statistics over more than one pass (StepContext::batch_statistics): the partial
// sums come from the executor's memory (a GPU's too: copied through the host), are summed over the
// ranks on a communicator of their own, and go back.
#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/backend.hpp"
#include "mgtrain/communicator.hpp"
#include "mgtrain/layers.hpp"

namespace mgt {

// model.sync_bn: over every training rank's pass, by an all-reduce, as PyTorch's SyncBatchNorm
// (the order of the sum is MPI's).
class AllRanksStatistics final : public BatchStatistics {
 public:
  AllRanksStatistics(kernels::Backend& backend, Communicator& comm) : backend_(backend), comm_(comm) {}
  void sum(Ops& ops, const float* partial, int64_t shards, int64_t count, float* total, double* elements) override;

 private:
  kernels::Backend& backend_;
  Communicator& comm_;
  std::vector<float> host_;
};

// Deterministic mode: over every micro-shard of the global batch, rank r holding shards
// [r K, (r + 1) K) in one pass. Every rank gathers all shards' sums and adds them in the shard
// order, so the total is the same bits on every rank and at any world size.
class DeterministicStatistics final : public BatchStatistics {
 public:
  DeterministicStatistics(kernels::Backend& backend, Communicator& comm, int64_t shards_per_rank)
      : backend_(backend), comm_(comm), shards_per_rank_(shards_per_rank) {}
  void sum(Ops& ops, const float* partial, int64_t shards, int64_t count, float* total, double* elements) override;

 private:
  kernels::Backend& backend_;
  Communicator& comm_;
  int64_t shards_per_rank_;
  std::vector<float> host_, gathered_, total_;
};

}  // namespace mgt
