// SDK layers: every backward against central finite differences of loss = sum(out * r) for a
// fixed random r (input and parameter gradients), gradient accumulation, the dropout mask's
// independence from how a batch is split over ranks, softmax cross-entropy, and SequentialModel
// against the same layers composed by hand.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "mgtrain/error.hpp"
#include "mgtrain/gradient_check.hpp"
#include "mgtrain/layers.hpp"
#include "mgtrain/model.hpp"
#include "mgtrain/parameters.hpp"
#include "mgtrain/tensor.hpp"
#include "sdk/activation_blocks.hpp"
#include "sdk/layer_hints.hpp"

namespace {

using mgt::Layer;
using mgt::ParameterStore;
using mgt::Shape;
using mgt::StepContext;
using mgt::Tensor;

void fill_random(float* p, int64_t n, unsigned seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  for (int64_t i = 0; i < n; ++i) p[i] = dist(gen);
}

Tensor random_tensor(const Shape& shape, unsigned seed) {
  Tensor t(shape);
  fill_random(t.data(), t.numel(), seed);
  return t;
}

// Values far from each other and from zero, so ReLU and max-pool have no kink within eps.
Tensor well_separated_tensor(const Shape& shape, unsigned seed) {
  Tensor t(shape);
  std::vector<int64_t> order(t.numel());
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), std::mt19937(seed));
  for (int64_t i = 0; i < t.numel(); ++i) {
    const float v = 0.05f + 0.02f * static_cast<float>(order[i]);
    t.data()[i] = (order[i] % 2) ? v : -v;
  }
  return t;
}

// Layers driven by hand on the host, as a model plugin of its own would drive them: planned
// (make_host_layer_planner) before each forward, run with host_ops(); a layer that aliases its input
// (Flatten) is a copy here, where the executor would share the memory.
std::map<const Layer*, std::unique_ptr<mgt::LayerPlanner>>& plans() {
  static std::map<const Layer*, std::unique_ptr<mgt::LayerPlanner>> by_layer;
  return by_layer;
}

ParameterStore& no_params() {
  static ParameterStore store;
  return store;
}

void run_forward(Layer& layer, ParameterStore& store, const Tensor& x, Tensor& y, const StepContext& ctx) {
  auto& planner = plans()[&layer];
  planner = mgt::make_host_layer_planner();
  layer.plan(*planner, x.shape());
  if (mgt::layer_hints::of(layer, mgt::host_ops()).aliases_input) {
    std::copy(x.data(), x.data() + x.numel(), y.data());
    return;
  }
  layer.forward(mgt::LayerRun{mgt::host_ops(ctx.step), store, ctx}, x, y);
}

void run_backward(Layer& layer, ParameterStore& store, const Tensor& x, const Tensor& y, const Tensor& dy, Tensor* dx,
                  const StepContext& ctx) {
  if (mgt::layer_hints::of(layer, mgt::host_ops()).aliases_input) {
    if (dx) std::copy(dy.data(), dy.data() + dy.numel(), dx->data());
    return;
  }
  layer.backward(mgt::LayerRun{mgt::host_ops(ctx.step), store, ctx}, x, y, dy, dx);
}

// A layer with its own finalized, initialized store. Biases are perturbed away from their zero
// initialisation so that they take part in the check.
struct Harness {
  ParameterStore store;
  std::unique_ptr<Layer> layer;
  explicit Harness(std::unique_ptr<Layer> l) : layer(std::move(l)) {
    layer->declare(store);
    store.finalize();
    store.initialize(1234);
    for (auto h : layer->param_handles()) {
      std::vector<float> noise(store.info(h).numel);
      fill_random(noise.data(), static_cast<int64_t>(noise.size()), 99 + static_cast<unsigned>(h), -0.1f, 0.1f);
      for (size_t i = 0; i < noise.size(); ++i) store.param(h)[i] += noise[i];
    }
  }
};

// Checks the input gradient and every parameter gradient of the harness's layer at x, with the
// SDK's checker (mgtrain/gradient_check.hpp) and its default tolerances: 48 probes a tensor,
// |analytic - numeric| within 2e-3 + 1e-2 * scale.
void check_gradients(Harness& h, const Tensor& x, const StepContext& ctx, bool check_input = true) {
  mgt::GradientCheckOptions options;
  options.step = ctx;
  options.check_input = check_input;
  const mgt::GradientCheckReport report = mgt::check_layer_gradients(*h.layer, h.store, x, options);
  EXPECT_TRUE(report.passed) << report.summary;
  EXPECT_GT(report.checked, 0) << report.summary;
}

// The same comparison by hand, for what is not one layer: the loss, layers sharing a table, a
// whole model. The SDK checker's default tolerance.
void expect_close(double analytic, double numeric, const std::string& what) {
  const double tol = 2e-3 + 1e-2 * std::max(std::abs(analytic), std::abs(numeric));
  EXPECT_NEAR(analytic, numeric, tol) << what;
}

std::vector<int64_t> probe_indices(int64_t n, int64_t max_probes = 48) {
  std::vector<int64_t> idx;
  const int64_t step = std::max<int64_t>(1, n / max_probes);
  for (int64_t i = 0; i < n; i += step) idx.push_back(i);
  if (idx.back() != n - 1) idx.push_back(n - 1);
  return idx;
}

// (loss(v + eps) - loss(v - eps)) / 2 eps for the value v held in `value`, which is restored.
double central_difference(float& value, float eps, const std::function<double()>& loss) {
  const float saved = value;
  value = saved + eps;
  const double up = loss();
  value = saved - eps;
  const double down = loss();
  value = saved;
  return (up - down) / (2.0 * eps);
}

StepContext training_ctx() {
  StepContext ctx;
  ctx.seed = 42;
  ctx.step = 3;
  ctx.training = true;
  return ctx;
}

// ---------------------------------------------------------------------------------------------

// y = w x element-wise for one parameter w, whose backward gets one gradient wrong on purpose:
// the checker must fail and name it.
class ScaleLayer final : public Layer {
 public:
  enum class Wrong { nothing, input, weight };
  explicit ScaleLayer(Wrong wrong) : Layer("scale"), wrong_(wrong) {}
  void declare(ParameterStore& store) override { w_ = store.declare(name() + ".weight", {1}, mgt::Init::ones, 1); }
  Shape output_shape(const Shape& input) const override { return input; }
  void forward(const mgt::LayerRun& run, const Tensor& in, Tensor& out) override {
    const float w = run.store.param(w_)[0];  // host memory: host_ops
    run.ops.affine(in.data(), out.data(), in.numel(), w, 0.0f);
  }
  void backward(const mgt::LayerRun& run, const Tensor& in, const Tensor&, const Tensor& grad_out,
                Tensor* grad_in) override {
    const float w = run.store.param(w_)[0];
    double dw = 0;
    for (int64_t i = 0; i < in.numel(); ++i) dw += double(in.data()[i]) * grad_out.data()[i];
    run.store.grad(w_)[0] += static_cast<float>(wrong_ == Wrong::weight ? 1.5 * dw : dw);
    if (grad_in) run.ops.affine(grad_out.data(), grad_in->data(), in.numel(), wrong_ == Wrong::input ? -w : w, 0.0f);
  }
  std::vector<mgt::ParamHandle> param_handles() const override { return {w_}; }

 private:
  Wrong wrong_;
  mgt::ParamHandle w_ = 0;
};

TEST(GradientCheck, PassesARightBackwardAndNamesTheWorstElementOfAWrongOne) {
  const Tensor x = random_tensor({3, 5}, 4);
  mgt::GradientCheckOptions options;
  options.step = training_ctx();
  ScaleLayer right(ScaleLayer::Wrong::nothing);
  const mgt::GradientCheckReport ok = mgt::check_layer_gradients(right, x, options);
  EXPECT_TRUE(ok.passed) << ok.summary;
  EXPECT_EQ(ok.checked, 15 + 1);  // every input element and the weight
  EXPECT_EQ(ok.failed, 0);

  ScaleLayer wrong_input(ScaleLayer::Wrong::input);
  const mgt::GradientCheckReport in = mgt::check_layer_gradients(wrong_input, x, options);
  EXPECT_FALSE(in.passed);
  EXPECT_EQ(in.failed, 15);
  EXPECT_EQ(in.worst.tensor, "input");
  EXPECT_NEAR(in.worst.analytic, -in.worst.numeric, 1e-2 * std::abs(in.worst.numeric)) << in.summary;
  EXPECT_NE(in.summary.find("15 of 16 elements outside the tolerance; worst: input element"), std::string::npos)
      << in.summary;

  ScaleLayer wrong_weight(ScaleLayer::Wrong::weight);
  const mgt::GradientCheckReport w = mgt::check_layer_gradients(wrong_weight, x, options);
  EXPECT_FALSE(w.passed);
  EXPECT_EQ(w.failed, 1);
  EXPECT_EQ(w.worst.tensor, "scale.weight");
  EXPECT_EQ(w.worst.element, 0);
  EXPECT_NEAR(w.worst.analytic, 1.5 * w.worst.numeric, 1e-2 * std::abs(w.worst.numeric)) << w.summary;
  // Without the input check the wrong input gradient goes unseen, and a looser tolerance lets the
  // wrong weight pass: the caller's settings are the ones applied.
  options.check_input = false;
  EXPECT_TRUE(mgt::check_layer_gradients(wrong_input, x, options).passed);
  options.rel_tolerance = 0.5;
  EXPECT_TRUE(mgt::check_layer_gradients(wrong_weight, x, options).passed);
}

TEST(LinearLayer, GradientsMatchFiniteDifferences) {
  Harness h(mgt::make_linear("fc", 7, 5));
  Tensor x = random_tensor({4, 7}, 1);
  check_gradients(h, x, training_ctx());
}

TEST(LinearLayer, FlattensHigherRankInput) {
  Harness h(mgt::make_linear("fc", 6, 3));
  EXPECT_EQ(h.layer->output_shape({5, 2, 3}), (Shape{5, 3}));
  EXPECT_THROW(h.layer->output_shape({5, 7}), mgt::ConfigError);
  Tensor x = random_tensor({5, 2, 3}, 2);
  check_gradients(h, x, training_ctx());
}

TEST(LinearLayer, DeclaresCanonicalNamesAndShapes) {
  Harness h(mgt::make_linear("fc1", 7, 5));
  const auto handles = h.layer->param_handles();
  ASSERT_EQ(handles.size(), 2u);
  EXPECT_EQ(h.store.info(handles[0]).name, "fc1.weight");
  EXPECT_EQ(h.store.info(handles[0]).shape, (Shape{5, 7}));
  EXPECT_EQ(h.store.info(handles[0]).init, mgt::Init::he_uniform);
  EXPECT_EQ(h.store.info(handles[0]).fan_in, 7);
  EXPECT_EQ(h.store.info(handles[1]).name, "fc1.bias");
  EXPECT_EQ(h.store.info(handles[1]).init, mgt::Init::zeros);
}

