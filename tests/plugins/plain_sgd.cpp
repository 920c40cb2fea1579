// An optimizer with no element update, as a plugin author may write one first: p -= lr * g in its
// own step(). It trains on the CPU, where the step runs an optimizer's step() on the host; the GPU
// path refuses it by name. Its updates are those of sgd without momentum, bit for bit.
#include <cstddef>
#include <vector>

#include "mgtrain/plugin.hpp"

namespace {

const mgt::ConfigKey kKeys[] = {
    {"optimizer.lr", mgt::KeyType::positive_real, "0.01", "learning rate"},
};

class PlainSgd final : public mgt::Optimizer {
 public:
  explicit PlainSgd(const mgt::ConfigSection& config) : lr_(config.get_real("lr")) {}
  void setup(size_t) override {}
  void step(float* params, const float* grads, size_t size) override {
    ++step_count_;
    const auto lr = static_cast<float>(lr_);
    for (size_t i = 0; i < size; ++i) params[i] -= lr * grads[i];
  }
  double learning_rate() const override { return lr_; }
  void set_learning_rate(double lr) override { lr_ = lr; }
  std::vector<mgt::OptimizerStateBuffer> state_buffers() override { return {}; }

 private:
  double lr_;
};

}  // namespace

MGT_OPTIMIZER_PLUGIN("plain_sgd", "1.0.0", "test: p -= lr * g in step() alone, no element update", kKeys, PlainSgd)
