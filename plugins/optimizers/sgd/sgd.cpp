// Stochastic gradient descent with optional (Nesterov) momentum and L2 weight decay, with
// PyTorch's torch.optim.SGD semantics so that hyper-parameters carry over unchanged.
#include <cstddef>
#include <string>
#include <vector>

#include "mgtrain/config.hpp"
#include "mgtrain/error.hpp"
#include "mgtrain/optimizer.hpp"
#include "mgtrain/plugin.hpp"

namespace {

const mgt::ConfigKey kSgdKeys[] = {
    {"optimizer.lr", mgt::KeyType::positive_real, "0.01", "learning rate"},
    {"optimizer.momentum", mgt::KeyType::non_negative_real, "0.0",
     "momentum factor (0 disables momentum)"},
    {"optimizer.nesterov", mgt::KeyType::boolean, "false",
     "use Nesterov momentum (requires optimizer.momentum > 0)"},
    {"optimizer.weight_decay", mgt::KeyType::non_negative_real, "0.0",
     "L2 penalty added to the gradient: g += weight_decay * p"},
};

class Sgd final : public mgt::Optimizer {
 public:
  explicit Sgd(const mgt::ConfigSection& section)
      : lr_(section.get_real("lr")),
        momentum_(section.get_real("momentum")),
        weight_decay_(section.get_real("weight_decay")),
        nesterov_(section.get_bool("nesterov")) {
    MGT_CHECK(!(nesterov_ && momentum_ <= 0.0), mgt::ConfigError,
              "optimizer.nesterov = true requires optimizer.momentum > 0, got optimizer.momentum = " +
                  std::to_string(momentum_));
  }

  void setup(size_t size) override {
    size_ = size;
    if (momentum_ > 0.0) momentum_buf_.assign(size, 0.0f);
  }

  void step(float* __restrict params, const float* __restrict grads, size_t size) override {
    MGT_CHECK(size == size_, mgt::Error,
              "sgd: step over " + std::to_string(size) + " floats, set up for " +
                  std::to_string(size_));
    const auto lr = static_cast<float>(lr_);
    const auto wd = static_cast<float>(weight_decay_);
    const auto mu = static_cast<float>(momentum_);
    // Branches stay outside the loops so each loop is a plain vectorizable pass over memory.
    if (mu == 0.0f) {
      if (wd == 0.0f) {
        for (size_t i = 0; i < size; ++i) params[i] -= lr * grads[i];
      } else {
        for (size_t i = 0; i < size; ++i) params[i] -= lr * (grads[i] + wd * params[i]);
      }
    } else {
      float* __restrict buf = momentum_buf_.data();
      // PyTorch starts the buffer as a copy of the first gradient (no dampening of step 1);
      // step_count_ is restored on resume, so a resumed run continues with its saved buffer.
      const bool first = step_count_ == 0;
      const float keep = first ? 0.0f : mu;
      if (nesterov_) {
        for (size_t i = 0; i < size; ++i) {
          const float g = grads[i] + wd * params[i];
          const float b = keep * buf[i] + g;
          buf[i] = b;
          params[i] -= lr * (g + mu * b);
        }
      } else {
        for (size_t i = 0; i < size; ++i) {
          const float g = grads[i] + wd * params[i];
          const float b = keep * buf[i] + g;
          buf[i] = b;
          params[i] -= lr * b;
        }
      }
    }
    ++step_count_;
  }

  mgt::UpdateRule update_rule() const override {
    mgt::UpdateRule rule;
    rule.kind = mgt::UpdateRule::Kind::sgd;
    rule.momentum = momentum_;
    rule.weight_decay = weight_decay_;
    rule.nesterov = nesterov_;
    return rule;
  }

  double learning_rate() const override { return lr_; }
  void set_learning_rate(double lr) override { lr_ = lr; }

  std::vector<mgt::OptimizerStateBuffer> state_buffers() override {
    if (momentum_buf_.empty()) return {};
    return {{"momentum", momentum_buf_.data()}};
  }

 private:
  double lr_;
  double momentum_;
  double weight_decay_;
  bool nesterov_;
  size_t size_ = 0;
  std::vector<float> momentum_buf_;
};

}  // namespace

MGT_OPTIMIZER_PLUGIN("sgd", "1.0.0",
                     "SGD with optional momentum, Nesterov momentum and L2 weight decay (PyTorch semantics)",
                     kSgdKeys, Sgd)