TEST(LinearLayer, ForwardComputesXWTransposePlusBias) {
  Harness h(mgt::make_linear("fc", 3, 2));
  const auto handles = h.layer->param_handles();
  const float w[] = {1, 2, 3, -1, 0, 4};
  std::copy(w, w + 6, h.store.param(handles[0]));
  h.store.param(handles[1])[0] = 0.5f;
  h.store.param(handles[1])[1] = -2.0f;
  Tensor x({2, 3});
  const float xv[] = {1, 1, 1, 2, 0, -1};
  std::copy(xv, xv + 6, x.data());
  Tensor y({2, 2});
  run_forward(*h.layer, h.store, x, y, training_ctx());
  EXPECT_FLOAT_EQ(y.data()[0], 6.5f);
  EXPECT_FLOAT_EQ(y.data()[1], 1.0f);
  EXPECT_FLOAT_EQ(y.data()[2], -0.5f);
  EXPECT_FLOAT_EQ(y.data()[3], -8.0f);
}

TEST(LinearLayer, BackwardAccumulatesParameterGradients) {
  Harness h(mgt::make_linear("fc", 5, 4));
  const Tensor x = random_tensor({3, 5}, 3), dy = random_tensor({3, 4}, 4);
  Tensor y({3, 4}), dx({3, 5});
  run_forward(*h.layer, h.store, x, y, training_ctx());
  h.store.zero_grads();
  run_backward(*h.layer, h.store, x, y, dy, &dx, training_ctx());
  const std::vector<float> once(h.store.grads_data(), h.store.grads_data() + h.store.flat_size());
  const std::vector<float> dx_once(dx.data(), dx.data() + dx.numel());
  run_backward(*h.layer, h.store, x, y, dy, &dx, training_ctx());
  for (size_t i = 0; i < once.size(); ++i)
    ASSERT_FLOAT_EQ(h.store.grads_data()[i], 2.0f * once[i]) << "gradient element " << i;
  // The input gradient is written, not accumulated.
  for (int64_t i = 0; i < dx.numel(); ++i) ASSERT_FLOAT_EQ(dx.data()[i], dx_once[i]);
}

// ---------------------------------------------------------------------------------------------

TEST(Conv2dLayer, GradientsMatchFiniteDifferencesWithPadding) {
  Harness h(mgt::make_conv2d("conv", 2, 3, 3, 1, 1));
  Tensor x = random_tensor({2, 2, 5, 4}, 5);
  EXPECT_EQ(h.layer->output_shape(x.shape()), (Shape{2, 3, 5, 4}));
  check_gradients(h, x, training_ctx());
}

TEST(Conv2dLayer, GradientsMatchFiniteDifferencesWithStride) {
  Harness h(mgt::make_conv2d("conv", 3, 2, 3, 2, 1));
  Tensor x = random_tensor({2, 3, 7, 6}, 6);
  EXPECT_EQ(h.layer->output_shape(x.shape()), (Shape{2, 2, 4, 3}));
  check_gradients(h, x, training_ctx());
}

TEST(Conv2dLayer, DeclaresHeUniformWeightsWithFanIn) {
  Harness h(mgt::make_conv2d("conv1", 3, 8, 5));
  const auto handles = h.layer->param_handles();
  EXPECT_EQ(h.store.info(handles[0]).name, "conv1.weight");
  EXPECT_EQ(h.store.info(handles[0]).shape, (Shape{8, 3, 5, 5}));
  EXPECT_EQ(h.store.info(handles[0]).fan_in, 75);
  EXPECT_EQ(h.store.info(handles[1]).name, "conv1.bias");
  EXPECT_THROW(h.layer->output_shape({1, 4, 9, 9}), mgt::ConfigError);
}

TEST(Conv2dLayer, BackwardAccumulatesAndSurvivesBatchChange) {
  Harness h(mgt::make_conv2d("conv", 2, 2, 3, 1, 1));
  const StepContext ctx = training_ctx();
  for (int64_t batch : {3, 1, 3}) {
    const Tensor x = random_tensor({batch, 2, 4, 4}, 7), dy = random_tensor({batch, 2, 4, 4}, 8);
    Tensor y({batch, 2, 4, 4});
    run_forward(*h.layer, h.store, x, y, ctx);
    h.store.zero_grads();
    run_backward(*h.layer, h.store, x, y, dy, nullptr, ctx);
    const std::vector<float> once(h.store.grads_data(), h.store.grads_data() + h.store.flat_size());
    run_backward(*h.layer, h.store, x, y, dy, nullptr, ctx);
    for (size_t i = 0; i < once.size(); ++i)
      ASSERT_NEAR(h.store.grads_data()[i], 2.0f * once[i], 1e-5f * (1 + std::abs(once[i])));
  }
}

// ---------------------------------------------------------------------------------------------

TEST(PoolLayer, MaxPoolGradientsMatchFiniteDifferences) {
  Harness h(mgt::make_max_pool2d("pool", 2, 2));
  // Odd H and W: the last row and column belong to no window and get zero gradient.
  Tensor x = well_separated_tensor({2, 3, 7, 5}, 9);
  EXPECT_EQ(h.layer->output_shape(x.shape()), (Shape{2, 3, 3, 2}));
  check_gradients(h, x, training_ctx());
}

TEST(PoolLayer, OverlappingWindowsGradientsMatchFiniteDifferences) {
  Harness h(mgt::make_max_pool2d("pool", 3, 2));
  Tensor x = well_separated_tensor({1, 2, 7, 7}, 10);
  EXPECT_EQ(h.layer->output_shape(x.shape()), (Shape{1, 2, 3, 3}));
  check_gradients(h, x, training_ctx());
}

TEST(PoolLayer, AveragePoolingIsTheWindowMeanWithItsGradient) {
  // Overlapping windows (k 3, stride 2) and a last row and column in no window (H 8, W 6).
  Harness h(mgt::make_avg_pool2d("avgpool", 3, 2));
  Tensor x = random_tensor({2, 3, 8, 6}, 22);
  ASSERT_EQ(h.layer->output_shape(x.shape()), (Shape{2, 3, 3, 2}));
  EXPECT_THROW(h.layer->output_shape({2, 3, 2, 6}), mgt::ConfigError);
  EXPECT_THROW(mgt::make_avg_pool2d("avgpool", 0, 1), mgt::ConfigError);
  Tensor y({2, 3, 3, 2});
  run_forward(*h.layer, h.store, x, y, training_ctx());
  for (int64_t plane = 0; plane < 6; ++plane)
    for (int64_t oh = 0; oh < 3; ++oh)
      for (int64_t ow = 0; ow < 2; ++ow) {
        double mean = 0.0;
        for (int64_t i = 0; i < 3; ++i)
          for (int64_t j = 0; j < 3; ++j) mean += x.data()[(plane * 8 + oh * 2 + i) * 6 + ow * 2 + j];
        EXPECT_NEAR(y.data()[(plane * 3 + oh) * 2 + ow], mean / 9.0, 1e-6)
            << "plane " << plane << " window " << oh << "," << ow;
      }
  check_gradients(h, x, training_ctx());
}

TEST(PoolLayer, GlobalAveragePoolingIsTheChannelMeanWithItsGradient) {
  Harness h(mgt::make_global_avg_pool2d("gap"));
  Tensor x = random_tensor({2, 3, 5, 4}, 21);
  EXPECT_EQ(h.layer->output_shape(x.shape()), (Shape{2, 3}));
  EXPECT_THROW(h.layer->output_shape({2, 3, 5}), mgt::ConfigError);
  Tensor y({2, 3});
  run_forward(*h.layer, h.store, x, y, training_ctx());
  for (int64_t r = 0; r < 6; ++r) {
    double mean = 0.0;
    for (int64_t j = 0; j < 20; ++j) mean += x.data()[r * 20 + j];
    EXPECT_NEAR(y.data()[r], mean / 20.0, 1e-6) << "channel row " << r;
  }
  check_gradients(h, x, training_ctx());
}

// Batch norm in training by hand, in double: gamma (x - mean) / sqrt(var + eps) + beta per channel.
std::vector<double> batch_norm_by_hand(const Tensor& x, const float* gamma, const float* beta, double eps) {
  const int64_t n = x.dim(0), c = x.dim(1), plane = x.dim(2) * x.dim(3);
  std::vector<double> y(static_cast<size_t>(x.numel()));
  for (int64_t ch = 0; ch < c; ++ch) {
    double mean = 0.0, var = 0.0;
    for (int64_t b = 0; b < n; ++b)
      for (int64_t i = 0; i < plane; ++i) mean += x.data()[(b * c + ch) * plane + i];
    mean /= static_cast<double>(n * plane);
    for (int64_t b = 0; b < n; ++b)
      for (int64_t i = 0; i < plane; ++i) {
        const double d = x.data()[(b * c + ch) * plane + i] - mean;
        var += d * d;
      }
    var /= static_cast<double>(n * plane);
    for (int64_t b = 0; b < n; ++b)
      for (int64_t i = 0; i < plane; ++i) {
        const int64_t at = (b * c + ch) * plane + i;
        y[static_cast<size_t>(at)] = gamma[ch] * (x.data()[at] - mean) / std::sqrt(var + eps) + beta[ch];
      }
  }
  return y;
}

TEST(BatchNorm2dLayer, NormalisesEachChannelByTheBatchWithItsGradients) {
  Harness h(mgt::make_batch_norm2d("bn", 3));
  Tensor x = random_tensor({4, 3, 5, 5}, 31);
  for (int64_t i = 0; i < x.numel(); ++i) x.data()[i] += 3.0f + static_cast<float>((i / 25) % 3);  // off-centre
  EXPECT_THROW(h.layer->output_shape({4, 2, 5, 5}), mgt::ConfigError);
  const auto& params = h.store.params();
  ASSERT_EQ(params.size(), 2u);
  EXPECT_EQ(params[0].name, "bn.weight");
  EXPECT_EQ(params[1].name, "bn.bias");
  ASSERT_EQ(h.store.buffers().size(), 2u);
  EXPECT_EQ(h.store.buffers()[0].name, "bn.running_mean");
  EXPECT_EQ(h.store.buffers()[1].name, "bn.running_var");
  Tensor y(x.shape());
  run_forward(*h.layer, h.store, x, y, training_ctx());
  const auto expected = batch_norm_by_hand(x, h.store.param(0), h.store.param(1), 1e-5);
  for (int64_t i = 0; i < y.numel(); ++i) ASSERT_NEAR(y.data()[i], expected[static_cast<size_t>(i)], 1e-4) << i;
  check_gradients(h, x, training_ctx());
}

