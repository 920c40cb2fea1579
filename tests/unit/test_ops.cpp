// The operations layers are written in (mgt::Ops) on the CPU backend: uniform() gives
// mgt::rng's numbers for the step the backend reads, at any offset; the element-wise ops
// compute their functions; a layer run on another shape than it was planned for is refused.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <vector>

#include "kernels/backend.hpp"
#include "mgtrain/error.hpp"
#include "mgtrain/layers.hpp"
#include "mgtrain/model.hpp"
#include "mgtrain/ops.hpp"
#include "mgtrain/rng.hpp"

namespace {

TEST(Ops, UniformIsTheRngStreamOfTheStepReadAtRunTime) {
  auto backend = mgt::kernels::make_cpu_backend();
  int64_t step = 5;
  backend->read_step_from(&step);
  const uint64_t key = mgt::rng::make_key(7, 11);
  for (uint64_t first : {0u, 1u, 3u, 6u}) {
    std::vector<float> got(13), want(13);
    backend->uniform(got.data(), got.size(), key, first);
    mgt::rng::fill_uniform(want.data(), want.size(), 0.0f, 1.0f, key, 5, first);
    EXPECT_EQ(got, want) << "first index " << first;
  }
  std::vector<float> at5(8), at6(8);
  backend->uniform(at5.data(), at5.size(), key, 0);
  step = 6;  // the backend reads the step when the operation runs
  backend->uniform(at6.data(), at6.size(), key, 0);
  EXPECT_NE(at5, at6);
}

TEST(Ops, ElementWiseFunctions) {
  mgt::Ops& ops = mgt::host_ops();
  const std::vector<float> x = {-2.0f, -0.5f, 0.0f, 0.25f, 3.0f};
  const int64_t n = static_cast<int64_t>(x.size());
  std::vector<float> y(x.size());
  ops.unary(mgt::UnaryOp::sigmoid, x.data(), y.data(), n);
  for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(y[i], 1.0 / (1.0 + std::exp(-x[i])), 1e-6) << i;
  ops.unary(mgt::UnaryOp::tanh, x.data(), y.data(), n);
  for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(y[i], std::tanh(x[i]), 1e-6) << i;
  ops.unary(mgt::UnaryOp::relu, x.data(), y.data(), n);
  for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(y[i], x[i] > 0 ? x[i] : 0.0f) << i;
  ops.unary(mgt::UnaryOp::square, x.data(), y.data(), n);
  for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(y[i], x[i] * x[i]) << i;
  ops.unary(mgt::UnaryOp::erf, x.data(), y.data(), n);
  for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(y[i], std::erf(x[i]), 1e-6) << i;
  ops.unary(mgt::UnaryOp::sin, x.data(), y.data(), n);
  for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(y[i], std::sin(x[i]), 1e-6) << i;
  ops.unary(mgt::UnaryOp::cos, x.data(), y.data(), n);
  for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(y[i], std::cos(x[i]), 1e-6) << i;
  ops.affine(x.data(), y.data(), n, -2.0f, 1.0f);
  for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(y[i], -2.0f * x[i] + 1.0f) << i;
  std::vector<float> z(x.size());
  ops.binary(mgt::BinaryOp::subtract, x.data(), y.data(), z.data(), n);
  for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(z[i], x[i] - y[i]) << i;
  ops.binary(mgt::BinaryOp::maximum, x.data(), y.data(), z.data(), n);
  for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(z[i], std::max(x[i], y[i])) << i;
  // In place, as a layer composing a derivative does.
  ops.binary(mgt::BinaryOp::multiply, x.data(), y.data(), y.data(), n);
  for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(y[i], x[i] * (-2.0f * x[i] + 1.0f)) << i;
}

TEST(Ops, ALayerRunOnAnotherShapeThanPlannedIsRefused) {
  auto layer = mgt::make_linear("fc", 4, 3);
  mgt::ParameterStore store;
  layer->declare(store);
  store.finalize();
  const auto planner = mgt::make_host_layer_planner();
  layer->plan(*planner, {2, 4});
  mgt::Tensor x({5, 4}), y({5, 3});
  mgt::StepContext ctx;
  try {
    layer->forward(mgt::LayerRun{mgt::host_ops(), store, ctx}, x, y);
    FAIL() << "no error";
  } catch (const mgt::Error& e) {
    EXPECT_NE(std::string(e.what()).find("planned for input [2, 4] but runs on [5, 4]"), std::string::npos) << e.what();
  }
  EXPECT_THROW(layer->plan(*planner, {2, 5}), mgt::ConfigError);  // the wrong width, named at plan time
}

// A layer of one's own that declares a parameter but leaves it out of param_handles() would train
// it never: refused when the model is declared.
TEST(Ops, AParameterNotListedInParamHandlesIsRefused) {
  class Forgetful final : public mgt::Layer {
   public:
    Forgetful() : Layer("forgetful") {}
    void declare(mgt::ParameterStore& store) override { store.declare("forgetful.scale", {4}, mgt::Init::zeros, 1); }
    mgt::Shape output_shape(const mgt::Shape& input) const override { return input; }
    void forward(const mgt::LayerRun&, const mgt::Tensor&, mgt::Tensor&) override {}
    void backward(const mgt::LayerRun&, const mgt::Tensor&, const mgt::Tensor&, const mgt::Tensor&,
                  mgt::Tensor*) override {}
  };
  mgt::SequentialModel model;
  model.add(mgt::make_linear("fc", 4, 4));
  model.add(std::make_unique<Forgetful>());
  mgt::ParameterStore store;
  try {
    model.declare(store);
    FAIL() << "no error";
  } catch (const mgt::Error& e) {
    EXPECT_NE(std::string(e.what()).find("declares 'forgetful.scale' but does not list it"), std::string::npos)
        << e.what();
  }
}

}  // namespace
