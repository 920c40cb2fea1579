#pragma once
// Which channel block (mgtrain/ops.hpp) each activation of a chain of layers has. A CPU's
// convolutions run on channel-blocked tensors (oneDNN's nChw16c); handed plain NCHW, each reorders
// its input, its output and both gradients, about a quarter of a ResNet's step. So where every layer
// that reads or writes an activation takes blocked ones (LayerHints::blocked_activations) and the block
// divides its channels, the activation stays blocked from layer to layer; everywhere else it is
// NCHW, which the convolutions at the edges of a blocked run reorder to and from themselves.
#include <cstdint>
#include <optional>
#include <vector>

#include "forwarding_planner.hpp"
#include "mgtrain/layers.hpp"

namespace mgt::activation_blocks {

// blocks[i]: the block of layers[i]'s output (shape shapes[i]). `input` has the block
// input_block; the last output must have last_block (0: either). With block <= 1 every activation
// is NCHW. Nothing when no choice meets both ends (a layer in the chain that takes NCHW only).
std::optional<std::vector<int64_t>> choose(const std::vector<Layer*>& layers, const Ops& ops, const Shape& input,
                                           const std::vector<Shape>& shapes, int64_t block, int64_t input_block,
                                           int64_t last_block);

// Whether a [B, C, H, W] shape can have the block: 4-D with the block dividing C.
bool blockable(const Shape& shape, int64_t block);

// Hands a layer its input's and output's blocks, everything else from the planner it wraps.
class Planner final : public ForwardingPlanner {
 public:
  explicit Planner(LayerPlanner& inner) : ForwardingPlanner(inner) {}
  void set_blocks(int64_t input, int64_t output) {
    input_ = input;
    output_ = output;
  }
  void set_fused_relu(bool fused) { fused_relu_ = fused; }
  int64_t input_block() const override { return input_; }
  int64_t output_block() const override { return output_; }
  bool fused_relu() const override { return fused_relu_; }

 private:
  int64_t input_ = 1, output_ = 1;
  bool fused_relu_ = false;
};

}  // namespace mgt::activation_blocks