TEST(BatchNorm2dLayer, RunningStatisticsMoveByMomentumAndServeEvaluation) {
  Harness h(mgt::make_batch_norm2d("bn", 2, 1e-5f, 0.25f));
  Tensor x = random_tensor({3, 2, 4, 4}, 32);
  for (int64_t i = 0; i < x.numel(); ++i) x.data()[i] = 2.0f * x.data()[i] + 1.0f;
  Tensor y(x.shape());
  run_forward(*h.layer, h.store, x, y, training_ctx());
  const float* running_mean = h.store.buffer(0);
  const float* running_var = h.store.buffer(1);
  for (int64_t ch = 0; ch < 2; ++ch) {
    double mean = 0.0, squares = 0.0;
    const int64_t m = 3 * 16;
    for (int64_t b = 0; b < 3; ++b)
      for (int64_t i = 0; i < 16; ++i) mean += x.data()[(b * 2 + ch) * 16 + i];
    mean /= m;
    for (int64_t b = 0; b < 3; ++b)
      for (int64_t i = 0; i < 16; ++i) squares += std::pow(x.data()[(b * 2 + ch) * 16 + i] - mean, 2);
    EXPECT_NEAR(running_mean[ch], 0.25 * mean, 1e-5);                           // from 0
    EXPECT_NEAR(running_var[ch], 0.75 * 1.0 + 0.25 * squares / (m - 1), 1e-5);  // from 1, unbiased
  }
  // Evaluation normalises by the running statistics and leaves them be; so does a training pass
  // that does not hold the global batch's first row (once a step, on rank 0's first pass).
  StepContext eval = training_ctx();
  eval.training = false;
  const std::vector<float> before(running_mean, running_mean + 2);
  run_forward(*h.layer, h.store, x, y, eval);
  EXPECT_EQ(running_mean[0], before[0]);
  StepContext later_rows = training_ctx();
  later_rows.first_sample = 48;
  Tensor unused(x.shape());
  run_forward(*h.layer, h.store, x, unused, later_rows);
  EXPECT_EQ(running_mean[0], before[0]);
  EXPECT_EQ(running_mean[1], before[1]);
  for (int64_t i = 0; i < y.numel(); ++i) {
    const int64_t ch = (i / 16) % 2;
    const double want = h.store.param(0)[ch] * (x.data()[i] - running_mean[ch]) / std::sqrt(running_var[ch] + 1e-5) +
                        h.store.param(1)[ch];
    ASSERT_NEAR(y.data()[i], want, 1e-4) << i;
  }
}

TEST(ResidualLayer, IdentityShortcutGradientsFlowThroughBothPaths) {
  std::vector<std::unique_ptr<Layer>> branch;
  branch.push_back(mgt::make_conv2d("b.conv1", 3, 3, 3, 1, 1));
  branch.push_back(mgt::make_batch_norm2d("b.bn1", 3));
  branch.push_back(mgt::make_relu("b.relu"));
  branch.push_back(mgt::make_conv2d("b.conv2", 3, 3, 3, 1, 1));
  Harness h(mgt::make_residual("b", std::move(branch)));
  Tensor x = random_tensor({2, 3, 6, 6}, 33);
  EXPECT_EQ(h.layer->output_shape(x.shape()), x.shape());
  EXPECT_EQ(h.layer->param_handles().size(), 6u);  // conv2, bn1 and conv1: weights and biases
  check_gradients(h, x, training_ctx());
}

TEST(ResidualLayer, ProjectionShortcutGradientsFlowThroughBothPaths) {
  std::vector<std::unique_ptr<Layer>> branch, shortcut;
  branch.push_back(mgt::make_conv2d("b.conv1", 3, 4, 3, 2, 1));
  branch.push_back(mgt::make_batch_norm2d("b.bn1", 4));
  shortcut.push_back(mgt::make_conv2d("b.shortcut.0", 3, 4, 1, 2, 0));
  shortcut.push_back(mgt::make_batch_norm2d("b.shortcut.1", 4));
  Harness h(mgt::make_residual("b", std::move(branch), std::move(shortcut)));
  Tensor x = random_tensor({2, 3, 6, 6}, 34);
  EXPECT_EQ(h.layer->output_shape(x.shape()), (Shape{2, 4, 3, 3}));
  check_gradients(h, x, training_ctx());
}

TEST(ResidualLayer, BranchEndingInReluKeepsItsOutputAndTheBlocksGradient) {
  // The ReLU runs in place over the batch norm's output, and its backward reads that output: the
  // branch's output cannot be the block's, and the ReLU's input gradient cannot be written over
  // the block's output gradient, which the identity shortcut passes on too.
  std::vector<std::unique_ptr<Layer>> branch;
  branch.push_back(mgt::make_conv2d("b.conv1", 3, 3, 3, 1, 1));
  branch.push_back(mgt::make_batch_norm2d("b.bn1", 3));
  branch.push_back(mgt::make_relu("b.relu"));
  Harness h(mgt::make_residual("b", std::move(branch)));
  Tensor x = random_tensor({2, 3, 6, 6}, 35);
  check_gradients(h, x, training_ctx());
}

// Plans in host memory (make_host_layer_planner) and counts the bytes.
class CountingPlanner final : public mgt::LayerPlanner {
 public:
  mgt::Ops& ops() override { return host_->ops(); }
  void* allocate(size_t bytes) override {
    total += bytes;
    return host_->allocate(bytes);
  }
  const void* upload(const void* host, size_t bytes) override {
    total += bytes;
    return host_->upload(host, bytes);
  }
  size_t total = 0;

 private:
  std::unique_ptr<mgt::LayerPlanner> host_ = mgt::make_host_layer_planner();
};

std::vector<std::unique_ptr<Layer>> basic_branch(const std::string& name, int64_t in, int64_t out, int64_t stride) {
  std::vector<std::unique_ptr<Layer>> branch;
  branch.push_back(mgt::make_conv2d(name + ".conv1", in, out, 3, stride, 1));
  branch.push_back(mgt::make_batch_norm2d(name + ".bn1", out));
  branch.push_back(mgt::make_relu(name + ".relu1"));
  branch.push_back(mgt::make_conv2d(name + ".conv2", out, out, 3, 1, 1));
  branch.push_back(mgt::make_batch_norm2d(name + ".bn2", out));
  return branch;
}

// What layers allocate for themselves when planned one after another from `input` (batch norm's
// per-channel vectors), apart from any block's activations and gradients.
size_t own_bytes(const std::vector<std::unique_ptr<Layer>>& layers, Shape input) {
  size_t total = 0;
  for (const auto& layer : layers) {
    CountingPlanner planner;
    layer->plan(planner, input);
    total += planner.total;
    input = layer->output_shape(input);
  }
  return total;
}

std::vector<std::unique_ptr<Layer>> projection(const std::string& name, int64_t in, int64_t out) {
  std::vector<std::unique_ptr<Layer>> shortcut;
  shortcut.push_back(mgt::make_conv2d(name + ".shortcut.0", in, out, 1, 2, 0));
  shortcut.push_back(mgt::make_batch_norm2d(name + ".shortcut.1", out));
  return shortcut;
}

TEST(ResidualLayer, BasicBlockKeepsOnlyWhatBackwardReads) {
  // ResNet's block: backward reads conv1's output (bn1's input), relu1's output (over bn1's, in
  // place) and conv2's output (bn2's input); bn2 writes the block's output itself. The gradients
  // between the layers take turns in two buffers: 5 tensors of the block's shape in all, besides
  // what the layers keep for themselves, where a buffer for every output and gradient would be 11.
  const int64_t batch = 2, channels = 16, side = 8;
  const Shape input = {batch, channels, side, side};
  const size_t tensor = batch * channels * side * side * sizeof(float);
  CountingPlanner planner;
  auto block = mgt::make_residual("b", basic_branch("b", channels, channels, 1));
  block->plan(planner, input);
  EXPECT_EQ(planner.total, 5 * tensor + own_bytes(basic_branch("c", channels, channels, 1), input));

  // With a projection shortcut (stride 2, twice the channels): the same 5 of the output's shape,
  // the shortcut's convolution and batch norm outputs, and its input gradient, of the input's.
  CountingPlanner projecting;
  auto down =
      mgt::make_residual("b", basic_branch("b", channels, 2 * channels, 2), projection("b", channels, 2 * channels));
  down->plan(projecting, input);
  const size_t output = tensor / 2;
  EXPECT_EQ(projecting.total, 7 * output + tensor + own_bytes(basic_branch("c", channels, 2 * channels, 2), input) +
                                  own_bytes(projection("c", channels, 2 * channels), input));
}

