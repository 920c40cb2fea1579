// AdamW: Adam with decoupled weight decay (Loshchilov & Hutter), matching torch.optim.AdamW.
#include <cmath>
#include <cstddef>
#include <string>
#include <vector>

#include "mgtrain/config.hpp"
#include "mgtrain/error.hpp"
#include "mgtrain/optimizer.hpp"
#include "mgtrain/plugin.hpp"
#include "mgtrain/update_rule.hpp"

namespace {

const mgt::ConfigKey kAdamKeys[] = {
    {"optimizer.lr", mgt::KeyType::positive_real, "0.001", "learning rate"},
    {"optimizer.beta1", mgt::KeyType::non_negative_real, "0.9", "decay of the first-moment estimate, in [0, 1)"},
    {"optimizer.beta2", mgt::KeyType::non_negative_real, "0.999", "decay of the second-moment estimate, in [0, 1)"},
    {"optimizer.eps", mgt::KeyType::positive_real, "1e-8", "added to the denominator for numerical stability"},
    {"optimizer.weight_decay", mgt::KeyType::non_negative_real, "0.0",
     "decoupled weight decay: p *= 1 - lr * weight_decay before each update"},
};

double checked_beta(const mgt::ConfigSection& section, const char* key) {
  const double beta = section.get_real(key);
  MGT_CHECK(beta >= 0.0 && beta < 1.0, mgt::ConfigError,
            "optimizer." + std::string(key) + ": expected a value in [0, 1), got " + std::to_string(beta));
  return beta;
}

// The update of one element, written once: the host's step (mgt::Optimizer's) and every backend run it.
// One statement per line, as the update reads.
// clang-format off
MGT_UPDATE_SCALARS(AdamWScalars, float decay; float b1; float b2; float one_minus_b1; float one_minus_b2;
                   float step_size; float inv_sqrt_bc2; float eps;)
// lr * mhat / (sqrt(vhat) + eps) written as PyTorch does: (lr / bc1) * m / (sqrt(v) / sqrt(bc2) + eps).
MGT_ELEMENT_UPDATE(AdamWUpdate, AdamWScalars, 2,
                   const float mi = s.b1 * state0 + s.one_minus_b1 * grad;
                   const float vi = s.b2 * state1 + s.one_minus_b2 * grad * grad;
                   state0 = mi;
                   state1 = vi;
                   param = (decayed ? param * s.decay : param) - s.step_size * mi / (sqrtf(vi) * s.inv_sqrt_bc2 + s.eps);)
// clang-format on

struct AdamWHyper {
  double beta1, beta2, eps, weight_decay;
  // The scalars of update number t: bias corrections in double, as 1 - beta^t loses digits in
  // float for large t.
  AdamWScalars at(double lr, int64_t t) const {
    const double bc1 = 1.0 - std::pow(beta1, static_cast<double>(t));
    const double bc2 = 1.0 - std::pow(beta2, static_cast<double>(t));
    return {static_cast<float>(1.0 - lr * weight_decay),
            static_cast<float>(beta1),
            static_cast<float>(beta2),
            static_cast<float>(1.0 - beta1),
            static_cast<float>(1.0 - beta2),
            static_cast<float>(lr / bc1),
            static_cast<float>(1.0 / std::sqrt(bc2)),
            static_cast<float>(eps)};
  }
};

class AdamW final : public mgt::Optimizer {
 public:
  explicit AdamW(const mgt::ConfigSection& section)
      : lr_(section.get_real("lr")),
        hyper_{checked_beta(section, "beta1"), checked_beta(section, "beta2"), section.get_real("eps"),
               section.get_real("weight_decay")} {}

  void setup(size_t size) override {
    exp_avg_.assign(size, 0.0f);
    exp_avg_sq_.assign(size, 0.0f);
  }

  std::unique_ptr<mgt::ElementwiseUpdate> element_update() const override {
    const AdamWHyper hyper = hyper_;
    return mgt::make_element_update<AdamWUpdate>("adamw", [hyper](double lr, int64_t t) { return hyper.at(lr, t); });
  }

  double learning_rate() const override { return lr_; }
  void set_learning_rate(double lr) override { lr_ = lr; }

  std::vector<mgt::OptimizerStateBuffer> state_buffers() override {
    return {{"exp_avg", exp_avg_.data()}, {"exp_avg_sq", exp_avg_sq_.data()}};
  }

 private:
  double lr_;
  AdamWHyper hyper_;
  std::vector<float> exp_avg_;
  std::vector<float> exp_avg_sq_;
};

}  // namespace

MGT_OPTIMIZER_PLUGIN("adam", "1.0.0", "AdamW: Adam with decoupled weight decay (PyTorch semantics)", kAdamKeys, AdamW)
