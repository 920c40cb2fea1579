#include "mgtrain/deterministic_reduce.hpp"

#include "deterministic_reduce_impl.hpp"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

#include "kernels/cpu/tree_outer_products.hpp"
#include "mgtrain/error.hpp"

namespace mgt {

namespace {

bool power_of_two(int64_t n) { return n > 0 && (n & (n - 1)) == 0; }

void add_into(float* dst, const float* src, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] += src[i];
}

}  // namespace

int64_t DeterministicReducer::shards_per_rank(int64_t micro_shards, const Communicator& comm) {
  if (micro_shards % comm.size() != 0)
    throw ConfigError("config key 'sync.micro_shards' = " + std::to_string(micro_shards) +
                      ": expected a multiple of the " + std::to_string(comm.size()) + " ranks");
  return micro_shards / comm.size();
}

DeterministicReducer::DeterministicReducer() : impl_(std::make_unique<DeterministicReducerImpl>()) {}
DeterministicReducer::~DeterministicReducer() = default;
void DeterministicReducer::setup(Communicator& comm, ParameterStore& store, int64_t shards_per_rank) {
  impl_->setup(comm, store, shards_per_rank);
}
void DeterministicReducer::add_shard() { impl_->add_shard(); }
void DeterministicReducer::finish() { impl_->finish(); }

