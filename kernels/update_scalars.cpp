#include "kernels/update_scalars.hpp"

#include <cmath>
#include <string>

#include "mgtrain/error.hpp"

namespace mgt::kernels {

SgdKind sgd_kind(const SgdHyper& h) {
  MGT_CHECK(!(h.nesterov && h.momentum <= 0.0), Error,
            "sgd: Nesterov momentum requires momentum > 0, got " + std::to_string(h.momentum));
  // As the plugin: decided on the float values its loops use.
  if (static_cast<float>(h.momentum) == 0.0f)
    return static_cast<float>(h.weight_decay) == 0.0f ? SgdKind::plain : SgdKind::weight_decay;
  return h.nesterov ? SgdKind::nesterov : SgdKind::momentum;
}

SgdScalars sgd_scalars(const SgdHyper& h) {
  const auto mu = static_cast<float>(h.momentum);
  // As the plugin: the buffer starts as a copy of the first gradient (no dampening of step 1).
  return {static_cast<float>(h.lr), static_cast<float>(h.weight_decay), mu, h.steps_done == 0 ? 0.0f : mu};
}

AdamWScalars adamw_scalars(const AdamWHyper& h) {
  MGT_CHECK(h.step >= 1, Error, "adamw: step numbers start at 1, got " + std::to_string(h.step));
  // The plugin's scalars, in double where it works in double.
  const double t = static_cast<double>(h.step);
  const double bc1 = 1.0 - std::pow(h.beta1, t);
  const double bc2 = 1.0 - std::pow(h.beta2, t);
  return {static_cast<float>(1.0 - h.lr * h.weight_decay),
          static_cast<float>(h.beta1),
          static_cast<float>(h.beta2),
          static_cast<float>(1.0 - h.beta1),
          static_cast<float>(1.0 - h.beta2),
          static_cast<float>(h.lr / bc1),
          static_cast<float>(1.0 / std::sqrt(bc2)),
          static_cast<float>(h.eps)};
}

}  // namespace mgt::kernels
