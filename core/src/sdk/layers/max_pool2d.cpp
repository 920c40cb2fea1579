// MaxPool2d: max over k x k windows (no padding), through the ops' pooling plan.
#include <string>

#include "pool2d.hpp"

namespace mgt {
namespace {

class MaxPool2dLayer final : public layers::Pool2dLayer {
 public:
  MaxPool2dLayer(const std::string& name, int64_t kernel, int64_t stride)
      : Pool2dLayer(name, LayerKind::max_pool2d, kernel, stride) {}

  void plan(LayerPlanner& planner, const Shape& input) override {
    output_shape(input);
    pool_ = planner.ops().make_max_pool(input[0], input[1], input[2], input[3], kernel_, stride_, planner.layout());
    planned_ = input;
  }

  void forward(const LayerRun&, const Tensor& in, Tensor& out) override {
    layers::check_planned(name(), planned_, in.shape());
    pool_->forward(in.data(), out.data());
  }

  // Uses what the latest forward recorded, which must have been over this input.
  void backward(const LayerRun&, const Tensor& in, const Tensor& out, const Tensor& grad_out,
                Tensor* grad_in) override {
    if (grad_in) pool_->backward(in.data(), out.data(), grad_out.data(), grad_in->data());
  }
  void hints(const HintQuery&, LayerHints& hints) const override {
    // Each plane on its own: a maximum is exact and each input element's gradient comes from its own
    // row's windows, so any batch gives the same bits. (Run whole, too, because backward uses what
    // forward recorded: one shard at a time, the last shard's record would be all there is.)
    hints.row_wise = true;
    // Channel by channel: the plan pools from either layout to either (a blocked input to an NCHW
    // output before a Flatten: the reorder on the pooled tensor, a quarter of the input's size).
    hints.blocked_activations = BlockedActivations::independent;
  }

 private:
  std::unique_ptr<MaxPoolOp> pool_;
};

}  // namespace

std::unique_ptr<Layer> make_max_pool2d(const std::string& name, int64_t kernel, int64_t stride) {
  return std::make_unique<MaxPool2dLayer>(name, kernel, stride);
}

}  // namespace mgt
