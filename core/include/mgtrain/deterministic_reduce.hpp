#pragma once
// Sums gradients in one fixed binary tree whose shape does not depend on the number of ranks.
// The global batch is cut into V micro-shards (V a power of two); rank r computes shards
// [r*V/W, (r+1)*V/W) one at a time. Each shard's gradient is taken out of the store after its
// backward; groups of up to four sibling shards are summed in cache-sized blocks (each shard read
// once), and the groups combine with their siblings as soon as both exist (a binary counter), so
// a rank's shards form one subtree; the W subtrees are then combined by recursive doubling over
// point-to-point messages, pairing neighbouring subtrees level by level. Float addition is
// commutative, so both partners compute the same sum; only the tree's shape matters, and it is
// the balanced tree over the V shards whatever W is. Hence bitwise-identical gradients at any
// power-of-two world size.
#include <cstdint>
#include <vector>

#include "mgtrain/communicator.hpp"
#include "mgtrain/parameters.hpp"
#include "mgtrain/tensor.hpp"

namespace mgt {

class DeterministicReducer {
 public:
  // Throws ConfigError unless the world size and shards_per_rank are powers of two.
  void setup(Communicator& comm, ParameterStore& store, int64_t shards_per_rank);
  // After the backward of one of this rank's shards (in order): moves the store's gradient into
  // the tree and zeroes it for the next shard.
  void add_shard();
  // After the last shard: combines across ranks; the store's gradient then holds the tree sum.
  void finish();

 private:
  void sum_group();

  Communicator* comm_ = nullptr;
  ParameterStore* store_ = nullptr;
  std::vector<Tensor> group_;      // the shards of the current group, summed when it is full
  size_t group_filled_ = 0;
  std::vector<Tensor> levels_;     // levels_[l]: a pending subtree of 2^l groups
  std::vector<bool> occupied_;
  Tensor incoming_;
};

}  // namespace mgt
