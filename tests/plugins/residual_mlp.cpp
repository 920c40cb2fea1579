// A model that is not a stack of layers, as a plugin author writes one: SDK layers driven by hand
// on the host with a skip connection, out = fc3(a1 + relu(fc2(a1))) with a1 = relu(fc1(x)). It
// trains on the CPU, where the step drives any Model; the GPU path refuses it by name.
#include <memory>

#include "mgtrain/plugin.hpp"

namespace {

const mgt::ConfigKey kKeys[] = {
    {"model.inputs", mgt::KeyType::positive_integer, "784", "input features (the sample's size)"},
    {"model.hidden", mgt::KeyType::positive_integer, "64", "width of both hidden layers"},
    {"model.classes", mgt::KeyType::positive_integer, "10", "output classes"},
};

class ResidualMlp final : public mgt::Model {
 public:
  explicit ResidualMlp(const mgt::ConfigSection& config)
      : inputs_(config.get_int("inputs")), hidden_(config.get_int("hidden")), classes_(config.get_int("classes")) {
    fc1_ = mgt::make_linear("fc1", inputs_, hidden_);
    relu1_ = mgt::make_relu("relu1");
    fc2_ = mgt::make_linear("fc2", hidden_, hidden_);
    relu2_ = mgt::make_relu("relu2");
    fc3_ = mgt::make_linear("fc3", hidden_, classes_, mgt::Init::fan_in_uniform);
  }

  void declare(mgt::ParameterStore& store) override {
    store_ = &store;
    for (auto* layer : {fc1_.get(), fc2_.get(), fc3_.get()}) layer->declare(store);
  }

  mgt::Shape output_shape(const mgt::Shape& input) const override {
    MGT_CHECK(!input.empty() && mgt::shape_numel(input) == input[0] * inputs_, mgt::ConfigError,
              "model 'residual_mlp' takes " + std::to_string(inputs_) + " features a sample, got " +
                  mgt::shape_string(input));
    return {input[0], classes_};
  }

  const mgt::Tensor& forward(const mgt::Tensor& input, const mgt::StepContext& ctx) override {
    plan(input.shape()[0]);
    const mgt::LayerRun run{mgt::host_ops(ctx.step), *store_, ctx};
    x_.rebind(const_cast<float*>(input.data()));  // read only
    fc1_->forward(run, x_, h1_);
    relu1_->forward(run, h1_, a1_);
    fc2_->forward(run, a1_, h2_);
    relu2_->forward(run, h2_, a2_);
    run.ops.binary(mgt::BinaryOp::add, a1_.data(), a2_.data(), sum_.data(), sum_.numel());
    fc3_->forward(run, sum_, logits_);
    return logits_;
  }

  void backward(const mgt::Tensor& grad_logits, const mgt::StepContext& ctx,
                const mgt::GradientsReady& ready) override {
    const mgt::LayerRun run{mgt::host_ops(ctx.step), *store_, ctx};
    fc3_->backward(run, sum_, logits_, grad_logits, &d_sum_);
    ready(fc3_->param_handles());
    // The sum's gradient goes down both branches: through relu2 and fc2, and straight to a1.
    relu2_->backward(run, h2_, a2_, d_sum_, &d_h2_);
    fc2_->backward(run, a1_, h2_, d_h2_, &d_a1_);
    ready(fc2_->param_handles());
    run.ops.binary(mgt::BinaryOp::add, d_a1_.data(), d_sum_.data(), d_a1_.data(), d_a1_.numel());
    relu1_->backward(run, h1_, a1_, d_a1_, &d_h1_);
    fc1_->backward(run, x_, h1_, d_h1_, nullptr);
    ready(fc1_->param_handles());
  }

 private:
  // Activations and their gradients for `rows` rows, made again when the batch changes.
  void plan(int64_t rows) {
    if (rows == rows_) return;
    rows_ = rows;
    planner_ = mgt::make_host_layer_planner();
    x_ = mgt::Tensor::view(nullptr, {rows, inputs_});
    for (auto* t : {&h1_, &a1_, &h2_, &a2_, &sum_, &d_sum_, &d_h2_, &d_a1_, &d_h1_}) t->resize({rows, hidden_});
    logits_.resize({rows, classes_});
    fc1_->plan(*planner_, {rows, inputs_});
    for (auto* layer : {relu1_.get(), fc2_.get(), relu2_.get(), fc3_.get()}) layer->plan(*planner_, {rows, hidden_});
  }

  int64_t inputs_, hidden_, classes_;
  std::unique_ptr<mgt::Layer> fc1_, relu1_, fc2_, relu2_, fc3_;
  mgt::ParameterStore* store_ = nullptr;
  std::unique_ptr<mgt::LayerPlanner> planner_;
  int64_t rows_ = 0;
  mgt::Tensor x_, h1_, a1_, h2_, a2_, sum_, logits_, d_sum_, d_h2_, d_a1_, d_h1_;
};

}  // namespace

MGT_MODEL_PLUGIN("residual_mlp", "1.0.0", "test: a model with a skip connection, driven by hand", kKeys, ResidualMlp)
