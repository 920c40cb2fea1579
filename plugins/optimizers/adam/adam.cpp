// AdamW: Adam with decoupled weight decay (Loshchilov & Hutter), matching torch.optim.AdamW.
#include <cmath>
#include <cstddef>
#include <string>
#include <vector>

#include "mgtrain/config.hpp"
#include "mgtrain/error.hpp"
#include "mgtrain/optimizer.hpp"
#include "mgtrain/plugin.hpp"

namespace {

const mgt::ConfigKey kAdamKeys[] = {
    {"optimizer.lr", mgt::KeyType::positive_real, "0.001", "learning rate"},
    {"optimizer.beta1", mgt::KeyType::non_negative_real, "0.9",
     "decay of the first-moment estimate, in [0, 1)"},
    {"optimizer.beta2", mgt::KeyType::non_negative_real, "0.999",
     "decay of the second-moment estimate, in [0, 1)"},
    {"optimizer.eps", mgt::KeyType::positive_real, "1e-8",
     "added to the denominator for numerical stability"},
    {"optimizer.weight_decay", mgt::KeyType::non_negative_real, "0.0",
     "decoupled weight decay: p *= 1 - lr * weight_decay before each update"},
};

double checked_beta(const mgt::ConfigSection& section, const char* key) {
  const double beta = section.get_real(key);
  MGT_CHECK(beta >= 0.0 && beta < 1.0, mgt::ConfigError,
            "optimizer." + std::string(key) + ": expected a value in [0, 1), got " +
                std::to_string(beta));
  return beta;
}

class AdamW final : public mgt::Optimizer {
 public:
  explicit AdamW(const mgt::ConfigSection& section)
      : lr_(section.get_real("lr")),
        beta1_(checked_beta(section, "beta1")),
        beta2_(checked_beta(section, "beta2")),
        eps_(section.get_real("eps")),
        weight_decay_(section.get_real("weight_decay")) {}

  void setup(size_t size) override {
    size_ = size;
    exp_avg_.assign(size, 0.0f);
    exp_avg_sq_.assign(size, 0.0f);
  }

  void step(float* __restrict params, const float* __restrict grads, size_t size) override {
    MGT_CHECK(size == size_, mgt::Error,
              "adam: step over " + std::to_string(size) + " floats, set up for " +
                  std::to_string(size_));
    ++step_count_;
    const double t = static_cast<double>(step_count_);
    // Bias corrections in double: 1 - beta^t loses digits in float for large t.
    const double bc1 = 1.0 - std::pow(beta1_, t);
    const double bc2 = 1.0 - std::pow(beta2_, t);
    const auto decay = static_cast<float>(1.0 - lr_ * weight_decay_);
    const auto b1 = static_cast<float>(beta1_);
    const auto b2 = static_cast<float>(beta2_);
    const auto one_minus_b1 = static_cast<float>(1.0 - beta1_);
    const auto one_minus_b2 = static_cast<float>(1.0 - beta2_);
    const auto step_size = static_cast<float>(lr_ / bc1);
    const auto inv_sqrt_bc2 = static_cast<float>(1.0 / std::sqrt(bc2));
    const auto eps = static_cast<float>(eps_);
    float* __restrict m = exp_avg_.data();
    float* __restrict v = exp_avg_sq_.data();
    // lr * mhat / (sqrt(vhat) + eps) written as PyTorch does: (lr / bc1) * m / (sqrt(v) / sqrt(bc2) + eps).
    for (size_t i = 0; i < size; ++i) {
      const float g = grads[i];
      const float mi = b1 * m[i] + one_minus_b1 * g;
      const float vi = b2 * v[i] + one_minus_b2 * g * g;
      m[i] = mi;
      v[i] = vi;
      params[i] = params[i] * decay - step_size * mi / (std::sqrt(vi) * inv_sqrt_bc2 + eps);
    }
  }

  mgt::UpdateRule update_rule() const override {
    mgt::UpdateRule rule;
    rule.kind = mgt::UpdateRule::Kind::adamw;
    rule.weight_decay = weight_decay_;
    rule.beta1 = beta1_;
    rule.beta2 = beta2_;
    rule.eps = eps_;
    return rule;
  }

  double learning_rate() const override { return lr_; }
  void set_learning_rate(double lr) override { lr_ = lr; }

  std::vector<mgt::OptimizerStateBuffer> state_buffers() override {
    return {{"exp_avg", exp_avg_.data()}, {"exp_avg_sq", exp_avg_sq_.data()}};
  }

 private:
  double lr_, beta1_, beta2_, eps_, weight_decay_;
  size_t size_ = 0;
  std::vector<float> exp_avg_;
  std::vector<float> exp_avg_sq_;
};

}  // namespace

MGT_OPTIMIZER_PLUGIN("adam", "1.0.0", "AdamW: Adam with decoupled weight decay (PyTorch semantics)",
                     kAdamKeys, AdamW)