TEST(ResidualLayer, RefusesPathsThatDisagreeNamingBothShapes) {
  std::vector<std::unique_ptr<Layer>> branch;
  branch.push_back(mgt::make_conv2d("b.conv1", 3, 4, 3, 1, 1));
  const auto block = mgt::make_residual("block", std::move(branch));
  try {
    block->output_shape({2, 3, 6, 6});
    FAIL() << "expected ConfigError";
  } catch (const mgt::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("residual block 'block'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("[2, 4, 6, 6]"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("[2, 3, 6, 6]"), std::string::npos) << e.what();
  }
}

TEST(ReluLayer, GradientsMatchFiniteDifferences) {
  Harness h(mgt::make_relu("relu"));
  Tensor x = well_separated_tensor({3, 4, 5}, 11);
  check_gradients(h, x, training_ctx());
  Tensor y(x.shape());
  run_forward(*h.layer, h.store, x, y, training_ctx());
  for (int64_t i = 0; i < x.numel(); ++i) ASSERT_EQ(y.data()[i], std::max(0.0f, x.data()[i]));
}

TEST(LayerFlatten, GradientsMatchFiniteDifferences) {
  Harness h(mgt::make_flatten("flat"));
  Tensor x = random_tensor({3, 2, 2, 3}, 12);
  EXPECT_EQ(h.layer->output_shape(x.shape()), (Shape{3, 12}));
  check_gradients(h, x, training_ctx());
}

// ---------------------------------------------------------------------------------------------

TEST(DropoutLayer, GradientsMatchFiniteDifferencesInTraining) {
  Harness h(mgt::make_dropout("drop", 0.4f));
  Tensor x = random_tensor({4, 10}, 13);
  check_gradients(h, x, training_ctx());
}

TEST(DropoutLayer, InvertedScalingAndRate) {
  auto layer = mgt::make_dropout("drop", 0.25f);
  const Tensor x = random_tensor({64, 100}, 14);
  Tensor y(x.shape());
  run_forward(*layer, no_params(), x, y, training_ctx());
  int64_t dropped = 0;
  for (int64_t i = 0; i < x.numel(); ++i) {
    if (y.data()[i] == 0.0f) {
      ++dropped;
    } else {
      ASSERT_FLOAT_EQ(y.data()[i], x.data()[i] / 0.75f);
    }
  }
  const double rate = double(dropped) / double(x.numel());
  EXPECT_NEAR(rate, 0.25, 0.03);
}

TEST(DropoutLayer, IdentityWhenNotTraining) {
  auto layer = mgt::make_dropout("drop", 0.5f);
  const Tensor x = random_tensor({8, 16}, 15);
  Tensor y(x.shape()), dx(x.shape());
  StepContext ctx = training_ctx();
  ctx.training = false;
  run_forward(*layer, no_params(), x, y, ctx);
  for (int64_t i = 0; i < x.numel(); ++i) ASSERT_EQ(y.data()[i], x.data()[i]);
  run_backward(*layer, no_params(), x, y, x, &dx, ctx);
  for (int64_t i = 0; i < x.numel(); ++i) ASSERT_EQ(dx.data()[i], x.data()[i]);
}

TEST(DropoutLayer, MaskIndependentOfBatchSplit) {
  auto layer = mgt::make_dropout("drop", 0.5f);
  const Tensor x = random_tensor({8, 3, 5}, 16);
  StepContext ctx = training_ctx();
  ctx.micro_step = 1;
  ctx.first_sample = 0;
  Tensor whole(x.shape());
  run_forward(*layer, no_params(), x, whole, ctx);

  const int64_t half = 4 * 15;
  for (int64_t part = 0; part < 2; ++part) {
    Tensor xin({4, 3, 5}), y({4, 3, 5});
    std::copy(x.data() + part * half, x.data() + (part + 1) * half, xin.data());
    ctx.first_sample = part * 4;
    // A different layer object, as on another rank.
    auto other = mgt::make_dropout("drop", 0.5f);
    run_forward(*other, no_params(), xin, y, ctx);
    for (int64_t i = 0; i < half; ++i)
      ASSERT_EQ(y.data()[i], whole.data()[part * half + i]) << "part " << part << " element " << i;
  }

  // It changes with the step, the rows and the layer name, not with the micro-batch index.
  ctx.first_sample = 0;  // as for `whole`
  auto differs = [&](StepContext c, const std::string& name) {
    auto l = mgt::make_dropout(name, 0.5f);
    Tensor y(x.shape());
    run_forward(*l, no_params(), x, y, c);
    return !std::equal(y.data(), y.data() + y.numel(), whole.data());
  };
  StepContext next_step = ctx;
  next_step.step += 1;
  StepContext next_micro = ctx;  // the micro-batch index is not part of a row's identity
  next_micro.micro_step += 1;
  StepContext later_rows = ctx;
  later_rows.first_sample += 8;
  EXPECT_TRUE(differs(next_step, "drop"));
  EXPECT_FALSE(differs(next_micro, "drop"));
  EXPECT_TRUE(differs(later_rows, "drop"));
  EXPECT_TRUE(differs(ctx, "drop2"));
  EXPECT_FALSE(differs(ctx, "drop"));
}

TEST(DropoutLayer, RejectsBadProbability) {
  EXPECT_THROW(mgt::make_dropout("d", 1.0f), mgt::ConfigError);
  EXPECT_THROW(mgt::make_dropout("d", -0.1f), mgt::ConfigError);
}

// ---------------------------------------------------------------------------------------------

TEST(SoftmaxCrossEntropy, GradientMatchesFiniteDifferences) {
  Tensor logits = random_tensor({5, 7}, 17);
  for (int64_t i = 0; i < logits.numel(); ++i) logits.data()[i] *= 3.0f;
  const std::vector<int32_t> labels = {0, 6, 3, 3, 1};
  const float scale = 0.2f;
  Tensor grad({5, 7});
  mgt::softmax_cross_entropy(logits, labels.data(), grad, scale);
  Tensor scratch({5, 7});
  constexpr float eps = 1e-3f;
  for (int64_t i = 0; i < logits.numel(); ++i) {
    const float saved = logits.data()[i];
    logits.data()[i] = saved + eps;
    const double up = mgt::softmax_cross_entropy(logits, labels.data(), scratch, scale) * scale;
    logits.data()[i] = saved - eps;
    const double down = mgt::softmax_cross_entropy(logits, labels.data(), scratch, scale) * scale;
    logits.data()[i] = saved;
    expect_close(grad.data()[i], (up - down) / (2.0 * eps), "logit " + std::to_string(i));
  }
}

TEST(SoftmaxCrossEntropy, ReturnsSumAndIsStableForHugeLogits) {
  Tensor logits({2, 3});
  const float v[] = {1000.0f, 0.0f, -1000.0f, 5.0f, 5.0f, 5.0f};
  std::copy(v, v + 6, logits.data());
  const std::vector<int32_t> labels = {0, 2};
  Tensor grad;  // sized by the call
  const double loss = mgt::softmax_cross_entropy(logits, labels.data(), grad, 1.0f);
  EXPECT_TRUE(std::isfinite(loss));
  EXPECT_NEAR(loss, 0.0 + std::log(3.0), 1e-5);
  ASSERT_EQ(grad.shape(), logits.shape());
  for (int64_t i = 0; i < 6; ++i) EXPECT_TRUE(std::isfinite(grad.data()[i]));
  EXPECT_NEAR(grad.data()[0], 0.0f, 1e-6f);
  EXPECT_NEAR(grad.data()[5], 1.0f / 3.0f - 1.0f, 1e-6f);
}

TEST(SoftmaxCrossEntropy, LabelOutOfRangeNamesRowLabelAndClasses) {
  const Tensor logits = random_tensor({3, 4}, 18);
  Tensor grad({3, 4});
  const std::vector<int32_t> labels = {1, 2, 9};
  try {
    mgt::softmax_cross_entropy(logits, labels.data(), grad, 1.0f);
    FAIL() << "expected DataError";
  } catch (const mgt::DataError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("row 2"), std::string::npos) << msg;
    EXPECT_NE(msg.find("label 9"), std::string::npos) << msg;
    EXPECT_NE(msg.find("4"), std::string::npos) << msg;
  }
  const std::vector<int32_t> negative = {-2, 0, 0};
  EXPECT_THROW(mgt::softmax_cross_entropy(logits, negative.data(), grad, 1.0f), mgt::DataError);
  // -1 is no label: the row gives no loss and a zero gradient.
  const std::vector<int32_t> ignored = {-1, 0, 0}, rest = {0, 0};
  const double loss = mgt::softmax_cross_entropy(logits, ignored.data(), grad, 1.0f);
  for (int64_t c = 0; c < 4; ++c) EXPECT_EQ(grad.data()[c], 0.0f);
  const Tensor last_two = Tensor::view(const_cast<float*>(logits.data()) + 4, {2, 4});
  Tensor grad_two({2, 4});
  EXPECT_EQ(loss, mgt::softmax_cross_entropy(last_two, rest.data(), grad_two, 1.0f));
}

TEST(SoftmaxCrossEntropy, CountCorrectUsesArgMax) {
  Tensor logits({3, 3});
  const float v[] = {0.1f, 0.9f, 0.0f, 2.0f, -1.0f, 1.0f, 0.0f, 0.0f, 3.0f};
  std::copy(v, v + 9, logits.data());
  const std::vector<int32_t> labels = {1, 2, 2};
  EXPECT_EQ(mgt::count_correct(logits, labels.data()), 2);
}

// ---------------------------------------------------------------------------------------------

struct Manual {
  ParameterStore store;
  std::vector<std::unique_ptr<Layer>> layers;
};

void expect_same(const Tensor& a, const Tensor& b, const char* what, bool bitwise = false) {
  ASSERT_EQ(a.numel(), b.numel()) << what;
  for (int64_t i = 0; i < a.numel(); ++i) {
    if (bitwise) ASSERT_EQ(std::memcmp(a.data() + i, b.data() + i, sizeof(float)), 0) << what << " element " << i;
    ASSERT_NEAR(a.data()[i], b.data()[i], 1e-6f * (1.0f + std::abs(b.data()[i]))) << what << " element " << i;
  }
}

// Runs the model and the same layers by hand (own store, same seed so the same parameters) and
// compares logits and gradients (bitwise: bit for bit); returns the handle lists `ready` was called with.
void compare_with_manual(const std::function<std::vector<std::unique_ptr<Layer>>()>& build, const Shape& input_shape,
                         std::vector<std::vector<mgt::ParamHandle>>& ready_calls, bool bitwise = false) {
  mgt::SequentialModel model;
  for (auto& l : build()) model.add(std::move(l));
  ParameterStore store;
  model.declare(store);
  store.finalize();
  store.initialize(5);

  Manual m;
  m.layers = build();
  for (auto& l : m.layers) l->declare(m.store);
  m.store.finalize();
  m.store.initialize(5);

  StepContext ctx = training_ctx();
  for (int step = 0; step < 2; ++step) {  // the second step reuses the sized activations
    ctx.step = step;
    const Tensor x = random_tensor(input_shape, 100 + step);
    const Tensor& logits = model.forward(x, ctx);
    EXPECT_EQ(logits.shape(), model.output_shape(input_shape));
    const Tensor dlogits = random_tensor(logits.shape(), 200 + step);
    store.zero_grads();
    ready_calls.clear();
    model.backward(dlogits, ctx, [&](const std::vector<mgt::ParamHandle>& h) { ready_calls.push_back(h); });

    std::vector<Tensor> acts;
    acts.reserve(m.layers.size());  // `in` points into acts: no reallocation while it does
    const Tensor* in = &x;
    for (auto& l : m.layers) {
      acts.emplace_back(l->output_shape(in->shape()));
      run_forward(*l, m.store, *in, acts.back(), ctx);
      in = &acts.back();
    }
    expect_same(logits, acts.back(), "logits", bitwise);
    m.store.zero_grads();
    Tensor dy({1});
    dy.resize(dlogits.shape());
    std::copy(dlogits.data(), dlogits.data() + dlogits.numel(), dy.data());
    for (size_t i = m.layers.size(); i-- > 0;) {
      const Tensor& lin = i == 0 ? x : acts[i - 1];
      Tensor dx(lin.shape());
      run_backward(*m.layers[i], m.store, lin, acts[i], dy, i == 0 ? nullptr : &dx, ctx);
      dy = std::move(dx);
    }
    EXPECT_EQ(store.flat_size(), m.store.flat_size());
    for (size_t i = 0; i < store.flat_size(); ++i) {
      if (bitwise) ASSERT_EQ(store.grads_data()[i], m.store.grads_data()[i]) << "gradient element " << i;
      ASSERT_NEAR(store.grads_data()[i], m.store.grads_data()[i], 1e-5f * (1.0f + std::abs(m.store.grads_data()[i])))
          << "gradient element " << i;
    }
  }
}

TEST(SequentialModel, TinyMlpMatchesLayersComposedByHand) {
  auto build = [] {
    std::vector<std::unique_ptr<Layer>> v;
    v.push_back(mgt::make_flatten("flat"));
    v.push_back(mgt::make_linear("fc1", 4, 6));
    v.push_back(mgt::make_relu("relu1"));
    v.push_back(mgt::make_dropout("drop", 0.3f));
    v.push_back(mgt::make_linear("fc2", 6, 3));
    return v;
  };
  std::vector<std::vector<mgt::ParamHandle>> ready;
  compare_with_manual(build, {5, 2, 2}, ready);
  // fc2's gradients are final first, then fc1's: handles 2, 3 then 0, 1.
  ASSERT_EQ(ready.size(), 2u);
  EXPECT_EQ(ready[0], (std::vector<mgt::ParamHandle>{2, 3}));
  EXPECT_EQ(ready[1], (std::vector<mgt::ParamHandle>{0, 1}));
}

TEST(SequentialModel, SmallCnnWithFlattenMatchesLayersComposedByHand) {
  auto build = [] {
    std::vector<std::unique_ptr<Layer>> v;
    v.push_back(mgt::make_conv2d("conv1", 1, 4, 3, 1, 1));
    v.push_back(mgt::make_relu("relu1"));
    v.push_back(mgt::make_max_pool2d("pool1", 2, 2));
    v.push_back(mgt::make_flatten("flat"));
    v.push_back(mgt::make_linear("fc1", 4 * 3 * 3, 5));
    return v;
  };
  std::vector<std::vector<mgt::ParamHandle>> ready;
  compare_with_manual(build, {3, 1, 6, 6}, ready);
  ASSERT_EQ(ready.size(), 2u);
  EXPECT_EQ(ready[0], (std::vector<mgt::ParamHandle>{2, 3}));
  EXPECT_EQ(ready[1], (std::vector<mgt::ParamHandle>{0, 1}));
}

