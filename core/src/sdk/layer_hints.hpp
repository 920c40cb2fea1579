#pragma once
// How the core asks a layer for its hints (Layer::hints): a LayerHints with the defaults, filled by
// the layer for a query of the executor's. Asked at plan time, not per step.
#include <cstdint>

#include "mgtrain/layers.hpp"

namespace mgt::layer_hints {

// `input` empty where the caller does not know it yet; only the hints that do not depend on the
// query (LayerHints says which) are then read.
inline LayerHints of(const Layer& layer, const Ops& ops, const Shape& input = {}, int64_t shards = 1,
                     int64_t block = 1) {
  HintQuery query;
  query.ops = &ops;
  query.input = &input;
  query.shards = shards;
  query.block = block;
  LayerHints hints;
  layer.hints(query, hints);
  return hints;
}

}  // namespace mgt::layer_hints
