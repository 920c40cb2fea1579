// Inverted dropout. The mask of element (row, j) is element (global sample) * features + j of the
// step's stream, drawn by the ops when the step runs, so it does not depend on how ranks,
// micro-batches or passes split the batch, nor on the device.
#include <string>

#include "layer_checks.hpp"
#include "mgtrain/layers.hpp"
#include "mgtrain/rng.hpp"

namespace mgt {
namespace {

class DropoutLayer final : public Layer {
 public:
  DropoutLayer(const std::string& name, float p) : Layer(name), p_(p), purpose_(rng::purpose_hash("dropout:" + name)) {
    MGT_CHECK(p >= 0.0f && p < 1.0f, ConfigError,
              "layer '" + name + "': dropout probability must be in [0, 1), got " + std::to_string(p));
  }

  Shape output_shape(const Shape& input) const override { return input; }
  void hints(const HintQuery&, LayerHints& hints) const override {
    hints.aliases_input = p_ == 0.0f;
    // Each element's mask comes from its global sample index: rows are independent.
    hints.row_wise = true;
  }

  void plan(LayerPlanner& planner, const Shape& input) override {
    mask_ = planner.allocate_array<float>(static_cast<size_t>(shape_numel(input)));
    planned_ = input;
  }

  void forward(const LayerRun& run, const Tensor& in, Tensor& out) override {
    layers::check_planned(name(), planned_, in.shape());
    const int64_t n = in.numel();
    if (!run.step.training) {
      run.ops.copy(out.data(), in.data(), static_cast<size_t>(n) * sizeof(float));
      return;
    }
    const int64_t features = layers::row_size(in.shape());
    run.ops.uniform(mask_, static_cast<size_t>(n), rng::make_key(run.step.seed, purpose_),
                    static_cast<uint64_t>(run.step.first_sample * features));
    run.ops.dropout_scales(mask_, n, p_);
    run.ops.multiply(in.data(), mask_, out.data(), n);
  }

  // Uses the mask of the latest training forward, which must have been over this input.
  void backward(const LayerRun& run, const Tensor&, const Tensor&, const Tensor& grad_out, Tensor* grad_in) override {
    if (!grad_in) return;
    const int64_t n = grad_out.numel();
    if (!run.step.training)
      run.ops.copy(grad_in->data(), grad_out.data(), static_cast<size_t>(n) * sizeof(float));
    else
      run.ops.multiply(grad_out.data(), mask_, grad_in->data(), n);
  }

  LayerDescription describe() const override {
    LayerDescription d;
    d.kind = LayerKind::dropout;
    d.floats = {{"probability", p_}};
    return d;
  }

 private:
  float p_;
  uint64_t purpose_;
  Shape planned_;
  float* mask_ = nullptr;  // per element: 0 or 1 / (1 - p)
};

}  // namespace

std::unique_ptr<Layer> make_dropout(const std::string& name, float probability) {
  return std::make_unique<DropoutLayer>(name, probability);
}

}  // namespace mgt