void DeterministicReducerImpl::setup(Communicator& comm, ParameterStore& store, int64_t shards_per_rank) {
  if (!power_of_two(comm.size()))
    throw ConfigError("sync.deterministic = true needs a power-of-two number of ranks, got " +
                      std::to_string(comm.size()));
  if (!power_of_two(shards_per_rank))
    throw ConfigError("sync.deterministic = true: micro-shards per rank must be a power of two, got " +
                      std::to_string(shards_per_rank));
  comm_ = &comm;
  store_ = &store;
  shards_per_rank_ = shards_per_rank;
  shard_in_step_ = 0;
  shard_buffers_.clear();
  shard_buffers_used_ = false;
  deferred_.clear();
  merge_ranges_.clear();
  ranges_settled_ = false;
  store.set_weight_gradient_sink(this);
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

void DeterministicReducerImpl::add_linear(ParamHandle weight, ParamHandle bias, const float* dy, const float* x,
                                          int64_t rows, int64_t out, int64_t in, int64_t shards) {
  const std::string& name = store_->info(weight).name;
  MGT_CHECK(shards >= 1 && rows % shards == 0 && shard_in_step_ + shards <= shards_per_rank_, Error,
            "deterministic reduction: parameter '" + name + "' got " + std::to_string(rows) + " rows as " +
                std::to_string(shards) + " micro-shards at shard " + std::to_string(shard_in_step_) + " of " +
                std::to_string(shards_per_rank_));
  const int64_t shard_rows = rows / shards;
  auto it = std::find_if(deferred_.begin(), deferred_.end(), [&](const Deferred& d) { return d.weight == weight; });
  if (it == deferred_.end()) {
    MGT_CHECK(!ranges_settled_, Error,
              "deterministic reduction: parameter '" + name + "' deferred its gradient after the first micro-shard");
    deferred_.push_back({weight, bias, shard_rows, out, in, {}, {}});
    it = deferred_.end() - 1;
  }
  MGT_CHECK(it->bias == bias && it->rows == shard_rows && it->out == out && it->in == in, Error,
            "deterministic reduction: parameter '" + name + "' changed its gradient's shape between micro-shards");
  if (shards > 1) batched_step_ = true;
  if (shards == shards_per_rank_) {
    // The whole step at once: x, the layer's input, stays as it is until finish(); dy is copied,
    // since executors reuse the buffers of gradients between layers during backward.
    it->dy.assign(dy, dy + rows * out);
    it->dy_in = it->dy.data();
    it->x_in = x;
    return;
  }
  const auto blocks = static_cast<size_t>(shards_per_rank_);
  it->dy.resize(blocks * static_cast<size_t>(shard_rows * out));
  it->x.resize(blocks * static_cast<size_t>(shard_rows * in));
  const auto first = static_cast<size_t>(shard_in_step_);
  std::copy_n(dy, rows * out, it->dy.data() + first * static_cast<size_t>(shard_rows * out));
  std::copy_n(x, rows * in, it->x.data() + first * static_cast<size_t>(shard_rows * in));
  it->dy_in = it->dy.data();
  it->x_in = it->x.data();
}

Tensor& DeterministicReducerImpl::shard_gradients(int64_t shard) {
  MGT_CHECK(shard >= 0 && shard_in_step_ + shard < shards_per_rank_, Error,
            "deterministic reduction: a gradient for micro-shard " + std::to_string(shard_in_step_ + shard) +
                " of a rank's " + std::to_string(shards_per_rank_));
  if (shard_buffers_.empty())
    for (int64_t k = 0; k < shards_per_rank_; ++k)
      shard_buffers_.emplace_back(Shape{static_cast<int64_t>(store_->flat_size())});
  shard_buffers_used_ = true;
  batched_step_ = true;
  return shard_buffers_[static_cast<size_t>(shard_in_step_ + shard)];
}

// dst += src over the merged ranges.
void DeterministicReducerImpl::add_ranges(float* dst, const float* src) const {
  for (const auto& [begin, end] : merge_ranges_) add_into(dst + begin, src + begin, end - begin);
}

// The group's balanced tree, ((s0 + s1) + (s2 + s3)), block by block; the sum ends in group_[0].
void DeterministicReducerImpl::sum_group() {
  constexpr size_t kBlock = 2048;  // floats: 8 KB per shard
  const size_t count = group_.size();
  for (const auto& [range_begin, range_end] : merge_ranges_) {
    for (size_t begin = range_begin; begin < range_end; begin += kBlock) {
      const size_t len = std::min(kBlock, range_end - begin);
      for (size_t width = 1; width < count; width *= 2)
        for (size_t i = 0; i + width < count; i += 2 * width)
          add_into(group_[i].data() + begin, group_[i + width].data() + begin, len);
    }
  }
}

// This rank's subtrees of a linear layer's gradients into the flat buffer: each leaf is one
// shard's rows summed in order, the tree over the shards the balanced one (the kernel's contract),
// so the result is the same computation whatever the world size.
void DeterministicReducerImpl::compute_deferred(const Deferred& d, float* flat) {
  kernels::tree_outer_products(d.dy_in, d.x_in, shards_per_rank_, d.rows, d.out, d.in,
                               flat + store_->info(d.weight).offset);
  kernels::tree_column_sums(d.dy_in, shards_per_rank_, d.rows, d.out, flat + store_->info(d.bias).offset);
}

void DeterministicReducerImpl::add_shard() {
  if (!ranges_settled_) {
    // The parameters whose gradients the store holds, in flat order: all but the deferred ones.
    // (Padding between parameters is never summed: no gradient lives there.)
    std::vector<bool> deferred(store_->params().size(), false);
    for (const auto& d : deferred_) deferred[d.weight] = deferred[d.bias] = true;
    for (size_t h = 0; h < deferred.size(); ++h) {
      if (deferred[h]) continue;
      const ParamInfo& info = store_->params()[h];
      if (!merge_ranges_.empty() && merge_ranges_.back().second == info.offset)
        merge_ranges_.back().second = info.offset + info.numel;
      else
        merge_ranges_.emplace_back(info.offset, info.offset + info.numel);
    }
    std::sort(merge_ranges_.begin(), merge_ranges_.end());
    ranges_settled_ = true;
  }
  // A batched pass wrote no gradient outside the sink, so every gradient must have gone to it.
  MGT_CHECK(!batched_step_ || merge_ranges_.empty() || shard_buffers_used_, Error,
            "deterministic reduction: micro-shards went through the model together, but some parameter "
            "gradients did not reach the reducer (a layer's row_wise is wrong)");
  // This shard's gradient is in its own buffer: the store takes it, and the store's goes there.
  if (shard_buffers_used_) store_->swap_grads(shard_buffers_[static_cast<size_t>(shard_in_step_)]);
  ++shard_in_step_;
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
    add_ranges(levels_[level].data(), subtree.data());
    std::swap(levels_[level], subtree);
    occupied_[level] = false;
    ++level;
  }
  std::swap(levels_[level], subtree);
  occupied_[level] = true;
}

void DeterministicReducerImpl::finish() {
  const size_t n = store_->flat_size();
  // Exactly one level holds this rank's whole subtree now.
  size_t top = 0;
  while (top < occupied_.size() && !occupied_[top]) ++top;
  MGT_CHECK(group_filled_ == 0 && top < occupied_.size(), Error,
            "DeterministicReducer::finish: called before every micro-shard of this rank was added");
  float* sum = levels_[top].data();
  occupied_[top] = false;
  for (const auto& d : deferred_) compute_deferred(d, sum);
  shard_in_step_ = 0;
  batched_step_ = false;
  shard_buffers_used_ = false;
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
