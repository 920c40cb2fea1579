#include "device/batch_statistics.hpp"

#include <algorithm>
#include <string>

#include "mgtrain/error.hpp"

namespace mgt {

void AllRanksStatistics::sum(Ops&, const float* partial, int64_t shards, int64_t count, float* total,
                             double* elements) {
  const auto n = static_cast<size_t>(count);
  host_.resize(static_cast<size_t>(shards) * n);
  backend_.download(host_.data(), partial, host_.size() * sizeof(float));
  for (int64_t k = 1; k < shards; ++k)
    for (size_t j = 0; j < n; ++j) host_[j] += host_[static_cast<size_t>(k) * n + j];
  comm_.allreduce_sum(host_.data(), n);
  if (elements) comm_.allreduce_sum(elements, 1);
  backend_.upload(total, host_.data(), n * sizeof(float));
}

void DeterministicStatistics::sum(Ops&, const float* partial, int64_t shards, int64_t count, float* total,
                                  double* elements) {
  MGT_CHECK(shards == shards_per_rank_, ConfigError,
            "batch norm in deterministic mode sums its statistics over every micro-shard of the global batch, so "
            "a rank's " +
                std::to_string(shards_per_rank_) + " micro-shards must go through one pass, but this pass holds " +
                std::to_string(shards) +
                " (the step in device memory, a GPU's, runs one micro-shard a pass: train.device = cpu runs "
                "them together, or set sync.micro_shards to the number of ranks)");
  const auto n = static_cast<size_t>(count);
  const size_t local = static_cast<size_t>(shards) * n;
  host_.resize(local);
  backend_.download(host_.data(), partial, local * sizeof(float));
  gathered_.resize(local * static_cast<size_t>(comm_.size()));
  comm_.allgather(host_.data(), gathered_.data(), local * sizeof(float));
  // Rank r's blocks are shards [r K, (r + 1) K): the gathered blocks are in the global shard order.
  const size_t blocks = gathered_.size() / n;
  total_.assign(gathered_.begin(), gathered_.begin() + static_cast<std::ptrdiff_t>(n));
  for (size_t v = 1; v < blocks; ++v)
    for (size_t j = 0; j < n; ++j) total_[j] += gathered_[v * n + j];
  if (elements) *elements = *elements / static_cast<double>(shards) * static_cast<double>(blocks);
  backend_.upload(total, total_.data(), n * sizeof(float));
}

}  // namespace mgt
