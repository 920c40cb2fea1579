#include "mgtrain/deterministic_reduce.hpp"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

#include "mgtrain/error.hpp"

namespace mgt {

namespace {

bool power_of_two(int64_t n) { return n > 0 && (n & (n - 1)) == 0; }

void add_into(float* dst, const float* src, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] += src[i];
}

}  // namespace

void DeterministicReducer::setup(Communicator& comm, ParameterStore& store, int64_t shards_per_rank) {
  if (!power_of_two(comm.size()))
    throw ConfigError("sync.deterministic = true needs a power-of-two number of ranks, got " +
                      std::to_string(comm.size()));
  if (!power_of_two(shards_per_rank))
    throw ConfigError("sync.deterministic = true: micro-shards per rank must be a power of two, got " +
                      std::to_string(shards_per_rank));
  comm_ = &comm;
  store_ = &store;
  const auto n = static_cast<int64_t>(store.flat_size());
  // Four shards per group: their blocks fit in the L1 cache together, and the gradient buffers
  // are read once each instead of once per level of the tree.
  const int64_t group = std::min<int64_t>(4, shards_per_rank);
  group_.clear();
  for (int64_t g = 0; g < group; ++g) group_.emplace_back(Shape{n});
  group_filled_ = 0;
  int depth = 1;
  while ((int64_t{1} << (depth - 1)) < shards_per_rank / group) ++depth;
  levels_.clear();
  for (int l = 0; l < depth; ++l) levels_.emplace_back(Shape{n});
  occupied_.assign(static_cast<size_t>(depth), false);
  incoming_.resize({n});
}

// The group's balanced tree, ((s0 + s1) + (s2 + s3)), block by block; the sum ends in group_[0].
void DeterministicReducer::sum_group() {
  const size_t n = store_->flat_size();
  constexpr size_t kBlock = 2048;  // floats: 8 KB per shard
  const size_t count = group_.size();
  for (size_t begin = 0; begin < n; begin += kBlock) {
    const size_t len = std::min(kBlock, n - begin);
    for (size_t width = 1; width < count; width *= 2)
      for (size_t i = 0; i + width < count; i += 2 * width)
        add_into(group_[i].data() + begin, group_[i + width].data() + begin, len);
  }
}

void DeterministicReducer::add_shard() {
  const size_t n = store_->flat_size();
  // The shard's gradient joins its group; the store gets a free buffer for the next shard, whose
  // backward overwrites it.
  store_->swap_grads(group_[group_filled_]);
  store_->discard_grads();
  if (++group_filled_ < group_.size()) return;
  group_filled_ = 0;
  sum_group();
  // The group is a subtree; it merges upward while a sibling subtree waits.
  Tensor& subtree = group_[0];
  size_t level = 0;
  while (occupied_[level]) {
    add_into(levels_[level].data(), subtree.data(), n);
    std::swap(levels_[level], subtree);
    occupied_[level] = false;
    ++level;
  }
  std::swap(levels_[level], subtree);
  occupied_[level] = true;
}

void DeterministicReducer::finish() {
  const size_t n = store_->flat_size();
  // Exactly one level holds this rank's whole subtree now.
  size_t top = 0;
  while (top < occupied_.size() && !occupied_[top]) ++top;
  MGT_CHECK(group_filled_ == 0 && top < occupied_.size(), Error,
            "DeterministicReducer::finish: called before every micro-shard of this rank was added");
  float* sum = levels_[top].data();
  occupied_[top] = false;
  const size_t bytes = n * sizeof(float);
  for (int distance = 1; distance < comm_->size(); distance <<= 1) {
    const int partner = comm_->rank() ^ distance;
    auto receive = comm_->irecv(incoming_.data(), bytes, partner, 7201);
    auto send = comm_->isend(sum, bytes, partner, 7201);
    receive->wait();
    send->wait();
    add_into(sum, incoming_.data(), n);
  }
  // The sum becomes the store's gradient; the store's old buffer becomes a free level.
  store_->swap_grads(levels_[top]);
}

}  // namespace mgt
