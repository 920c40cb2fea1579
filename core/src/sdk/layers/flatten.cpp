// Flatten: [B, ...] seen as [B, features]. The same memory, so every executor aliases it.
#include "layer_checks.hpp"
#include "mgtrain/layers.hpp"

namespace mgt {
namespace {

class FlattenLayer final : public Layer {
 public:
  explicit FlattenLayer(const std::string& name) : Layer(name) {}
  Shape output_shape(const Shape& input) const override {
    MGT_CHECK(!input.empty(), ConfigError,
              "layer '" + name() + "' expects a batch-first input, got " + shape_string(input));
    return {input[0], layers::row_size(input)};
  }
  void hints(const HintQuery&, LayerHints& hints) const override {
    hints.aliases_input = true;
    hints.row_wise = true;
  }
  // Not called: the executor aliases the output to the input.
  void forward(const LayerRun&, const Tensor&, Tensor&) override {}
  void backward(const LayerRun&, const Tensor&, const Tensor&, const Tensor&, Tensor*) override {}
  LayerDescription describe() const override {
    LayerDescription d;
    d.kind = LayerKind::flatten;
    return d;
  }
};

}  // namespace

std::unique_ptr<Layer> make_flatten(const std::string& name) { return std::make_unique<FlattenLayer>(name); }

}  // namespace mgt
