#pragma once
// DeterministicReducer's state (mgtrain/deterministic_reduce.hpp), kept out of the public header
// so that the SDK's class is an opaque handle. It is the store's weight-gradient sink.
#include <cstdint>
#include <utility>
#include <vector>

#include "mgtrain/deterministic_reduce.hpp"

namespace mgt {

class DeterministicReducerImpl final : public WeightGradientSink {
 public:
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
