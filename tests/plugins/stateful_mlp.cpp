// A model with a layer of its own that keeps data from forward for its backward in its planned
// memory and, by `model.row_wise`, sets the row_wise hint or leaves the default, as a plugin author
// may forget to. Softsign, y = x / (1 + |x|), keeps d = 1 / (1 + |x|); dx = dy d^2. In
// deterministic mode a layer that is not row-wise runs one micro-shard at a time, and its backward
// must see each shard's d, not the last shard's: both forms must train to the same bits
// (tests/e2e/custom_model.sh). Loops on host memory: the CPU path.
#include "mgtrain/plugin.hpp"

namespace {

const mgt::ConfigKey kKeys[] = {
    {"model.row_wise", mgt::KeyType::boolean, "true", "the softsign layer declares row_wise()"},
};

class SoftsignLayer final : public mgt::Layer {
 public:
  SoftsignLayer(const std::string& name, bool row_wise) : Layer(name), row_wise_(row_wise) {}
  mgt::Shape output_shape(const mgt::Shape& input) const override { return input; }
  void plan(mgt::LayerPlanner& planner, const mgt::Shape& input) override {
    kept_ = planner.allocate_array<float>(static_cast<size_t>(mgt::shape_numel(input)));
  }
  void forward(const mgt::LayerRun&, const mgt::Tensor& in, mgt::Tensor& out) override {
    for (int64_t i = 0; i < in.numel(); ++i) {
      const float x = in.data()[i];
      kept_[i] = 1.0f / (1.0f + (x < 0.0f ? -x : x));
      out.data()[i] = x * kept_[i];
    }
  }
  void backward(const mgt::LayerRun&, const mgt::Tensor&, const mgt::Tensor&, const mgt::Tensor& grad_out,
                mgt::Tensor* grad_in) override {
    if (!grad_in) return;
    for (int64_t i = 0; i < grad_out.numel(); ++i) grad_in->data()[i] = grad_out.data()[i] * kept_[i] * kept_[i];
  }
  void hints(const mgt::HintQuery&, mgt::LayerHints& hints) const override { hints.row_wise = row_wise_; }

 private:
  bool row_wise_;
  float* kept_ = nullptr;
};

class StatefulMlp final : public mgt::SequentialModel {
 public:
  explicit StatefulMlp(const mgt::ConfigSection& config) {
    add(mgt::make_flatten("flatten"));
    add(mgt::make_linear("fc1", 784, 64));
    add(std::make_unique<SoftsignLayer>("softsign1", config.get_bool("row_wise")));
    add(mgt::make_linear("fc2", 64, 10, mgt::Init::fan_in_uniform));
  }
};

}  // namespace

MGT_MODEL_PLUGIN("stateful_mlp", "1.0.0", "test: a layer keeping forward state, row_wise by a key", kKeys, StatefulMlp)
