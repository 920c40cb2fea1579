#pragma once
// A ReLU run by the layer before it (LayerHints::fuses_relu): batch norm applies it in the pass that
// writes its output and takes its gradient in the passes that read its own, two passes over the
// activation fewer than the ReLU's forward and backward on their own; a residual block adds its
// paths and applies it in one pass. The bits are the ReLU's. The layer executor and the residual
// block plan their layers by this rule.
#include "layer_hints.hpp"
#include "mgtrain/layer_description.hpp"
#include "mgtrain/layers.hpp"

namespace mgt::fused_relu {

// Whether `layer` runs `next`, a ReLU that runs in place over its output and whose input
// gradient is the same memory as its output gradient (so that the layer may write it there).
inline bool runs_next(const Layer& layer, const Layer& next, bool next_in_place, bool gradient_in_place,
                      const Ops& ops) {
  return next_in_place && gradient_in_place && next.describe().kind == LayerKind::relu &&
         layer_hints::of(layer, ops).fuses_relu;
}

}  // namespace mgt::fused_relu
