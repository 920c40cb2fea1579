// An optimizer that reads a key it never declared (optimizer.eps), as a plugin author can forget
// to: mgtrain must say that the plugin reads an undeclared key, with or without a value given for
// it (tests/e2e/custom_model.sh).
#include <cstddef>
#include <vector>

#include "mgtrain/plugin.hpp"

namespace {

const mgt::ConfigKey kKeys[] = {
    {"optimizer.lr", mgt::KeyType::positive_real, "0.01", "learning rate"},
};

class UndeclaredKey final : public mgt::Optimizer {
 public:
  explicit UndeclaredKey(const mgt::ConfigSection& config) : lr_(config.get_real("lr")), eps_(config.get_real("eps")) {}
  void setup(size_t) override {}
  void step(float* params, const float* grads, size_t size) override {
    ++step_count_;
    for (size_t i = 0; i < size; ++i) params[i] -= static_cast<float>(lr_) * grads[i] + static_cast<float>(eps_);
  }
  double learning_rate() const override { return lr_; }
  void set_learning_rate(double lr) override { lr_ = lr; }
  std::vector<mgt::OptimizerStateBuffer> state_buffers() override { return {}; }

 private:
  double lr_, eps_;
};

}  // namespace

MGT_OPTIMIZER_PLUGIN("undeclared_key", "1.0.0", "test: reads optimizer.eps without declaring it", kKeys, UndeclaredKey)
