// A model whose layer of its own writes past its output (a loop bound off by `model.overrun`
// floats), as a plugin author's bug can: unchecked it corrupts the heap and the run dies later,
// far from the cause; under MGTRAIN_CHECKED=1 the first forward names the layer
// (tests/e2e/custom_model.sh).
#include "mgtrain/plugin.hpp"

namespace {

const mgt::ConfigKey kKeys[] = {
    {"model.overrun", mgt::KeyType::non_negative_integer, "8", "floats written past the output"},
};

// y = x, and `overrun` more floats after the output.
class OverrunLayer final : public mgt::Layer {
 public:
  OverrunLayer(const std::string& name, int64_t overrun) : Layer(name), overrun_(overrun) {}
  mgt::Shape output_shape(const mgt::Shape& input) const override { return input; }
  void forward(const mgt::LayerRun&, const mgt::Tensor& in, mgt::Tensor& out) override {
    for (int64_t i = 0; i < in.numel() + overrun_; ++i) out.data()[i] = i < in.numel() ? in.data()[i] : 0.0f;
  }
  void backward(const mgt::LayerRun& run, const mgt::Tensor&, const mgt::Tensor&, const mgt::Tensor& grad_out,
                mgt::Tensor* grad_in) override {
    if (grad_in) run.ops.copy(grad_in->data(), grad_out.data(), static_cast<size_t>(grad_out.numel()) * sizeof(float));
  }
  void hints(const mgt::HintQuery&, mgt::LayerHints& hints) const override { hints.row_wise = true; }

 private:
  int64_t overrun_;
};

class OverrunMlp final : public mgt::SequentialModel {
 public:
  explicit OverrunMlp(const mgt::ConfigSection& config) {
    add(mgt::make_flatten("flatten"));
    add(mgt::make_linear("fc1", 784, 64));
    add(std::make_unique<OverrunLayer>("overrun1", config.get_int("overrun")));
    add(mgt::make_linear("fc2", 64, 10, mgt::Init::fan_in_uniform));
  }
};

}  // namespace

MGT_MODEL_PLUGIN("overrun_mlp", "1.0.0", "test: a layer that writes past its output", kKeys, OverrunMlp)
