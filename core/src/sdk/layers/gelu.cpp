// GELU, tanh form (GPT-2's; PyTorch's GELU(approximate='tanh')). Its backward reads the input.
#include "mgtrain/layers.hpp"

namespace mgt {
namespace {

class GeluLayer final : public Layer {
 public:
  explicit GeluLayer(const std::string& name) : Layer(name) {}
  Shape output_shape(const Shape& input) const override { return input; }
  void forward(const LayerRun& run, const Tensor& in, Tensor& out) override {
    run.ops.gelu_forward(in.data(), out.data(), in.numel());
  }
  void backward(const LayerRun& run, const Tensor& in, const Tensor&, const Tensor& grad_out,
                Tensor* grad_in) override {
    if (grad_in) run.ops.gelu_backward(in.data(), grad_out.data(), grad_in->data(), in.numel());
  }
  void hints(const HintQuery&, LayerHints& hints) const override {
    hints.row_wise = true;
    hints.backward_reads_output = false;
  }
  LayerDescription describe() const override {
    LayerDescription d;
    d.kind = LayerKind::gelu_tanh;
    return d;
  }
};

}  // namespace

std::unique_ptr<Layer> make_gelu(const std::string& name) { return std::make_unique<GeluLayer>(name); }

}  // namespace mgt
