#pragma once
// How a pass of several deterministic micro-shards (StepContext::shards > 1) goes through a layer.
// Whole when the layer is row-wise (its rows do not meet: Linear, ReLU) or handles the shards
// itself (batch norm, a residual block); any other (a convolution, whose library picks its
// algorithm by batch size) one shard at a time on slices of the pass's tensors, planned for one
// shard's rows, so that each shard gets the bits it would get alone, at any world size. A sliced
// layer's parameter gradients go to that shard's buffer of the WeightGradientSink (the
// deterministic reduction): the store's gradient is swapped for it around the call. The layer
// executor and the residual block run their layers by this rule.
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "forwarding_planner.hpp"
#include "mgtrain/layers.hpp"

namespace mgt::shard_passes {

// Whether `layer` takes a pass of `shards` micro-shards of the batch `input` whole.
bool whole(const Layer& layer, const Ops& ops, const Shape& input, int64_t shards);
// The input shape to plan `layer` for: `input`, or one shard's rows of it.
Shape plan_shape(const Shape& input, int64_t shards, bool whole);
// What a layer taken one shard at a time keeps from each shard's forward for its backward: the
// memory its plan() allocated (which the layer may use for forward state), saved per shard after
// the shard's forward and put back before its backward. Empty (nothing to copy) for a layer taken
// whole, one whose planned memory is scratch (LayerHints::planned_memory_is_scratch) or that planned
// nothing.
class PlannedState {
 public:
  // A planner for `layer`'s plan() that records what it allocates from `inner`.
  class Recorder final : public ForwardingPlanner {
   public:
    Recorder(LayerPlanner& inner, PlannedState& state) : ForwardingPlanner(inner), state_(state) {}
    void* allocate(size_t bytes) override;

   private:
    PlannedState& state_;
  };
  // After the layer's plan() through a Recorder: room for a copy per shard, from `planner`, when
  // the layer needs one.
  void keep_per_shard(LayerPlanner& planner, const Layer& layer, bool whole, int64_t shards);
  bool active() const { return copies_ != nullptr; }
  void save(Ops& ops, int64_t shard) const;
  void restore(Ops& ops, int64_t shard) const;

 private:
  std::vector<std::pair<unsigned char*, size_t>> regions_;
  size_t bytes_ = 0;
  unsigned char* copies_ = nullptr;  // shards x bytes_
};

// Plans `layer` for a pass of planner.shards() micro-shards of `input`, whole or for one shard's
// rows, its planned memory kept per shard where needed; returns whether it is taken whole.
bool plan(Layer& layer, LayerPlanner& planner, const Shape& input, PlannedState& state);

// Forward and backward of the pass (run.step.shards shards), whole or shard by shard; forward then
// hands the output to run.step.after_layer when one is set. `state`: the layer's PlannedState.
void forward(Layer& layer, const LayerRun& run, const Tensor& in, Tensor& out, bool whole, const PlannedState& state);
// For a ReLU the layer before it ran (fused_relu.hpp): what forward tells of a layer it ran, its
// output handed to run.step.after_layer.
void ran_before(const Layer& layer, const LayerRun& run, const Tensor& out);
void backward(Layer& layer, const LayerRun& run, const Tensor& in, const Tensor& out, const Tensor& grad_out,
              Tensor* grad_in, bool whole, const PlannedState& state);

}  // namespace mgt::shard_passes