TEST(SequentialModel, SmallResNetMatchesLayersComposedByHand) {
  // Residual blocks in the executor, whose gradients between layers take turns in two buffers:
  // identity and projection shortcuts, a branch that ends in a ReLU, ReLUs in place after blocks.
  auto build = [] {
    std::vector<std::unique_ptr<Layer>> v;
    v.push_back(mgt::make_conv2d("conv1", 1, 4, 3, 1, 1));
    v.push_back(mgt::make_batch_norm2d("bn1", 4));
    v.push_back(mgt::make_relu("relu1"));
    v.push_back(mgt::make_residual("l1", basic_branch("l1", 4, 4, 1)));
    v.push_back(mgt::make_relu("l1.relu"));
    v.push_back(mgt::make_residual("l2", basic_branch("l2", 4, 8, 2), projection("l2", 4, 8)));
    v.push_back(mgt::make_relu("l2.relu"));
    std::vector<std::unique_ptr<Layer>> ends_in_relu;
    ends_in_relu.push_back(mgt::make_conv2d("l3.conv1", 8, 8, 3, 1, 1));
    ends_in_relu.push_back(mgt::make_relu("l3.relu1"));
    v.push_back(mgt::make_residual("l3", std::move(ends_in_relu)));
    v.push_back(mgt::make_global_avg_pool2d("avgpool"));
    v.push_back(mgt::make_linear("fc", 8, 3));
    return v;
  };
  std::vector<std::vector<mgt::ParamHandle>> ready;
  compare_with_manual(build, {3, 1, 8, 8}, ready);
  EXPECT_EQ(ready.size(), 6u);  // conv1, bn1, the three blocks, fc
}

// Channel-blocked activations: the executor keeps a ResNet's and a CNN's activations in the CPU's
// channel block between the layers that take it and gives the same logits and gradients as the
// NCHW layers composed by hand (only batch norm's sums and the average pooling add in another
// order). The activation_blocks rule first: which tensors it blocks.
std::vector<std::unique_ptr<Layer>> blocked_resnet() {
  std::vector<std::unique_ptr<Layer>> v;
  v.push_back(mgt::make_conv2d("conv1", 3, 16, 3, 1, 1));
  v.push_back(mgt::make_batch_norm2d("bn1", 16));
  v.push_back(mgt::make_relu("relu1"));
  v.push_back(mgt::make_max_pool2d("pool1", 2, 2));
  v.push_back(mgt::make_residual("l1", basic_branch("l1", 16, 16, 1)));
  v.push_back(mgt::make_relu("l1.relu"));
  v.push_back(mgt::make_residual("l2", basic_branch("l2", 16, 32, 2), projection("l2", 16, 32)));
  v.push_back(mgt::make_relu("l2.relu"));
  v.push_back(mgt::make_global_avg_pool2d("avgpool"));
  v.push_back(mgt::make_linear("fc", 32, 3));
  return v;
}

TEST(ActivationBlocks, BlockedBetweenLayersThatTakeThemNchwAtTheEnds) {
  std::vector<std::unique_ptr<Layer>> owned = blocked_resnet();
  // A dropout (its mask indexes elements: NCHW only) and a convolution after the pooling.
  owned.insert(owned.begin() + 4, mgt::make_conv2d("conv2", 16, 16, 3, 1, 1));
  owned.insert(owned.begin() + 4, mgt::make_dropout("drop", 0.1f));
  std::vector<Layer*> layers;
  std::vector<Shape> shapes;
  const Shape input{2, 3, 8, 8};
  Shape s = input;
  for (auto& l : owned) {
    layers.push_back(l.get());
    shapes.push_back(s = l->output_shape(s));
  }
  // conv1's output is blocked through bn1 and relu1, pool1 writes NCHW for the dropout; from
  // conv2's output the blocks and their ReLUs are blocked up to the pooling, whose [B, C] is NCHW.
  const auto blocks = mgt::activation_blocks::choose(layers, mgt::host_ops(), input, shapes, 16, 1, 1);
  ASSERT_TRUE(blocks.has_value());
  EXPECT_EQ(*blocks, (std::vector<int64_t>{16, 16, 16, 1, 1, 16, 16, 16, 16, 16, 1, 1}));
  for (int k = 0; k < 2; ++k) {
    owned.erase(owned.begin() + 4);
    layers.erase(layers.begin() + 4);
    shapes.erase(shapes.begin() + 4);
  }
  EXPECT_EQ(*mgt::activation_blocks::choose(layers, mgt::host_ops(), input, shapes, 16, 1, 1),
            (std::vector<int64_t>{16, 16, 16, 16, 16, 16, 16, 16, 1, 1}));
  // Block 1 (a GPU, or MGTRAIN_CPU_BLOCKED_ACTIVATIONS=0): all NCHW. A block that does not divide
  // conv1's 16 channels: those stay NCHW, the 32 of the second stage too since its input cannot.
  EXPECT_EQ(*mgt::activation_blocks::choose(layers, mgt::host_ops(), input, shapes, 1, 1, 1),
            std::vector<int64_t>(10, 1));
  EXPECT_EQ(*mgt::activation_blocks::choose(layers, mgt::host_ops(), input, shapes, 32, 1, 1),
            std::vector<int64_t>(10, 1));
  // A residual block whose branch ends in a layer that takes NCHW only cannot keep its input's
  // block; one that must (both ends fixed blocked) is refused.
  std::vector<std::unique_ptr<Layer>> branch;
  branch.push_back(mgt::make_conv2d("r.conv1", 16, 16, 3, 1, 1));
  branch.push_back(mgt::make_dropout("r.drop", 0.1f));
  auto residual = mgt::make_residual("r", std::move(branch));
  EXPECT_EQ(mgt::layer_hints::of(*residual, mgt::host_ops(), {2, 16, 4, 4}, 1, 16).blocked_activations,
            mgt::BlockedActivations::none);
  EXPECT_EQ(mgt::layer_hints::of(*owned[4], mgt::host_ops(), {2, 16, 4, 4}, 1, 16).blocked_activations,
            mgt::BlockedActivations::same);
  EXPECT_FALSE(
      mgt::activation_blocks::choose({residual.get()}, mgt::host_ops(), {2, 16, 4, 4}, {{2, 16, 4, 4}}, 16, 16, 16));
}

// A layer's hints are one value the core fills with the defaults: a layer sets the fields where it
// differs and the others keep them (a layer built against an older, shorter LayerHints writes a
// prefix only). MGT_HAS_FIELD tells a field of the struct the core passed from one it lacks.
TEST(LayerHints, DefaultsStayWhereALayerSetsNothingAndSizeTellsTheFields) {
  auto plain = mgt::make_conv2d("c", 3, 4, 3);
  const mgt::LayerHints conv = mgt::layer_hints::of(*plain, mgt::host_ops(), {2, 3, 8, 8}, 1, 16);
  EXPECT_FALSE(conv.backward_reads_output);
  EXPECT_EQ(conv.blocked_activations, mgt::BlockedActivations::independent);
  EXPECT_FALSE(conv.aliases_input);
  EXPECT_FALSE(conv.runs_in_place);
  EXPECT_FALSE(conv.row_wise);
  EXPECT_EQ(conv.size, sizeof(mgt::LayerHints));
  const mgt::LayerHints flatten = mgt::layer_hints::of(*mgt::make_flatten("f"), mgt::host_ops());
  EXPECT_TRUE(flatten.aliases_input);
  EXPECT_TRUE(flatten.backward_reads_output);  // the default, untouched
  mgt::LayerHints older;
  older.size = static_cast<uint32_t>(offsetof(mgt::LayerHints, fuses_relu));
  EXPECT_TRUE(MGT_HAS_FIELD(older, planned_memory_is_scratch));
  EXPECT_FALSE(MGT_HAS_FIELD(older, fuses_relu));
  EXPECT_FALSE(MGT_HAS_FIELD(older, blocked_activations));
}

// Batch norm and a residual block run the ReLU after them (LayerHints::fuses_relu) where the ReLU would
// run in place: in the executor and in a residual branch, but not the branch's last ReLU. Five
// channels stay NCHW in any channel block, so only the fusion differs from the layers by hand:
// the same bits.
TEST(SequentialModel, BatchNormAndResidualRunTheReluAfterThemWithTheSameBits) {
  if (!mgt::host_ops().channel_ops_fuse_relu()) GTEST_SKIP() << "the host's operations fuse no ReLU";
  auto build = [] {
    std::vector<std::unique_ptr<Layer>> v;
    v.push_back(mgt::make_conv2d("conv1", 3, 5, 3, 1, 1));
    v.push_back(mgt::make_batch_norm2d("bn1", 5));
    v.push_back(mgt::make_relu("relu1"));
    v.push_back(mgt::make_residual("l1", basic_branch("l1", 5, 5, 1)));
    v.push_back(mgt::make_relu("l1.relu"));
    std::vector<std::unique_ptr<Layer>> ends_in_relu;
    ends_in_relu.push_back(mgt::make_conv2d("l2.conv1", 5, 5, 3, 1, 1));
    ends_in_relu.push_back(mgt::make_batch_norm2d("l2.bn1", 5));
    ends_in_relu.push_back(mgt::make_relu("l2.relu1"));
    v.push_back(mgt::make_residual("l2", std::move(ends_in_relu)));
    v.push_back(mgt::make_batch_norm2d("bn2", 5));
    v.push_back(mgt::make_relu("relu2"));
    v.push_back(mgt::make_flatten("flat"));
    v.push_back(mgt::make_linear("fc", 5 * 6 * 6, 3));
    return v;
  };
  std::vector<std::vector<mgt::ParamHandle>> ready;
  compare_with_manual(build, {4, 3, 6, 6}, ready, /*bitwise=*/true);
  EXPECT_EQ(ready.size(), 6u);  // conv1, bn1, the two blocks, bn2, fc
}

TEST(SequentialModel, ChannelBlockedResNetMatchesNchwLayersComposedByHand) {
  if (mgt::host_ops().channel_block() <= 1) GTEST_SKIP() << "this CPU's convolutions take NCHW activations";
  std::vector<std::vector<mgt::ParamHandle>> ready;
  compare_with_manual(blocked_resnet, {3, 3, 8, 8}, ready);
  EXPECT_EQ(ready.size(), 5u);  // conv1, bn1, the two blocks, fc
}

// The CNN example's shape: the second pooling reads a blocked input and writes NCHW for Flatten.
TEST(SequentialModel, ChannelBlockedCnnMatchesNchwLayersComposedByHand) {
  if (mgt::host_ops().channel_block() <= 1) GTEST_SKIP() << "this CPU's convolutions take NCHW activations";
  auto build = [] {
    std::vector<std::unique_ptr<Layer>> v;
    v.push_back(mgt::make_conv2d("conv1", 1, 16, 3, 1, 1));
    v.push_back(mgt::make_relu("relu1"));
    v.push_back(mgt::make_max_pool2d("pool1", 2, 2));
    v.push_back(mgt::make_conv2d("conv2", 16, 32, 3, 1, 1));
    v.push_back(mgt::make_relu("relu2"));
    v.push_back(mgt::make_max_pool2d("pool2", 2, 2));
    v.push_back(mgt::make_flatten("flat"));
    v.push_back(mgt::make_linear("fc", 32 * 2 * 2, 3));
    return v;
  };
  std::vector<std::vector<mgt::ParamHandle>> ready;
  compare_with_manual(build, {3, 1, 8, 8}, ready);
  EXPECT_EQ(ready.size(), 3u);
}

