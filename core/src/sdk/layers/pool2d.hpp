#pragma once
// What AvgPool2d and MaxPool2d share: k x k windows at a stride over each channel's plane, no
// padding. Their arguments, checks, output shape and export form are one; the two differ only in
// the operation that pools (and so in their plan, forward, backward and hints).
#include <string>

#include "layer_checks.hpp"
#include "mgtrain/layers.hpp"

namespace mgt::layers {

class Pool2dLayer : public Layer {
 public:
  Shape output_shape(const Shape& input) const override { return pool_output_shape(name(), input, kernel_, stride_); }

  LayerDescription describe() const override {
    LayerDescription d;
    d.kind = kind_;
    d.ints = {{"kernel", kernel_}, {"stride", stride_}};
    return d;
  }

 protected:
  Pool2dLayer(const std::string& name, LayerKind kind, int64_t kernel, int64_t stride)
      : Layer(name), kind_(kind), kernel_(kernel), stride_(stride) {
    check_positive(name, "kernel", kernel);
    check_positive(name, "stride", stride);
  }

  LayerKind kind_;
  int64_t kernel_, stride_;
  Shape planned_;  // the input shape plan() was called for
};

}  // namespace mgt::layers
