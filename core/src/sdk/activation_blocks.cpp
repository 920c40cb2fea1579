#include "activation_blocks.hpp"

#include <numeric>

#include "layer_hints.hpp"

namespace mgt::activation_blocks {

bool blockable(const Shape& shape, int64_t block) { return block > 1 && shape.size() == 4 && shape[1] % block == 0; }

std::optional<std::vector<int64_t>> choose(const std::vector<Layer*>& layers, const Ops& ops, const Shape& input,
                                           const std::vector<Shape>& shapes, int64_t block, int64_t input_block,
                                           int64_t last_block) {
  const size_t n = layers.size();
  // Tensor 0 is the input, tensor i + 1 the output of layers[i]. A layer that keeps its input's
  // block joins its two tensors into one group, which is blocked or not as a whole.
  std::vector<size_t> group(n + 1);
  std::iota(group.begin(), group.end(), size_t{0});
  auto root = [&](size_t t) {
    while (group[t] != t) t = group[t] = group[group[t]];
    return t;
  };
  // What each group must be: 0 free, 1 NCHW, or the block; -1 both (no choice fits).
  std::vector<int64_t> must(n + 1, 0);
  auto require = [&](size_t t, int64_t b) {
    int64_t& m = must[t];
    m = m == 0 || m == b ? b : -1;
  };
  std::vector<BlockedActivations> kinds(n);
  for (size_t i = 0; i < n; ++i) {
    const Shape& in = i == 0 ? input : shapes[i - 1];
    kinds[i] =
        block > 1 ? layer_hints::of(*layers[i], ops, in, 1, block).blocked_activations : BlockedActivations::none;
    if (kinds[i] == BlockedActivations::same) group[root(i + 1)] = root(i);
  }
  for (size_t t = 0; t <= n; ++t) {
    const Shape& shape = t == 0 ? input : shapes[t - 1];
    if (!blockable(shape, block)) require(root(t), 1);
    const bool plain_reader = t < n && kinds[t] == BlockedActivations::none;
    const bool plain_writer = t > 0 && kinds[t - 1] == BlockedActivations::none;
    if (plain_reader || plain_writer) require(root(t), 1);
  }
  require(root(0), input_block);
  if (last_block != 0) require(root(n), last_block);
  std::vector<int64_t> blocks(n);
  for (size_t t = 1; t <= n; ++t) {
    const int64_t m = must[root(t)];
    if (m < 0) return std::nullopt;
    blocks[t - 1] = m == 0 ? block : m;
  }
  if (must[root(0)] < 0) return std::nullopt;
  return blocks;
}

}  // namespace mgt::activation_blocks