TEST(SequentialModel, HandlesBatchSizeChange) {
  mgt::SequentialModel model;
  model.add(mgt::make_linear("fc1", 3, 4));
  model.add(mgt::make_relu("r"));
  model.add(mgt::make_linear("fc2", 4, 2));
  ParameterStore store;
  model.declare(store);
  store.finalize();
  store.initialize(1);
  for (int64_t batch : {8, 3, 8}) {
    const Tensor x = random_tensor({batch, 3}, 50);
    const Tensor& y = model.forward(x, training_ctx());
    EXPECT_EQ(y.shape(), (Shape{batch, 2}));
    const Tensor dy = random_tensor({batch, 2}, 51);
    model.backward(dy, training_ctx(), {});
  }
}

// What linear layers hand deterministic mode's reducer (mgt::WeightGradientSink): per weight,
// the rows of dy and x in the order they came, from which the reducer forms dW and db.
class RecordingSink final : public mgt::WeightGradientSink {
 public:
  struct Factors {
    std::vector<float> dy, x;
  };
  void add_linear(mgt::ParamHandle weight, mgt::ParamHandle, const float* dy, const float* x, int64_t rows, int64_t out,
                  int64_t in, int64_t) override {
    Factors& f = factors[weight];
    f.dy.insert(f.dy.end(), dy, dy + rows * out);
    f.x.insert(f.x.end(), x, x + rows * in);
  }
  // Only for a layer the executor runs one shard at a time, which a linear layer must not be.
  Tensor& shard_gradients(int64_t shard) override {
    ADD_FAILURE() << "the executor ran a layer shard by shard (shard " << shard << "): a linear layer, not whole";
    shard_buffers.resize(std::max<size_t>(shard_buffers.size(), static_cast<size_t>(shard) + 1));
    Tensor& buffer = shard_buffers[static_cast<size_t>(shard)];
    if (buffer.numel() != flat_size) buffer = Tensor({flat_size});
    return buffer;
  }
  int64_t flat_size = 0;
  std::map<mgt::ParamHandle, Factors> factors;
  std::vector<Tensor> shard_buffers;
};

// Deterministic mode runs a rank's micro-shards through the model in one pass and promises each
// row the bits of a pass of one shard (what a GPU's step and a rank of a larger world run), on
// every CPU: whether oneDNN's sgemm gives a row the same bits in a call of 8 x 16 rows as in one
// of 16 depends on its kernels (with AVX2 kernels it does not, for these sizes; ctest runs this
// again under DNNL_MAX_CPU_ISA=AVX2). The logits and every factor of the weight gradients (dy,
// from the layer above's input gradient, and x) must match bit for bit.
TEST(SequentialModel, MicroShardsInOnePassGiveEachRowTheBitsOfOneShardPasses) {
  const int64_t shards = 8, rows = 16, in = 16, classes = 10;
  struct Run {
    mgt::SequentialModel model;
    ParameterStore store;
    RecordingSink sink;
    Run() {
      model.add(mgt::make_linear("fc1", in, 32));
      model.add(mgt::make_relu("relu1"));
      model.add(mgt::make_linear("fc2", 32, 32));
      model.add(mgt::make_relu("relu2"));
      model.add(mgt::make_linear("fc3", 32, classes));
      model.declare(store);
      store.finalize();
      store.initialize(5);
      sink.flat_size = static_cast<int64_t>(store.flat_size());
      store.set_weight_gradient_sink(&sink);
    }
  };
  const Tensor x = random_tensor({shards * rows, in}, 60);
  const Tensor dlogits = random_tensor({shards * rows, classes}, 61);
  StepContext ctx = training_ctx();
  ctx.overwrite_grads = true;

  Run batched;
  ctx.shards = shards;
  const Tensor& logits = batched.model.forward(x, ctx);
  const std::vector<float> batched_logits(logits.data(), logits.data() + logits.numel());
  batched.model.backward(dlogits, ctx, {});

  Run one_by_one;
  ctx.shards = 1;
  std::vector<float> shard_logits;
  for (int64_t s = 0; s < shards; ++s) {
    const Tensor xs = Tensor::view(const_cast<float*>(x.data()) + s * rows * in, {rows, in});
    const Tensor dys = Tensor::view(const_cast<float*>(dlogits.data()) + s * rows * classes, {rows, classes});
    ctx.first_sample = s * rows;
    const Tensor& y = one_by_one.model.forward(xs, ctx);
    shard_logits.insert(shard_logits.end(), y.data(), y.data() + y.numel());
    one_by_one.model.backward(dys, ctx, {});
  }

  ASSERT_EQ(batched_logits.size(), shard_logits.size());
  EXPECT_EQ(std::memcmp(batched_logits.data(), shard_logits.data(), batched_logits.size() * sizeof(float)), 0)
      << "the logits of a pass of " << shards << " shards differ from those of passes of one";
  ASSERT_EQ(batched.sink.factors.size(), 3u) << "a linear layer's gradient did not reach the sink";
  for (const auto& [weight, f] : one_by_one.sink.factors) {
    const auto& b = batched.sink.factors.at(weight);
    const std::string name = one_by_one.store.info(weight).name;
    ASSERT_EQ(b.dy.size(), f.dy.size()) << name;
    ASSERT_EQ(b.x.size(), f.x.size()) << name;
    EXPECT_EQ(std::memcmp(b.dy.data(), f.dy.data(), f.dy.size() * sizeof(float)), 0) << name << ": dy";
    EXPECT_EQ(std::memcmp(b.x.data(), f.x.data(), f.x.size() * sizeof(float)), 0) << name << ": x";
  }
}

// ---------------------------------------------------------------------------------------------
// Sequence layers (a transformer's): [B, T, features] activations.

// Token ids [B, T] in [0, vocab), as floats (what the token reader gives).
Tensor random_ids(const Shape& shape, int64_t vocab, unsigned seed) {
  Tensor t(shape);
  std::mt19937 gen(seed);
  for (int64_t i = 0; i < t.numel(); ++i) t.data()[i] = static_cast<float>(gen() % vocab);
  return t;
}

TEST(TokenEmbeddingLayer, AddsTheTokensRowAndThePositionsRowWithTheirGradients) {
  Harness h(mgt::make_token_embedding("wte", 7, 5, 4));
  Tensor ids = random_ids({3, 5}, 7, 8);
  EXPECT_EQ(h.layer->output_shape(ids.shape()), (Shape{3, 5, 4}));
  EXPECT_THROW(h.layer->output_shape({3, 6}), mgt::ConfigError);  // more tokens than positions
  Tensor y({3, 5, 4});
  run_forward(*h.layer, h.store, ids, y, training_ctx());
  const auto handles = h.layer->param_handles();
  for (int64_t r = 0; r < 15; ++r)
    for (int64_t i = 0; i < 4; ++i) {
      const auto id = static_cast<int64_t>(ids.data()[r]);
      ASSERT_FLOAT_EQ(y.data()[r * 4 + i],
                      h.store.param(handles[0])[id * 4 + i] + h.store.param(handles[1])[(r % 5) * 4 + i]);
    }
  check_gradients(h, ids, training_ctx(), /*check_input=*/false);
}

TEST(TokenEmbeddingLayer, WithoutPositionsIsTheTokensRowAloneForAnyLength) {
  Harness h(mgt::make_token_embedding("wte", 7, mgt::kNoPositions, 4));
  // The table alone: no position parameter in the store (nor in a checkpoint), none to export.
  ASSERT_EQ(h.store.params().size(), 1u);
  EXPECT_EQ(h.store.params()[0].name, "wte.weight");
  EXPECT_EQ(h.layer->param_handles().size(), 1u);
  EXPECT_EQ(h.layer->describe().params.size(), 1u);
  // No table of positions bounds the window.
  EXPECT_EQ(h.layer->output_shape({3, 50}), (Shape{3, 50, 4}));
  Tensor ids = random_ids({3, 5}, 7, 8);
  Tensor y({3, 5, 4});
  run_forward(*h.layer, h.store, ids, y, training_ctx());
  const float* table = h.store.param(h.layer->param_handles()[0]);
  for (int64_t r = 0; r < 15; ++r)
    for (int64_t i = 0; i < 4; ++i)
      ASSERT_EQ(y.data()[r * 4 + i], table[static_cast<int64_t>(ids.data()[r]) * 4 + i]) << "row " << r;
  check_gradients(h, ids, training_ctx(), /*check_input=*/false);
  EXPECT_THROW(mgt::make_token_embedding("wte", 7, -1, 4), mgt::ConfigError);
}

TEST(LayerNormLayer, NormalisesEachTokenWithItsGradients) {
  Harness h(mgt::make_layer_norm("ln", 6));
  Tensor x = random_tensor({2, 3, 6}, 9);
  for (int64_t i = 0; i < x.numel(); ++i) x.data()[i] = 3.0f * x.data()[i] + 10.0f;  // a large mean
  check_gradients(h, x, training_ctx());
  // With the scale 1 and shift 0 every row has mean 0 and variance 1 (less eps).
  Harness plain(mgt::make_layer_norm("ln", 6));
  const auto handles = plain.layer->param_handles();
  std::fill_n(plain.store.param(handles[0]), 6, 1.0f);
  std::fill_n(plain.store.param(handles[1]), 6, 0.0f);
  Tensor y({2, 3, 6});
  run_forward(*plain.layer, plain.store, x, y, training_ctx());
  for (int64_t r = 0; r < 6; ++r) {
    double mean = 0, var = 0;
    for (int64_t i = 0; i < 6; ++i) mean += y.data()[r * 6 + i] / 6.0;
    for (int64_t i = 0; i < 6; ++i) var += (y.data()[r * 6 + i] - mean) * (y.data()[r * 6 + i] - mean) / 6.0;
    EXPECT_NEAR(mean, 0.0, 1e-5);
    EXPECT_NEAR(var, 1.0, 1e-3);
  }
}

TEST(TokenLinearLayer, ActsOnEachTokenWithItsGradients) {
  Harness h(mgt::make_token_linear("fc", 5, 3));
  EXPECT_EQ(h.layer->output_shape({2, 4, 5}), (Shape{2, 4, 3}));
  EXPECT_THROW(h.layer->output_shape({2, 5, 4}), mgt::ConfigError);
  Tensor x = random_tensor({2, 4, 5}, 10);
  check_gradients(h, x, training_ctx());
}

TEST(GeluLayer, IsTheTanhFormWithItsGradient) {
  Harness h(mgt::make_gelu("gelu"));
  Tensor x = random_tensor({3, 40}, 11);
  for (int64_t i = 0; i < x.numel(); ++i) x.data()[i] *= 6.0f;  // both tails
  Tensor y({3, 40});
  run_forward(*h.layer, h.store, x, y, training_ctx());
  for (int64_t i = 0; i < x.numel(); ++i) {
    const double v = x.data()[i];
    const double want = 0.5 * v * (1.0 + std::tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)));
    ASSERT_NEAR(y.data()[i], want, 1e-6 + 1e-6 * std::abs(want)) << "at x = " << v;
  }
  check_gradients(h, x, training_ctx());
}

