#include "mgtrain/gradient_check.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <vector>

#include "layer_hints.hpp"

namespace mgt {
namespace {

void fill_uniform(float* p, int64_t n, uint64_t seed, float lo, float hi) {
  std::mt19937 gen(static_cast<std::mt19937::result_type>(seed));
  std::uniform_real_distribution<float> dist(lo, hi);
  for (int64_t i = 0; i < n; ++i) p[i] = dist(gen);
}

// Up to max_probes evenly spaced indices of n, the last always among them.
std::vector<int64_t> probe_indices(int64_t n, int64_t max_probes) {
  std::vector<int64_t> idx;
  if (n <= 0) return idx;
  const int64_t step = std::max<int64_t>(1, n / std::max<int64_t>(1, max_probes));
  for (int64_t i = 0; i < n; i += step) idx.push_back(i);
  if (idx.back() != n - 1) idx.push_back(n - 1);
  return idx;
}

// The layer as a model plugin drives it on the host: planned afresh for each forward (a new host
// planner, so nothing of an earlier plan is reused); a layer that aliases its input (Flatten) is
// a copy here, where an executor would share the memory.
class HostRun {
 public:
  HostRun(Layer& layer, ParameterStore& store, const StepContext& step)
      : layer_(layer), store_(store), step_(step), aliases_(layer_hints::of(layer, host_ops()).aliases_input) {}

  void forward(const Tensor& x, Tensor& y) {
    planner_ = make_host_layer_planner();
    layer_.plan(*planner_, x.shape());
    if (aliases_) {
      std::copy(x.data(), x.data() + x.numel(), y.data());
      return;
    }
    layer_.forward(LayerRun{host_ops(step_.step), store_, step_}, x, y);
  }

  void backward(const Tensor& x, const Tensor& y, const Tensor& dy, Tensor* dx) {
    if (aliases_) {
      if (dx) std::copy(dy.data(), dy.data() + dy.numel(), dx->data());
      return;
    }
    layer_.backward(LayerRun{host_ops(step_.step), store_, step_}, x, y, dy, dx);
  }

 private:
  Layer& layer_;
  ParameterStore& store_;
  const StepContext& step_;
  const bool aliases_;
  std::unique_ptr<LayerPlanner> planner_;
};

std::string number(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%.6g", v);
  return text;
}

}  // namespace

GradientCheckReport check_layer_gradients(Layer& layer, ParameterStore& store, const Tensor& input,
                                          const GradientCheckOptions& given) {
  // A caller built against an older header set a prefix of the fields; the rest keep our defaults.
  GradientCheckOptions options;
  std::memcpy(static_cast<void*>(&options), &given, std::min<size_t>(given.size, sizeof options));
  options.size = sizeof options;

  Tensor x(input.shape());
  std::copy(input.data(), input.data() + input.numel(), x.data());
  const Shape out_shape = layer.output_shape(x.shape());
  Tensor r(out_shape);
  fill_uniform(r.data(), r.numel(), options.seed, -1.0f, 1.0f);
  HostRun run(layer, store, options.step);

  Tensor out(out_shape);
  run.forward(x, out);
  Tensor grad_in(x.shape());
  grad_in.fill(12345.0f);  // a backward that does not write it fails
  store.zero_grads();
  run.backward(x, out, r, options.check_input ? &grad_in : nullptr);
  // Parameter gradients are read before the forwards below, which a layer may let touch them.
  std::vector<std::vector<float>> param_grads;
  for (ParamHandle h : layer.param_handles()) {
    const float* g = store.grad(h);
    param_grads.emplace_back(g, g + store.info(h).numel);
  }

  Tensor probe_out(out_shape);
  const auto loss = [&] {
    run.forward(x, probe_out);
    double s = 0.0;
    for (int64_t i = 0; i < probe_out.numel(); ++i) s += double(probe_out.data()[i]) * r.data()[i];
    return s;
  };
  const auto central_difference = [&](float& value) {
    const float saved = value;
    value = saved + options.eps;
    const double up = loss();
    value = saved - options.eps;
    const double down = loss();
    value = saved;
    return (up - down) / (2.0 * double(options.eps));
  };

  GradientCheckReport report;
  const auto compare = [&](const std::string& tensor, int64_t element, double analytic, double numeric) {
    GradientMismatch m{tensor, element, analytic, numeric,
                       options.abs_tolerance + options.rel_tolerance * std::max(std::abs(analytic), std::abs(numeric))};
    ++report.checked;
    // A NaN on either side fails and is the worst.
    const bool ok = std::abs(analytic - numeric) <= m.tolerance;
    if (!ok) {
      ++report.failed;
      report.passed = false;
    }
    // NaN on either side counts as the largest excess.
    const auto score = [](const GradientMismatch& g) { return std::isnan(g.excess()) ? INFINITY : g.excess(); };
    if (report.worst.tensor.empty() || score(m) > score(report.worst)) report.worst = m;
  };

  if (options.check_input)
    for (int64_t i : probe_indices(x.numel(), options.max_probes))
      compare("input", i, grad_in.data()[i], central_difference(x.data()[i]));
  const std::vector<ParamHandle> handles = layer.param_handles();
  for (size_t k = 0; k < handles.size(); ++k) {
    const ParamInfo& info = store.info(handles[k]);
    float* p = store.param(handles[k]);
    for (int64_t i : probe_indices(static_cast<int64_t>(info.numel), options.max_probes))
      compare(info.name, i, param_grads[k][static_cast<size_t>(i)], central_difference(p[i]));
  }

  const GradientMismatch& w = report.worst;
  report.summary = "gradients of layer '" + layer.name() + "': ";
  report.summary += report.passed ? "all " + std::to_string(report.checked) + " elements checked within the tolerance"
                                  : std::to_string(report.failed) + " of " + std::to_string(report.checked) +
                                        " elements outside the tolerance";
  if (!w.tensor.empty())
    report.summary += "; worst: " + w.tensor + " element " + std::to_string(w.element) + ": analytic " +
                      number(w.analytic) + ", numeric " + number(w.numeric) + " (tolerance " + number(w.tolerance) +
                      ")";
  return report;
}

GradientCheckReport check_layer_gradients(Layer& layer, const Tensor& input, const GradientCheckOptions& options,
                                          uint64_t parameter_seed) {
  ParameterStore store;
  layer.declare(store);
  store.finalize();
  store.initialize(parameter_seed);
  for (ParamHandle h : layer.param_handles()) {
    std::vector<float> noise(store.info(h).numel);
    fill_uniform(noise.data(), static_cast<int64_t>(noise.size()), parameter_seed + 1 + h, -0.1f, 0.1f);
    for (size_t i = 0; i < noise.size(); ++i) store.param(h)[i] += noise[i];
  }
  return check_layer_gradients(layer, store, input, options);
}

}  // namespace mgt
