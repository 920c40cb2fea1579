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
#include <memory>
#include <vector>

#include "mgtrain/communicator.hpp"
#include "mgtrain/export.hpp"
#include "mgtrain/parameters.hpp"
#include "mgtrain/tensor.hpp"

namespace mgt {

class DeterministicReducerImpl;

// An opaque handle: the tree and its buffers live in the core (it registers its own sink with the
// store), so that how the sum is formed can change without changing this class's layout.
class MGT_API DeterministicReducer {
 public:
  DeterministicReducer();
  ~DeterministicReducer();
  DeterministicReducer(const DeterministicReducer&) = delete;
  DeterministicReducer& operator=(const DeterministicReducer&) = delete;

  // sync.micro_shards over the ranks: the shards each rank computes. Throws ConfigError naming
  // the key unless the micro-shards are a multiple of the ranks.
  static int64_t shards_per_rank(int64_t micro_shards, const Communicator& comm);
  // Throws ConfigError unless the world size and shards_per_rank are powers of two. Registers
  // the store's weight-gradient sink: linear layers' factors (add_linear) and a pass's per-shard
  // gradients (shard_gradients) go to the reducer.
  void setup(Communicator& comm, ParameterStore& store, int64_t shards_per_rank);
  // After the backward of one of this rank's shards (in order): moves the store's gradient into
  // the tree and zeroes it for the next shard.
  void add_shard();
  // After the last shard: combines across ranks; the store's gradient then holds the tree sum.
  void finish();

 private:
  std::unique_ptr<DeterministicReducerImpl> impl_;
};

}  // namespace mgt