TEST(AttentionLayer, CausalGradientsMatchFiniteDifferences) {
  Harness h(mgt::make_attention("attn", 8, 2, /*causal=*/true));
  Tensor x = random_tensor({2, 5, 24}, 12);
  EXPECT_EQ(h.layer->output_shape(x.shape()), (Shape{2, 5, 8}));
  check_gradients(h, x, training_ctx());
}

TEST(AttentionLayer, BidirectionalGradientsMatchFiniteDifferences) {
  Harness h(mgt::make_attention("attn", 6, 3, /*causal=*/false));
  Tensor x = random_tensor({2, 4, 18}, 13);
  check_gradients(h, x, training_ctx());
}

TEST(AttentionLayer, GradientsMatchFiniteDifferencesOverSeveralTiles) {
  // 140 tokens: five blocks of queries and two of keys, the last ones partly filled.
  for (bool causal : {true, false}) {
    Harness h(mgt::make_attention("attn", 12, 2, causal));
    Tensor x = random_tensor({1, 140, 36}, 24);
    check_gradients(h, x, training_ctx());
  }
}

// An encoder's attention (no mask) against the definition written out in double precision:
// softmax(q k^T / sqrt(head dim)) v per head over every token of the window, later ones too.
TEST(AttentionLayer, BidirectionalForwardMatchesAPlainReference) {
  const int64_t B = 2, T = 7, heads = 2, dim = 8, hd = dim / heads;
  Harness h(mgt::make_attention("attn", dim, heads, /*causal=*/false));
  Tensor x = random_tensor({B, T, 3 * dim}, 31);
  Tensor y({B, T, dim});
  run_forward(*h.layer, h.store, x, y, training_ctx());
  const float* in = x.data();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t head = 0; head < heads; ++head)
      for (int64_t i = 0; i < T; ++i) {
        std::vector<double> score(T);
        double top = -1e300, sum = 0;
        for (int64_t j = 0; j < T; ++j) {
          double dot = 0;
          for (int64_t d = 0; d < hd; ++d)
            dot += static_cast<double>(in[(b * T + i) * 3 * dim + head * hd + d]) *
                   in[(b * T + j) * 3 * dim + dim + head * hd + d];
          score[j] = dot / std::sqrt(static_cast<double>(hd));
          top = std::max(top, score[j]);
        }
        for (int64_t j = 0; j < T; ++j) sum += score[j] = std::exp(score[j] - top);
        for (int64_t d = 0; d < hd; ++d) {
          double want = 0;
          for (int64_t j = 0; j < T; ++j) want += score[j] / sum * in[(b * T + j) * 3 * dim + 2 * dim + head * hd + d];
          ASSERT_NEAR(y.data()[(b * T + i) * dim + head * hd + d], want, 1e-5)
              << "batch " << b << " head " << head << " token " << i << " element " << d;
        }
      }
  // The first token sees the last: changing the last token's key moves the first token's output.
  Tensor y2({B, T, dim});
  for (int64_t d = 0; d < dim; ++d) x.data()[(T - 1) * 3 * dim + dim + d] += 1.0f;
  run_forward(*h.layer, h.store, x, y2, training_ctx());
  bool moved = false;
  for (int64_t d = 0; d < dim; ++d) moved |= y2.data()[d] != y.data()[d];
  EXPECT_TRUE(moved) << "the first token does not attend to the last";
}

TEST(AttentionLayer, CausalTokensSeeOnlyThemselvesAndTheirPast) {
  Harness h(mgt::make_attention("attn", 4, 2, /*causal=*/true));
  Tensor x = random_tensor({1, 6, 12}, 14);
  Tensor y({1, 6, 4}), y2({1, 6, 4});
  run_forward(*h.layer, h.store, x, y, training_ctx());
  // The first token attends to itself alone: its output is its own value.
  for (int64_t i = 0; i < 4; ++i) EXPECT_FLOAT_EQ(y.data()[i], x.data()[8 + i]);
  // Changing the last token changes no earlier output.
  for (int64_t i = 0; i < 12; ++i) x.data()[5 * 12 + i] += 1.0f;
  run_forward(*h.layer, h.store, x, y2, training_ctx());
  for (int64_t i = 0; i < 5 * 4; ++i) ASSERT_EQ(y.data()[i], y2.data()[i]) << "output " << i;
  EXPECT_NE(y.data()[5 * 4], y2.data()[5 * 4]);
}

TEST(AttentionLayer, RefusesHeadsThatDoNotDivideTheWidth) {
  EXPECT_THROW(mgt::make_attention("attn", 10, 4, true), mgt::ConfigError);
}

// The head tied to the embedding: its part of the table's gradient and the embedding's add up,
// whatever overwrite_grads says (the head writes first, the embedding then adds).
TEST(TiedHeadLayer, TableGradientIsTheSumOfBothUses) {
  constexpr int64_t vocab = 6, positions = 4, dim = 5;
  ParameterStore store;
  auto embedding = mgt::make_token_embedding("wte", vocab, positions, dim, /*table_shared=*/true);
  auto head = mgt::make_tied_head("head", "wte", vocab, dim);
  embedding->declare(store);
  head->declare(store);
  store.finalize();
  store.initialize(5);
  const Tensor ids = random_ids({2, positions}, vocab, 15);
  const Tensor r = random_tensor({2, positions, vocab}, 16);
  const auto loss = [&] {
    Tensor h({2, positions, dim}), logits({2, positions, vocab});
    run_forward(*embedding, store, ids, h, training_ctx());
    run_forward(*head, store, h, logits, training_ctx());
    double s = 0;
    for (int64_t i = 0; i < logits.numel(); ++i) s += double(logits.data()[i]) * r.data()[i];
    return s;
  };
  Tensor h({2, positions, dim}), logits({2, positions, vocab}), dh({2, positions, dim});
  run_forward(*embedding, store, ids, h, training_ctx());
  run_forward(*head, store, h, logits, training_ctx());
  std::fill_n(store.grads_data(), store.flat_size(), 777.0f);  // garbage, as after discard_grads
  StepContext ctx = training_ctx();
  ctx.overwrite_grads = true;
  run_backward(*head, store, h, logits, r, &dh, ctx);
  run_backward(*embedding, store, ids, h, dh, nullptr, ctx);
  EXPECT_TRUE(head->param_handles().empty());  // the embedding owns the table
  const auto table = embedding->param_handles()[0];
  constexpr float eps = 1e-3f;
  for (int64_t i : probe_indices(vocab * dim))
    expect_close(store.grad(table)[i], central_difference(store.param(table)[i], eps, loss),
                 "wte.weight gradient at " + std::to_string(i));
  ParameterStore alone;
  auto untied = mgt::make_tied_head("head", "wte", vocab, dim);
  EXPECT_THROW(untied->declare(alone), mgt::ConfigError);  // no table to tie to
}

TEST(SequenceOps, CausalSoftmaxRowsSumToOneOverTheirPast) {
  constexpr int64_t t = 7;
  Tensor s = random_tensor({2, t, t}, 17);
  for (int64_t i = 0; i < s.numel(); ++i) s.data()[i] *= 30.0f;  // exp over a wide range
  Tensor p({2, t, t});
  mgt::host_ops().softmax_rows(s.data(), p.data(), 2 * t, t, 0.5f, /*causal=*/true);
  for (int64_t r = 0; r < 2 * t; ++r) {
    const int64_t q = r % t;
    double sum = 0, max = -1e30;
    for (int64_t c = 0; c <= q; ++c) max = std::max(max, 0.5 * s.data()[r * t + c]);
    double norm = 0;
    for (int64_t c = 0; c <= q; ++c) norm += std::exp(0.5 * s.data()[r * t + c] - max);
    for (int64_t c = 0; c < t; ++c) {
      const float v = p.data()[r * t + c];
      if (c > q) {
        ASSERT_EQ(v, 0.0f) << "row " << r << " column " << c << " lies in the future";
        continue;
      }
      const double want = std::exp(0.5 * s.data()[r * t + c] - max) / norm;
      ASSERT_NEAR(v, want, 1e-6 + 2e-6 * want) << "row " << r << " column " << c;
      sum += v;
    }
    EXPECT_NEAR(sum, 1.0, 1e-5);
  }
}

// Attention as the unfused composition of Ops (per sample: S = Q K^T for all heads, the row
// softmax over [heads, T, T], O = P V; backward from the kept P) and each query's log-sum-exp in
// double: what the fused operation must compute, up to rounding.
struct UnfusedAttention {
  std::vector<float> out, lse, dq, dk, dv;
};

UnfusedAttention unfused_attention(const mgt::AttentionShape& s, const std::vector<float>& qkv,
                                   const std::vector<float>& dout) {
  mgt::Ops& ops = mgt::host_ops();
  const int64_t t = s.tokens, hd = s.head_dim, dim = s.heads * hd, square = t * t;
  UnfusedAttention r;
  r.out.assign(static_cast<size_t>(s.batch * t * s.ld_out), 0.0f);
  r.lse.assign(static_cast<size_t>(s.batch * s.heads * t), 0.0f);
  r.dq.assign(qkv.size(), 0.0f);
  r.dk = r.dv = r.dq;
  std::vector<float> p(static_cast<size_t>(s.heads * square)), ds(p.size());
  for (int64_t b = 0; b < s.batch; ++b) {
    const float* q = qkv.data() + b * t * s.ld;
    const float* k = q + dim;
    const float* v = q + 2 * dim;
    ops.gemm_batched(false, true, t, t, hd, 1.0f, q, s.ld, hd, k, s.ld, hd, 0.0f, p.data(), t, square, s.heads);
    for (int64_t row = 0; row < s.heads * t; ++row) {
      const float* sr = p.data() + row * t;
      const int64_t kept = s.causal ? row % t + 1 : t;
      double m = -1e300, sum = 0;
      for (int64_t c = 0; c < kept; ++c) m = std::max(m, double(s.scale) * sr[c]);
      for (int64_t c = 0; c < kept; ++c) sum += std::exp(double(s.scale) * sr[c] - m);
      r.lse[static_cast<size_t>(b * s.heads * t + row)] = static_cast<float>(m + std::log(sum));
    }
    ops.softmax_rows(p.data(), p.data(), s.heads * t, t, s.scale, s.causal);
    float* o = r.out.data() + b * t * s.ld_out;
    ops.gemm_batched(false, false, t, hd, t, 1.0f, p.data(), t, square, v, s.ld, hd, 0.0f, o, s.ld_out, hd, s.heads);
    const float* g = dout.data() + b * t * s.ld_out;
    float* dq = r.dq.data() + b * t * s.ld;
    float* dk = r.dk.data() + b * t * s.ld + dim;
    float* dv = r.dv.data() + b * t * s.ld + 2 * dim;
    ops.gemm_batched(false, true, t, t, hd, 1.0f, g, s.ld_out, hd, v, s.ld, hd, 0.0f, ds.data(), t, square, s.heads);
    ops.gemm_batched(true, false, t, hd, t, 1.0f, p.data(), t, square, g, s.ld_out, hd, 0.0f, dv, s.ld, hd, s.heads);
    ops.softmax_rows_backward(p.data(), ds.data(), ds.data(), s.heads * t, t, s.scale);
    ops.gemm_batched(false, false, t, hd, t, 1.0f, ds.data(), t, square, k, s.ld, hd, 0.0f, dq, s.ld, hd, s.heads);
    ops.gemm_batched(true, false, t, hd, t, 1.0f, ds.data(), t, square, q, s.ld, hd, 0.0f, dk, s.ld, hd, s.heads);
  }
  return r;
}

