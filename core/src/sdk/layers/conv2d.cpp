// Conv2d: NCHW convolution with a square kernel, stride and symmetric padding, through the ops'
// convolution plan (oneDNN on the CPU, cuDNN on a GPU), made once per input shape; its input and
// output each plain or in the executor's channel block.
#include <string>

#include "layer_checks.hpp"
#include "mgtrain/layers.hpp"

namespace mgt {
namespace {

class Conv2dLayer final : public Layer {
 public:
  Conv2dLayer(const std::string& name, int64_t in_c, int64_t out_c, int64_t k, int64_t stride, int64_t padding)
      : Layer(name) {
    layers::check_positive(name, "in_channels", in_c);
    layers::check_positive(name, "out_channels", out_c);
    layers::check_positive(name, "kernel", k);
    layers::check_positive(name, "stride", stride);
    MGT_CHECK(padding >= 0, ConfigError, "layer '" + name + "': padding must be >= 0, got " + std::to_string(padding));
    shape_.in_channels = in_c;
    shape_.out_channels = out_c;
    shape_.kernel = k;
    shape_.stride = stride;
    shape_.padding = padding;
  }

  void declare(ParameterStore& store) override {
    const int64_t fan_in = shape_.in_channels * shape_.kernel * shape_.kernel;
    weight_ = store.declare(name() + ".weight", {shape_.out_channels, shape_.in_channels, shape_.kernel, shape_.kernel},
                            Init::he_uniform, fan_in);
    bias_ = store.declare(name() + ".bias", {shape_.out_channels}, Init::zeros, fan_in);
  }

  Shape output_shape(const Shape& input) const override {
    MGT_CHECK(input.size() == 4 && input[1] == shape_.in_channels, ConfigError,
              "layer '" + name() + "' expects input [B, " + std::to_string(shape_.in_channels) + ", H, W], got " +
                  shape_string(input));
    const Conv2dShape s = with_input(input);
    MGT_CHECK(s.out_height() > 0 && s.out_width() > 0, ConfigError,
              "layer '" + name() + "': input " + shape_string(input) + " is smaller than kernel " +
                  std::to_string(shape_.kernel) + " with padding " + std::to_string(shape_.padding));
    return {input[0], shape_.out_channels, s.out_height(), s.out_width()};
  }

  void plan(LayerPlanner& planner, const Shape& input) override {
    output_shape(input);
    conv_ = planner.ops().make_conv(with_input(input), input[0], planner.bf16(), planner.layout());
    planned_ = input;
  }

  void forward(const LayerRun& run, const Tensor& in, Tensor& out) override {
    layers::check_planned(name(), planned_, in.shape());
    conv_->forward(in.data(), run.store.param(weight_), run.store.param(bias_), out.data());
  }

  void backward(const LayerRun& run, const Tensor& in, const Tensor&, const Tensor& grad_out,
                Tensor* grad_in) override {
    conv_->backward_weights(in.data(), grad_out.data(), run.store.grad(weight_), run.store.grad(bias_),
                            /*accumulate=*/!run.step.overwrite_grads);
    if (grad_in) conv_->backward_data(grad_out.data(), run.store.param(weight_), grad_in->data());
  }

  std::vector<ParamHandle> param_handles() const override { return {weight_, bias_}; }
  void hints(const HintQuery&, LayerHints& hints) const override {
    hints.backward_reads_output = false;
    // The library reads and writes either layout (and reorders NCHW to its own).
    hints.blocked_activations = BlockedActivations::independent;
  }
  LayerDescription describe() const override {
    LayerDescription d;
    d.kind = LayerKind::conv2d;
    d.ints = {{"kernel", shape_.kernel}, {"stride", shape_.stride}, {"padding", shape_.padding}};
    d.params = {weight_, bias_};
    return d;
  }

 private:
  Conv2dShape with_input(const Shape& input) const {
    Conv2dShape s = shape_;
    s.height = input[2];
    s.width = input[3];
    return s;
  }

  Conv2dShape shape_;
  ParamHandle weight_ = 0, bias_ = 0;
  Shape planned_;
  std::unique_ptr<ConvOp> conv_;
};

}  // namespace

std::unique_ptr<Layer> make_conv2d(const std::string& name, int64_t in_channels, int64_t out_channels, int64_t kernel,
                                   int64_t stride, int64_t padding) {
  return std::make_unique<Conv2dLayer>(name, in_channels, out_channels, kernel, stride, padding);
}

}  // namespace mgt
