#pragma once
// How a pass of several deterministic micro-shards (StepContext::shards > 1) goes through a layer.
// Whole when the layer is row-wise (its rows do not meet: Linear, ReLU) or handles the shards
// itself (batch norm, a residual block); any other (a convolution, whose library picks its
// algorithm by batch size) one shard at a time on slices of the pass's tensors, planned for one
// shard's rows, so that each shard gets the bits it would get alone, at any world size. A sliced
// layer's parameter gradients go to that shard's buffer of the WeightGradientSink (the
// deterministic reduction): the store's gradient is swapped for it around the call. The layer
// executor and the residual block run their layers by this rule.
#include <cstdint>

#include "mgtrain/layers.hpp"

namespace mgt::shard_passes {

// Whether `layer` takes a pass of `shards` micro-shards of the batch `input` whole.
bool whole(const Layer& layer, const Ops& ops, const Shape& input, int64_t shards);
// The input shape to plan `layer` for: `input`, or one shard's rows of it.
Shape plan_shape(const Shape& input, int64_t shards, bool whole);
// Forward and backward of the pass (run.step.shards shards), whole or shard by shard; forward then
// hands the output to run.step.after_layer when one is set.
void forward(Layer& layer, const LayerRun& run, const Tensor& in, Tensor& out, bool whole);
void backward(Layer& layer, const LayerRun& run, const Tensor& in, const Tensor& out, const Tensor& grad_out,
              Tensor* grad_in, bool whole);

}  // namespace mgt::shard_passes