// |got - want| within 2e-5 (relative to the largest |want|, at least 1) over the elements where
// `take` says the fused operation writes.
void expect_all_close(const std::vector<float>& got, const std::vector<float>& want,
                      const std::function<bool(size_t)>& take, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double largest = 1.0;
  for (size_t i = 0; i < want.size(); ++i)
    if (take(i)) largest = std::max(largest, std::fabs(double(want[i])));
  for (size_t i = 0; i < want.size(); ++i)
    if (take(i)) ASSERT_NEAR(got[i], want[i], 2e-5 * largest) << what << " at " << i;
}

TEST(SequenceOps, FusedAttentionMatchesTheUnfusedComposition) {
  struct Case {
    int64_t tokens, head_dim, heads;
  };
  // Lengths below, at and across the tiles (32 queries, up to 128 keys: past 128 the online
  // softmax rescales), head widths that are and are not multiples of the vector width.
  for (const Case c :
       {Case{1, 4, 1}, Case{5, 8, 2}, Case{32, 16, 2}, Case{64, 32, 1}, Case{65, 12, 2}, Case{100, 32, 2},
        Case{130, 24, 1}, Case{67, 40, 1}, Case{129, 64, 1}, Case{33, 1, 3}, Case{128, 128, 1}, Case{300, 20, 1}}) {
    for (bool causal : {true, false}) {
      mgt::AttentionShape s;
      s.batch = 2;
      s.tokens = c.tokens;
      s.heads = c.heads;
      s.head_dim = c.head_dim;
      const int64_t dim = c.heads * c.head_dim;
      s.ld = 3 * dim + 3;  // rows wider than q, k and v: the strides are the shape's, not implied
      s.ld_out = dim + 5;
      s.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
      s.causal = causal;
      const std::string what = "T = " + std::to_string(c.tokens) + ", head_dim = " + std::to_string(c.head_dim) +
                               ", heads = " + std::to_string(c.heads) + (causal ? ", causal" : ", bidirectional");
      std::vector<float> qkv(static_cast<size_t>(s.batch * s.tokens * s.ld));
      fill_random(qkv.data(), static_cast<int64_t>(qkv.size()), 20, -2.0f, 2.0f);
      std::vector<float> dout(static_cast<size_t>(s.batch * s.tokens * s.ld_out));
      fill_random(dout.data(), static_cast<int64_t>(dout.size()), 21);
      const UnfusedAttention want = unfused_attention(s, qkv, dout);

      mgt::Ops& ops = mgt::host_ops();
      std::vector<char> workspace(ops.attention_workspace(s));
      std::vector<float> out(want.out.size(), 0.0f), lse(want.lse.size()), grad(qkv.size(), 0.0f);
      const float* q = qkv.data();
      ops.attention_forward(s, q, q + dim, q + 2 * dim, out.data(), lse.data(), workspace.data());
      ops.attention_backward(s, q, q + dim, q + 2 * dim, out.data(), dout.data(), lse.data(), grad.data(),
                             grad.data() + dim, grad.data() + 2 * dim, workspace.data());
      const auto in_out = [&](size_t i) { return static_cast<int64_t>(i) % s.ld_out < dim; };
      const auto column = [&](int64_t part) {
        return [&, part](size_t i) { return static_cast<int64_t>(i) % s.ld / dim == part; };
      };
      expect_all_close(out, want.out, in_out, "output, " + what);
      expect_all_close(
          lse, want.lse, [](size_t) { return true; }, "log-sum-exp, " + what);
      expect_all_close(grad, want.dq, column(0), "dQ, " + what);
      expect_all_close(grad, want.dk, column(1), "dK, " + what);
      expect_all_close(grad, want.dv, column(2), "dV, " + what);
      // Nothing outside the heads' columns is written.
      for (size_t i = 0; i < out.size(); ++i)
        if (!in_out(i)) ASSERT_EQ(out[i], 0.0f) << "output padding at " << i << ", " << what;
      for (size_t i = 0; i < grad.size(); ++i)
        if (static_cast<int64_t>(i) % s.ld >= 3 * dim) ASSERT_EQ(grad[i], 0.0f) << "gradient padding, " << what;
    }
  }
}

TEST(SequenceOps, FusedAttentionGivesASampleTheSameBitsInAnyBatch) {
  mgt::AttentionShape s;
  s.batch = 3;
  s.tokens = 77;
  s.heads = 2;
  s.head_dim = 16;
  s.ld = 3 * 32;
  s.ld_out = 32;
  s.scale = 0.25f;
  s.causal = true;
  std::vector<float> qkv(static_cast<size_t>(s.batch * s.tokens * s.ld)),
      dout(static_cast<size_t>(s.batch * s.tokens * 32));
  fill_random(qkv.data(), static_cast<int64_t>(qkv.size()), 22, -2.0f, 2.0f);
  fill_random(dout.data(), static_cast<int64_t>(dout.size()), 23);
  mgt::Ops& ops = mgt::host_ops();
  const auto run = [&](const mgt::AttentionShape& shape, const float* x, const float* g) {
    std::vector<char> workspace(ops.attention_workspace(shape));
    std::vector<float> out(static_cast<size_t>(shape.batch * shape.tokens * 32)),
        lse(static_cast<size_t>(shape.batch * shape.heads * shape.tokens)),
        grad(static_cast<size_t>(shape.batch * shape.tokens * s.ld));
    ops.attention_forward(shape, x, x + 32, x + 64, out.data(), lse.data(), workspace.data());
    ops.attention_backward(shape, x, x + 32, x + 64, out.data(), g, lse.data(), grad.data(), grad.data() + 32,
                           grad.data() + 64, workspace.data());
    out.insert(out.end(), grad.begin(), grad.end());
    return out;
  };
  const std::vector<float> all = run(s, qkv.data(), dout.data());
  mgt::AttentionShape one = s;
  one.batch = 1;
  const int64_t out_n = s.tokens * 32, in_n = s.tokens * s.ld;
  for (int64_t b = 0; b < s.batch; ++b) {
    const std::vector<float> alone = run(one, qkv.data() + b * in_n, dout.data() + b * out_n);
    for (int64_t i = 0; i < out_n; ++i)
      ASSERT_EQ(alone[static_cast<size_t>(i)], all[static_cast<size_t>(b * out_n + i)]) << "output of sample " << b;
    for (int64_t i = 0; i < in_n; ++i)
      ASSERT_EQ(alone[static_cast<size_t>(out_n + i)], all[static_cast<size_t>(s.batch * out_n + b * in_n + i)])
          << "input gradient of sample " << b;
  }
}

TEST(SequentialModel, TinyTransformerBlockLearnsTheGradientOfItsLoss) {
  // The GPT-2 block as the gpt plugin composes it, checked end to end by finite differences.
  constexpr int64_t vocab = 11, t = 4, dim = 8;
  mgt::SequentialModel model;
  model.add(mgt::make_token_embedding("wte", vocab, t, dim, true));
  std::vector<std::unique_ptr<Layer>> attention;
  attention.push_back(mgt::make_layer_norm("ln1", dim));
  attention.push_back(mgt::make_token_linear("qkv", dim, 3 * dim));
  attention.push_back(mgt::make_attention("attn", dim, 2, true));
  attention.push_back(mgt::make_token_linear("proj", dim, dim));
  model.add(mgt::make_residual("attn_block", std::move(attention)));
  std::vector<std::unique_ptr<Layer>> mlp;
  mlp.push_back(mgt::make_layer_norm("ln2", dim));
  mlp.push_back(mgt::make_token_linear("fc", dim, 4 * dim));
  mlp.push_back(mgt::make_gelu("gelu"));
  mlp.push_back(mgt::make_token_linear("fc_proj", 4 * dim, dim));
  model.add(mgt::make_residual("mlp_block", std::move(mlp)));
  model.add(mgt::make_layer_norm("ln_f", dim));
  model.add(mgt::make_tied_head("head", "wte", vocab, dim));
  ParameterStore store;
  model.declare(store);
  store.finalize();
  store.initialize(3);
  const Tensor ids = random_ids({2, t}, vocab, 18);
  const Tensor r = random_tensor({2, t, vocab}, 19);
  const auto loss = [&] {
    const Tensor& y = model.forward(ids, training_ctx());
    double s = 0;
    for (int64_t i = 0; i < y.numel(); ++i) s += double(y.data()[i]) * r.data()[i];
    return s;
  };
  model.forward(ids, training_ctx());
  store.zero_grads();
  model.backward(r, training_ctx(), {});
  const std::vector<float> grads(store.grads_data(), store.grads_data() + store.flat_size());
  constexpr float eps = 1e-3f;
  for (const auto& info : store.params())
    for (int64_t i : probe_indices(static_cast<int64_t>(info.numel), 6))
      expect_close(grads[info.offset + i], central_difference(store.params_data()[info.offset + i], eps, loss),
                   info.name + " gradient at " + std::to_string(i));
}

// A layer of a plugin's own whose output_shape() says it widens its input: the layer after it
// refuses the shape, and the message names the layer that gave it too.
class WideningLayer final : public mgt::Layer {
 public:
  WideningLayer() : Layer("widen1") {}
  mgt::Shape output_shape(const mgt::Shape& input) const override { return {input[0], 2 * input[1]}; }
  void forward(const mgt::LayerRun&, const mgt::Tensor&, mgt::Tensor&) override {}
  void backward(const mgt::LayerRun&, const mgt::Tensor&, const mgt::Tensor&, const mgt::Tensor&,
                mgt::Tensor*) override {}
};

TEST(SequentialModel, AShapeRefusedNamesTheLayerThatGaveIt) {
  mgt::SequentialModel model;
  model.add(mgt::make_linear("fc1", 8, 16));
  model.add(std::make_unique<WideningLayer>());
  model.add(mgt::make_linear("fc2", 16, 4));
  std::string message;
  try {
    model.output_shape({2, 8});
  } catch (const mgt::ConfigError& e) {
    message = e.what();
  }
  EXPECT_NE(message.find("layer 'fc2' expects input [B, 16]"), std::string::npos) << message;
  EXPECT_NE(message.find("that input is what layer 'widen1' before it gives ([2, 32], by its output_shape())"),
            std::string::npos)
      << message;
}

// Two residual blocks whose inner layers were named without the block's prefix declare the same
// parameter names: the message names the block and the layer, and says how to name them.
TEST(SequentialModel, ABlockLayerNamedWithoutItsPrefixIsNamed) {
  mgt::SequentialModel model;
  for (const char* block : {"res1", "res2"}) {
    std::vector<std::unique_ptr<mgt::Layer>> branch;
    branch.push_back(mgt::make_linear("fc1", 8, 8));
    model.add(mgt::make_residual(block, std::move(branch), {}));
  }
  mgt::ParameterStore store;
  std::string message;
  try {
    model.declare(store);
  } catch (const mgt::Error& e) {
    message = e.what();
  }
  EXPECT_NE(message.find("residual block 'res2', layer 'fc1': parameter name 'fc1.weight' declared twice"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("name a block's layers inside it ('res2.fc1')"), std::string::npos) << message;
}

}  // namespace
