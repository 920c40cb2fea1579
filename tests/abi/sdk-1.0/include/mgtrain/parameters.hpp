#pragma once
// Every parameter of a model lives in one contiguous flat buffer, and its gradient at the same
// offset in a second one; layers hold handles into them. Bucketed all-reduce, optimizer updates,
// checksums, checkpoints and broadcast are then one loop over memory.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "mgtrain/export.hpp"
#include "mgtrain/tensor.hpp"

namespace mgt {

enum class Init {
  zeros,
  he_uniform,      // U(-sqrt(6/fan_in), sqrt(6/fan_in)), for weights followed by ReLU
  fan_in_uniform,  // U(-1/sqrt(fan_in), 1/sqrt(fan_in)), e.g. the last layer
  ones,            // 1, e.g. a normalisation's scale
  small_normal     // N(0, 0.02^2): GPT-2's weights and embeddings
};

struct ParamInfo {
  std::string name;  // canonical: "fc1.weight", never a wrapper prefix
  Shape shape;
  Init init = Init::zeros;
  int64_t fan_in = 1;
  size_t offset = 0;  // in floats, into the flat buffers
  size_t numel = 0;
};

using ParamHandle = size_t;

// State a model keeps that is not trained (batch normalisation's running mean and variance): in a
// flat buffer of its own, never reduced by a sync strategy nor updated by the optimizer; saved in
// checkpoints as /buffers/<name> and restored on resume. Each rank updates its own copy; rank 0's
// is the one saved.
struct BufferInfo {
  std::string name;  // canonical, as a parameter's: "bn1.running_mean"
  Shape shape;
  float initial = 0.0f;  // every element's value before training
  size_t offset = 0;     // in floats, into the flat buffer
  size_t numel = 0;
};

using BufferHandle = size_t;

// Takes a linear layer's parameter gradients as their factors instead of the sums: dW = dy^T x
// and db = the column sums of dy (dy [rows, out], x [rows, in], W [out, in]), the rows being
// `shards` micro-shards of equal size in order. The deterministic reduction is one: it forms the
// tree sums over its micro-shards in one pass at the end of the step, instead of one full gradient
// per micro-shard. When a call holds all of the step's shards, x (the layer's input, untouched
// until the next forward) is read in place at the step's end instead of copied; dy, an output
// gradient whose buffer the executor reuses for other layers' gradients during backward, is
// copied in any case.
class MGT_API WeightGradientSink {
 public:
  virtual ~WeightGradientSink() = default;
  virtual void add_linear(ParamHandle weight, ParamHandle bias, const float* dy, const float* x, int64_t rows,
                          int64_t out, int64_t in, int64_t shards) = 0;
  // A gradient buffer (the store's flat layout) for micro-shard `shard` of a pass holding several
  // (StepContext::shards), counted from the pass's first: in a pass of all of a rank's shards, the
  // gradients that do not go through add_linear are written there, one buffer per shard, instead of
  // into the store's (the executor runs a layer on one shard's rows with the store's gradient
  // swapped for it; batch norm writes its own there). Written, not added to.
  virtual Tensor& shard_gradients(int64_t shard) = 0;
};

class MGT_API ParameterStore {
 public:
  // Declares a parameter before finalize(); returns its handle. Names must be unique.
  ParamHandle declare(const std::string& name, const Shape& shape, Init init, int64_t fan_in);
  // The handle of a parameter declared earlier (a layer sharing another's: a tied output head);
  // throws ConfigError naming `who` and the parameter when there is none.
  ParamHandle find(const std::string& name, const std::string& who) const;
  // Declares a buffer (BufferInfo) before finalize(); returns its handle. Names must be unique
  // among the parameters and the buffers.
  BufferHandle declare_buffer(const std::string& name, const Shape& shape, float initial);
  // Lays out and allocates the flat buffers (each parameter and buffer 64-byte aligned): the
  // parameters and gradients zero-filled, the buffers at their initial values.
  void finalize();
  bool finalized() const { return finalized_; }

  // Sets every parameter from its initialiser: a pure function of (seed, name, element).
  void initialize(uint64_t seed);

