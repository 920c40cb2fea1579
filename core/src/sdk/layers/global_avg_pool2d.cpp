// GlobalAvgPool2d: [B, C, H, W] -> [B, C], each channel's mean over its plane, as two GEMMs with a
// vector of 1 / (H * W): forward sums each row of the [B * C, H * W] input against it, backward
// spreads each output gradient over its plane. With a channel-blocked input ([B * C / k, H * W, k])
// each group of k channels is one [1, H * W] x [H * W, k] product (and its transpose back); the
// [B, C] output is the same in both layouts.
#include <string>

#include "layer_checks.hpp"
#include "mgtrain/layers.hpp"

namespace mgt {
namespace {

class GlobalAvgPool2dLayer final : public Layer {
 public:
  explicit GlobalAvgPool2dLayer(const std::string& name) : Layer(name) {}

  Shape output_shape(const Shape& input) const override {
    MGT_CHECK(input.size() == 4 && input[2] > 0 && input[3] > 0, ConfigError,
              "layer '" + name() + "' expects input [B, C, H, W], got " + shape_string(input));
    return {input[0], input[1]};
  }

  void plan(LayerPlanner& planner, const Shape& input) override {
    output_shape(input);
    plane_ = input[2] * input[3];
    block_ = planner.input_block();
    // 1 / (H * W) in every element: 0 * 0 + shift on the planner's zero-filled memory.
    weights_ = planner.allocate_array<float>(static_cast<size_t>(plane_));
    planner.ops().affine(weights_, weights_, plane_, 0.0f, 1.0f / static_cast<float>(plane_));
    planned_ = input;
  }

  void forward(const LayerRun& run, const Tensor& in, Tensor& out) override {
    layers::check_planned(name(), planned_, in.shape());
    const int64_t rows = in.dim(0) * in.dim(1);
    if (block_ > 1) {
      const int64_t k = block_;
      run.ops.gemm_batched(false, false, 1, k, plane_, 1.0f, weights_, plane_, 0, in.data(), k, plane_ * k, 0.0f,
                           out.data(), k, k, rows / k);
      return;
    }
    run.ops.gemm(false, false, rows, 1, plane_, 1.0f, in.data(), plane_, weights_, 1, 0.0f, out.data(), 1);
  }

  void backward(const LayerRun& run, const Tensor& in, const Tensor&, const Tensor& grad_out,
                Tensor* grad_in) override {
    if (!grad_in) return;
    const int64_t rows = in.dim(0) * in.dim(1);
    if (block_ > 1) {
      const int64_t k = block_;
      run.ops.gemm_batched(false, false, plane_, k, 1, 1.0f, weights_, 1, 0, grad_out.data(), k, k, 0.0f,
                           grad_in->data(), k, plane_ * k, rows / k);
      return;
    }
    run.ops.gemm(false, false, rows, plane_, 1, 1.0f, grad_out.data(), 1, weights_, plane_, 0.0f, grad_in->data(),
                 plane_);
  }

  void hints(const HintQuery&, LayerHints& hints) const override {
    hints.backward_reads_output = false;
    // Its planned memory holds the plane weights, constants set in plan().
    hints.planned_memory_is_scratch = true;
    // Its output is [B, C], the same in both layouts.
    hints.blocked_activations = BlockedActivations::independent;
  }
  LayerDescription describe() const override {
    LayerDescription d;
    d.kind = LayerKind::global_avg_pool2d;
    return d;
  }

 private:
  int64_t plane_ = 0, block_ = 1;
  Shape planned_;
  float* weights_ = nullptr;  // plane_ values of 1 / plane_
};

}  // namespace

std::unique_ptr<Layer> make_global_avg_pool2d(const std::string& name) {
  return std::make_unique<GlobalAvgPool2dLayer>(name);
}

}  // namespace mgt
