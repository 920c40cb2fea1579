#pragma once
// Flatten is declared here rather than only in layers.cpp so SequentialModel can recognise it and
// alias its activations ([B, C, H, W] -> [B, C*H*W] is the same memory) instead of copying.
#include "mgtrain/layers.hpp"

namespace mgt {

class FlattenLayer final : public Layer {
 public:
  explicit FlattenLayer(std::string name) : Layer(std::move(name)) {}
  Shape output_shape(const Shape& input) const override;
  void forward(const Tensor& in, Tensor& out, const StepContext& ctx) override;
  void backward(const Tensor& in, const Tensor& out, const Tensor& grad_out, Tensor* grad_in,
                const StepContext& ctx) override;
  bool row_wise(int64_t, int64_t) const override { return true; }
  LayerSpec spec() const override {
    LayerSpec s;
    s.kind = LayerSpec::Kind::flatten;
    return s;
  }
};

}  // namespace mgt
