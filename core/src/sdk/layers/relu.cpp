// ReLU: y = max(x, 0).
#include "mgtrain/layers.hpp"

namespace mgt {
namespace {

class ReluLayer final : public Layer {
 public:
  explicit ReluLayer(const std::string& name) : Layer(name) {}
  Shape output_shape(const Shape& input) const override { return input; }
  void forward(const LayerRun& run, const Tensor& in, Tensor& out) override {
    run.ops.relu_forward(in.data(), out.data(), in.numel());
  }
  void backward(const LayerRun& run, const Tensor&, const Tensor& out, const Tensor& grad_out,
                Tensor* grad_in) override {
    if (grad_in) run.ops.relu_backward(out.data(), grad_out.data(), grad_in->data(), out.numel());
  }
  void hints(const HintQuery&, LayerHints& hints) const override {
    hints.row_wise = true;
    // Element-wise, and backward reads only the output.
    hints.runs_in_place = true;
    // Element-wise: any layout.
    hints.blocked_activations = BlockedActivations::same;
  }
  LayerDescription describe() const override {
    LayerDescription d;
    d.kind = LayerKind::relu;
    return d;
  }
};

}  // namespace

std::unique_ptr<Layer> make_relu(const std::string& name) { return std::make_unique<ReluLayer>(name); }

}  // namespace mgt
