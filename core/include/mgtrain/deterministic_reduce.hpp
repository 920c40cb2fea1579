#pragma once
// Sums gradients in one fixed binary tree whose shape does not depend on the number of ranks.
// The global batch is cut into V micro-shards (V a power of two); rank r computes shards
// [r*V/W, (r+1)*V/W), one at a time or, with a model of row-wise layers, all in one pass. Each
// shard's gradient is taken out of the store after its backward; groups of up to four sibling shards are summed in
// cache-sized blocks (each shard read once), and the groups combine with their siblings as soon as both exist (a binary
// counter), so a rank's shards form one subtree; the W subtrees are then combined by recursive doubling over
// point-to-point messages, pairing neighbouring subtrees level by level. Float addition is
// commutative, so both partners compute the same sum; only the tree's shape matters, and it is
// the balanced tree over the V shards whatever W is. Hence bitwise-identical gradients at any
// power-of-two world size.
// Linear layers' gradients (dW = dy^T x, db = column sums of dy) are not formed per shard: the
// reducer keeps each shard's dy and x (WeightGradientSink) and at the end computes the rank's
// subtree in one pass (kernels::tree_outer_products and tree_column_sums: each leaf one shard's
// rows summed in order, the tree held in registers and cache). The leaves and the tree do not
// depend on W either, and the largest gradients are written once instead of once per shard. When
// every gradient arrives that way, the trainer may run several shards through the model at once
// (SyncStrategy::micro_batches_are_shards); the sink is told how many a call holds, and the
// gradients of layers that are not row-wise (run one shard at a time on slices of the pass, or
// batch norm's, formed per shard) come per shard in buffers of the reducer's (shard_gradients).
#include <cstdint>
#include <vector>

#include "mgtrain/communicator.hpp"
#include "mgtrain/export.hpp"
#include "mgtrain/parameters.hpp"
#include "mgtrain/tensor.hpp"

namespace mgt {

class MGT_API DeterministicReducer final : public WeightGradientSink {
 public:
  // sync.micro_shards over the ranks: the shards each rank computes. Throws ConfigError naming
  // the key unless the micro-shards are a multiple of the ranks.
  static int64_t shards_per_rank(int64_t micro_shards, const Communicator& comm);
  // Throws ConfigError unless the world size and shards_per_rank are powers of two. Registers
  // itself as the store's weight-gradient sink.
  void setup(Communicator& comm, ParameterStore& store, int64_t shards_per_rank);
  // From a linear layer's backward (through the store): keeps the factors of its weight's and
  // bias's gradients for the `shards` shards starting at the current one.
  void add_linear(ParamHandle weight, ParamHandle bias, const float* dy, const float* x, int64_t rows, int64_t out,
                  int64_t in, int64_t shards) override;
  // A pass of several shards writes their other gradients here (one buffer per shard of the rank,
  // made on first use); add_shard then takes shard k's from its buffer instead of the store's.
  Tensor& shard_gradients(int64_t shard) override;
  // After the backward of one of this rank's shards (in order): moves the store's gradient into
  // the tree and zeroes it for the next shard.
  void add_shard();
  // After the last shard: combines across ranks; the store's gradient then holds the tree sum.
  void finish();

 private:
  // A linear layer whose gradients are kept as factors: each shard's dy [rows, out] and x [rows, in].
  struct Deferred {
    ParamHandle weight, bias;
    int64_t rows, out, in;         // rows per shard
    std::vector<float> dy, x;      // copies, shards_per_rank_ blocks each (only dy when one call brought all shards)
    const float* dy_in = nullptr;  // this step's factors: the copies, or the layer's own input x
    const float* x_in = nullptr;   // when one call brought all shards
  };

  void sum_group();
  void add_ranges(float* dst, const float* src) const;
  void compute_deferred(const Deferred& d, float* flat);

  Communicator* comm_ = nullptr;
  ParameterStore* store_ = nullptr;
  int64_t shards_per_rank_ = 1;
  int64_t shard_in_step_ = 0;          // shards of this step added so far
  bool batched_step_ = false;          // this step's shards went through the model together
  std::vector<Tensor> shard_buffers_;  // shard_gradients(): one flat gradient per shard of the rank
  bool shard_buffers_used_ = false;    // this step's gradients are in them
  std::vector<Deferred> deferred_;
  // The parts of the flat gradient summed as buffers: all but the deferred weights. Settled at
  // the first shard's add_shard, when every deferring layer has called.
  std::vector<std::pair<size_t, size_t>> merge_ranges_;  // [begin, end)
  bool ranges_settled_ = false;
  std::vector<Tensor> group_;  // the shards of the current group, summed when it is full
  size_t group_filled_ = 0;
  std::vector<Tensor> levels_;  // levels_[l]: a pending subtree of 2^l groups
  std::vector<bool> occupied_;
  Tensor incoming_;
};

}  // namespace mgt
