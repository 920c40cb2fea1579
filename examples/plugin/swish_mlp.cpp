// Model plugin `swish_mlp`: an MLP whose hidden activation is a layer of the plugin's own, Swish
// (SiLU, y = x * sigmoid(x): an activation gated by its own input), written once over mgt::Ops.
// Nothing here is CUDA: the same code runs on the CPU path, in deterministic mode and, in an
// mgtrain built with CUDA, on the GPU path (train.device = gpu).
#include <string>

#include "mgtrain/layers.hpp"
#include "mgtrain/plugin.hpp"

namespace {

const mgt::ConfigKey kKeys[] = {
    {"model.inputs", mgt::KeyType::positive_integer, "784", "input features (the sample's size)"},
    {"model.hidden", mgt::KeyType::integer_list, "256,128", "hidden layer sizes, comma-separated"},
    {"model.classes", mgt::KeyType::positive_integer, "10", "output classes"},
};

// y = x * s with s = sigmoid(x); dy/dx = s * (1 + x * (1 - s)).
class SwishLayer final : public mgt::Layer {
 public:
  explicit SwishLayer(const std::string& name) : Layer(name) {}
  mgt::Shape output_shape(const mgt::Shape& input) const override { return input; }

  // Buffers on the executor's device for the gate (kept from forward for backward) and the
  // derivative, sized once per input shape.
  void plan(mgt::LayerPlanner& planner, const mgt::Shape& input) override {
    const auto n = static_cast<size_t>(mgt::shape_numel(input));
    gate_ = planner.allocate_array<float>(n);
    slope_ = planner.allocate_array<float>(n);
  }

  void forward(const mgt::LayerRun& run, const mgt::Tensor& in, mgt::Tensor& out) override {
    const int64_t n = in.numel();
    run.ops.unary(mgt::UnaryOp::sigmoid, in.data(), gate_, n);
    run.ops.binary(mgt::BinaryOp::multiply, in.data(), gate_, out.data(), n);
  }

  void backward(const mgt::LayerRun& run, const mgt::Tensor& in, const mgt::Tensor&, const mgt::Tensor& grad_out,
                mgt::Tensor* grad_in) override {
    if (!grad_in) return;
    const int64_t n = in.numel();
    mgt::Ops& ops = run.ops;
    ops.affine(gate_, slope_, n, -1.0f, 1.0f);                          // 1 - s
    ops.binary(mgt::BinaryOp::multiply, in.data(), slope_, slope_, n);  // x (1 - s)
    ops.affine(slope_, slope_, n, 1.0f, 1.0f);                          // 1 + x (1 - s)
    ops.binary(mgt::BinaryOp::multiply, gate_, slope_, slope_, n);      // s (1 + x (1 - s))
    ops.binary(mgt::BinaryOp::multiply, grad_out.data(), slope_, grad_in->data(), n);
  }

  // Each element on its own: deterministic micro-shards may share one pass.
  bool row_wise(const mgt::Ops&, int64_t, int64_t) const override { return true; }

 private:
  float* gate_ = nullptr;
  float* slope_ = nullptr;
};

class SwishMlp final : public mgt::SequentialModel {
 public:
  explicit SwishMlp(const mgt::ConfigSection& config) {
    int64_t in = config.get_int("inputs");
    add(mgt::make_flatten("flatten"));
    int index = 1;
    for (int64_t width : config.get_int_list("hidden")) {
      if (width <= 0)
        throw mgt::ConfigError("config key 'model.hidden': sizes must be positive, got " + std::to_string(width));
      const std::string n = std::to_string(index++);
      add(mgt::make_linear("fc" + n, in, width));
      add(std::make_unique<SwishLayer>("swish" + n));
      in = width;
    }
    add(mgt::make_linear("fc" + std::to_string(index), in, config.get_int("classes"), mgt::Init::fan_in_uniform));
  }
};

}  // namespace

MGT_MODEL_PLUGIN("swish_mlp", "1.0.0", "MLP with a Swish activation of its own, written once over mgt::Ops", kKeys,
                 SwishMlp)