  const std::vector<ParamInfo>& params() const { return params_; }
  const ParamInfo& info(ParamHandle h) const { return params_.at(h); }
  float* param(ParamHandle h) { return params_flat_.data() + params_[h].offset; }
  float* grad(ParamHandle h) { return grads_flat_.data() + params_[h].offset; }
  Tensor param_view(ParamHandle h);
  Tensor grad_view(ParamHandle h);
  const std::vector<BufferInfo>& buffers() const { return buffers_; }
  float* buffer(BufferHandle h) { return buffers_flat_.data() + buffers_.at(h).offset; }
  float* buffers_data() { return buffers_flat_.data(); }
  const float* buffers_data() const { return buffers_flat_.data(); }
  size_t buffers_size() const { return buffers_size_; }  // in floats, including alignment padding

  float* params_data() { return params_flat_.data(); }
  float* grads_data() { return grads_flat_.data(); }
  const float* params_data() const { return params_flat_.data(); }
  const float* grads_data() const { return grads_flat_.data(); }
  size_t flat_size() const { return flat_size_; }  // including alignment padding
  size_t param_count() const;                      // sum of numel, without padding

  void zero_grads();
  // Instead of zeroing: the next backward writes the gradients rather than adding to them
  // (StepContext::overwrite_grads), one pass over memory fewer. The trainer sets that flag from
  // grads_discarded() and calls mark_grads_written() after the backward.
  void discard_grads() { grads_discarded_ = true; }
  bool grads_discarded() const { return grads_discarded_; }
  void mark_grads_written() { grads_discarded_ = false; }
  // When set, layers whose weight gradient is dy^T x (Linear) hand its factors to the sink
  // instead of adding the product to the gradient buffer. The sink must outlive every backward.
  void set_weight_gradient_sink(WeightGradientSink* sink) { weight_gradient_sink_ = sink; }
  WeightGradientSink* weight_gradient_sink() const { return weight_gradient_sink_; }
  // The same finalized layout over flat buffers owned elsewhere (a GPU's memory): views that the
  // store never reads or frees. The GPU path hands such a store to the sync strategy. `buffers`
  // (buffers_size() floats) may be null when there are none.
  ParameterStore with_buffers(float* params, float* grads, float* buffers = nullptr) const;
  // Whether this store is such a view: a step's own copy (a GPU's), not the host's store that the
  // core's optimizer updates in place.
  bool is_view() const { return view_; }
  ParameterStore() = default;
  ParameterStore(ParameterStore&&) noexcept = default;
  ParameterStore& operator=(ParameterStore&&) noexcept = default;
  // Exchanges the gradient buffer with `other` (same flat size): a sync strategy takes a finished
  // gradient out without copying it. Layers look their gradients up on every backward.
  void swap_grads(Tensor& other);
  // Moves the gradients into `memory` (flat_size() floats) and keeps them there: a sync strategy
  // reducing in memory the ranks of a node share (SharedMemoryAllreduce) then reads each rank's
  // gradients where backward wrote them. `owner` keeps the memory alive as long as the store
  // points into it.
  void place_grads(float* memory, std::shared_ptr<void> owner);
  // Moves the parameters into `memory` the same way: the node's ranks then share one copy, each
  // updating its part (GradientBuckets' shared update). `copy`: the current parameters are copied
  // in (one rank of the node does it; the others find them there).
  void place_params(float* memory, std::shared_ptr<void> owner, bool copy);
  // Whether the parameters live in placed memory, the same on every rank of the node.
  bool params_placed() const { return params_owner_ != nullptr; }

 private:
  std::vector<ParamInfo> params_;
  std::vector<BufferInfo> buffers_;
  Tensor params_flat_;
  Tensor grads_flat_;
  std::shared_ptr<void> grads_owner_;   // place_grads' memory, when the gradients live there
  std::shared_ptr<void> params_owner_;  // place_params' memory, when the parameters live there
  Tensor buffers_flat_;
  size_t flat_size_ = 0;
  size_t buffers_size_ = 0;
  bool finalized_ = false;
  bool view_ = false;  // with_buffers' store
  bool grads_discarded_ = false;
  WeightGradientSink* weight_gradient_sink_ = nullptr;
};

}  // namespace mgt
