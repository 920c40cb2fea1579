#pragma once
// Checks a layer's backward against central finite differences of its forward, on the host: the
// check mgtrain's own layers are tested with, for a layer of a plugin's own, with no test
// framework. The layer runs as a model plugin would drive it on the CPU: planned with
// make_host_layer_planner() for the input's shape, forward and backward with host_ops() over a
// ParameterStore. The loss is sum(out * r) for a fixed random r, so backward gets grad_out = r;
// the analytic gradients (the input's and each parameter's) are compared, at up to max_probes
// elements of each, with (loss(v + eps) - loss(v - eps)) / 2 eps, forward run in float.
#include <cstdint>
#include <string>

#include "mgtrain/export.hpp"
#include "mgtrain/layers.hpp"
#include "mgtrain/parameters.hpp"
#include "mgtrain/tensor.hpp"

namespace mgt {

// What to check and how strictly. Filled by the caller and read by libmgtrain: fields are only
// appended (as LayerHints'); `size` says how many a caller built against an older header set.
struct GradientCheckOptions {
  uint32_t size = sizeof(GradientCheckOptions);
  // The step forward and backward run with (training, seed and step for a dropout mask).
  StepContext step;
  // The finite difference's half step.
  float eps = 1e-3f;
  // An element passes when |analytic - numeric| <= abs_tolerance + rel_tolerance * max(|analytic|,
  // |numeric|): float forward passes limit how tight this can be.
  double abs_tolerance = 2e-3;
  double rel_tolerance = 1e-2;
  // Elements checked per tensor, evenly spaced, the last one always among them.
  int64_t max_probes = 48;
  // False: the input gradient is not checked (backward gets no grad_in): an input of token ids.
  bool check_input = true;
  // Seed of r, uniform in [-1, 1).
  uint32_t seed = 77;
};

// One element compared: which tensor ("input" or a parameter's canonical name), which element of
// it (flat index), the two gradients and the tolerance they had to meet.
struct GradientMismatch {
  std::string tensor;
  int64_t element = -1;
  double analytic = 0.0;
  double numeric = 0.0;
  double tolerance = 0.0;
  // |analytic - numeric| / tolerance: above 1 fails.
  double excess() const {
    const double off = analytic > numeric ? analytic - numeric : numeric - analytic;  // NaN stays NaN
    return off == 0.0 ? 0.0 : off / tolerance;
  }
};

// What a check found. Returned by value, so its layout is fixed within an ABI version.
struct GradientCheckReport {
  bool passed = true;
  int64_t checked = 0;  // elements compared, all tensors together
  int64_t failed = 0;   // of them, outside the tolerance
  // The element with the largest excess(), failed or not (tensor empty when nothing was checked).
  GradientMismatch worst;
  // One line: "gradients of layer 'rope1': 2 of 96 elements outside the tolerance; worst: input
  // element 5: analytic 0.25, numeric 0.5 (tolerance 0.0075)", or that all passed.
  std::string summary;
};

// Checks `layer`, declared into `store` (finalized, holding the parameter values to check at),
// at `input` (host memory; not changed: the checker perturbs a copy). Throws what the layer throws
// (a ConfigError for an input it cannot take).
MGT_API GradientCheckReport check_layer_gradients(Layer& layer, ParameterStore& store, const Tensor& input,
                                                  const GradientCheckOptions& options = {});

// The same with a store of the check's own: the layer's parameters declared, finalized,
// initialised from `parameter_seed` and each moved by a uniform in [-0.1, 0.1), so that
// parameters initialised to zero (biases) take part too.
MGT_API GradientCheckReport check_layer_gradients(Layer& layer, const Tensor& input,
                                                  const GradientCheckOptions& options = {},
                                                  uint64_t parameter_seed = 1234);

}  // namespace mgt
