#pragma once
// Swish (SiLU, y = x * sigmoid(x)), a layer written once over mgt::Ops: the swish_mlp model plugin
// uses it in its own model, the swish layer plugin (swish_layer.cpp) lends it to the config-declared
// `layers` model by name.
#include <string>

#include "mgtrain/layers.hpp"

namespace {

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

  // The executor's hints (mgt::LayerHints): set the fields where this layer differs from the
  // defaults. Each element on its own: deterministic micro-shards may share one pass.
  void hints(const mgt::HintQuery&, mgt::LayerHints& hints) const override { hints.row_wise = true; }

  // For `mgtrain export`: two ONNX operators, x * Sigmoid(x).
  mgt::LayerDescription describe() const override {
    mgt::LayerDescription d;
    d.kind = mgt::LayerKind::onnx_nodes;
    d.nodes = {{"Sigmoid", {"x"}, "gate"}, {"Mul", {"x", "gate"}, "y"}};
    return d;
  }

 private:
  float* gate_ = nullptr;
  float* slope_ = nullptr;
};

}  // namespace
