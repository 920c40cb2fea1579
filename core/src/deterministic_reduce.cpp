#include "mgtrain/deterministic_reduce.hpp"

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
  int depth = 1;
  while ((int64_t{1} << (depth - 1)) < shards_per_rank) ++depth;
  levels_.clear();
  for (int l = 0; l < depth; ++l) levels_.emplace_back(Shape{n});
  occupied_.assign(static_cast<size_t>(depth), false);
  spare_.resize({n});
  incoming_.resize({n});
}

void DeterministicReducer::add_shard() {
  const size_t n = store_->flat_size();
  // The new shard is a subtree of one leaf; it merges upward while a sibling subtree waits. The
  // store gets the spare buffer for the next shard, whose backward overwrites it.
  store_->swap_grads(spare_);
  store_->discard_grads();
  size_t level = 0;
  while (occupied_[level]) {
    add_into(levels_[level].data(), spare_.data(), n);
    std::swap(levels_[level], spare_);
    occupied_[level] = false;
    ++level;
  }
  std::swap(levels_[level], spare_);
  occupied_[level] = true;
}

void DeterministicReducer::finish() {
  const size_t n = store_->flat_size();
  // Exactly one level holds this rank's whole subtree now.
  size_t top = 0;
  while (!occupied_[top]) ++top;
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
