// AvgPool2d: mean over k x k windows (no padding), as a convolution of each channel's plane on its
// own: the input [B, C, H, W] is seen as B * C one-channel images, convolved with a k x k kernel
// of 1 / (k * k) and no bias; backward is that convolution's data gradient.
#include <string>

#include "pool2d.hpp"

namespace mgt {
namespace {

class AvgPool2dLayer final : public layers::Pool2dLayer {
 public:
  AvgPool2dLayer(const std::string& name, int64_t kernel, int64_t stride)
      : Pool2dLayer(name, LayerKind::avg_pool2d, kernel, stride) {}

  void plan(LayerPlanner& planner, const Shape& input) override {
    output_shape(input);
    Conv2dShape shape;
    shape.in_channels = 1;
    shape.out_channels = 1;
    shape.kernel = kernel_;
    shape.stride = stride_;
    shape.height = input[2];
    shape.width = input[3];
    // FP32 even under bf16: a mean of k * k values gains nothing from bf16 operands.
    conv_ = planner.ops().make_conv(shape, input[0] * input[1], false);
    // 1 / (k * k) in every element: 0 * 0 + shift on the planner's zero-filled memory.
    const int64_t window = kernel_ * kernel_;
    weights_ = planner.allocate_array<float>(static_cast<size_t>(window));
    planner.ops().affine(weights_, weights_, window, 0.0f, 1.0f / static_cast<float>(window));
    planned_ = input;
  }

  void forward(const LayerRun&, const Tensor& in, Tensor& out) override {
    layers::check_planned(name(), planned_, in.shape());
    conv_->forward(in.data(), weights_, nullptr, out.data());
  }

  void backward(const LayerRun&, const Tensor&, const Tensor&, const Tensor& grad_out, Tensor* grad_in) override {
    if (grad_in) conv_->backward_data(grad_out.data(), weights_, grad_in->data());
  }

  void hints(const HintQuery&, LayerHints& hints) const override {
    hints.backward_reads_output = false;
    // Its planned memory holds the window weights, constants set in plan().
    hints.planned_memory_is_scratch = true;
  }

 private:
  std::unique_ptr<ConvOp> conv_;
  float* weights_ = nullptr;  // kernel_ * kernel_ values of 1 / (kernel_ * kernel_)
};

}  // namespace

std::unique_ptr<Layer> make_avg_pool2d(const std::string& name, int64_t kernel, int64_t stride) {
  return std::make_unique<AvgPool2dLayer>(name, kernel, stride);
}

}  // namespace mgt
