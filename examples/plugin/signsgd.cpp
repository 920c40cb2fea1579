// Optimizer plugin `signsgd`: signSGD (Bernstein et al., 2018), and with momentum its "Signum"
// variant. Each parameter moves by the learning rate in the direction opposite to the sign of
// its gradient (or of the gradient's exponential moving average):
//   m = momentum * m + (1 - momentum) * g      (m = g when momentum = 0)
//   p -= lr * (sign(m) + weight_decay * p)
// The update's size does not depend on the gradient's scale, so lr is much smaller than SGD's
// (1e-3 to 1e-4 is typical).
#include <cstddef>
#include <string>
#include <vector>

#include "mgtrain/plugin.hpp"  // the descriptor macros; includes config, error and optimizer

namespace {

// The plugin's config keys: full `section.key` names in the optimizer's section. The core fills
// the defaults and checks every value's type before the factory runs.
const mgt::ConfigKey kSignSgdKeys[] = {
    {"optimizer.lr", mgt::KeyType::positive_real, "0.001", "learning rate: the step of every parameter"},
    {"optimizer.momentum", mgt::KeyType::non_negative_real, "0.0",
     "EMA factor of the gradient whose sign is taken, in [0, 1) (0: plain signSGD)"},
    {"optimizer.weight_decay", mgt::KeyType::non_negative_real, "0.0",
     "decoupled weight decay: p -= lr * weight_decay * p"},
};

inline float sign(float x) { return static_cast<float>((x > 0.0f) - (x < 0.0f)); }

class SignSgd final : public mgt::Optimizer {
 public:
  // Runs once per rank, after the config was validated against kSignSgdKeys.
  explicit SignSgd(const mgt::ConfigSection& section)
      : lr_(section.get_real("lr")),
        momentum_(section.get_real("momentum")),
        weight_decay_(section.get_real("weight_decay")) {
    // Checks beyond the key's type: a ConfigError names the key, expected versus actual.
    MGT_CHECK(momentum_ < 1.0, mgt::ConfigError,
              "config key 'optimizer.momentum': expected a value in [0, 1), got " + std::to_string(momentum_));
  }

  void setup(size_t size) override {
    size_ = size;
    if (momentum_ > 0.0) momentum_buf_.assign(size, 0.0f);
  }

  void step(float* __restrict params, const float* __restrict grads, size_t size) override {
    MGT_CHECK(size == size_, mgt::Error,
              "signsgd: step over " + std::to_string(size) + " floats, set up for " + std::to_string(size_));
    const auto lr = static_cast<float>(lr_);
    const auto decay = static_cast<float>(lr_ * weight_decay_);
    if (momentum_ == 0.0) {
      for (size_t i = 0; i < size; ++i) params[i] -= lr * sign(grads[i]) + decay * params[i];
    } else {
      // The first step takes the gradient itself (no bias towards the zero-filled buffer).
      const float keep = step_count_ == 0 ? 0.0f : static_cast<float>(momentum_);
      float* __restrict m = momentum_buf_.data();
      for (size_t i = 0; i < size; ++i) {
        m[i] = keep * m[i] + (1.0f - keep) * grads[i];
        params[i] -= lr * sign(m[i]) + decay * params[i];
      }
    }
    ++step_count_;  // saved in checkpoints and restored on resume
  }

  double learning_rate() const override { return lr_; }
  void set_learning_rate(double lr) override { lr_ = lr; }  // the trainer's schedule, every step

  // State the checkpoint stores and a resume restores, one float per parameter.
  std::vector<mgt::OptimizerStateBuffer> state_buffers() override {
    if (momentum_buf_.empty()) return {};
    return {{"momentum", momentum_buf_.data()}};
  }

 private:
  double lr_;
  double momentum_;
  double weight_decay_;
  size_t size_ = 0;
  std::vector<float> momentum_buf_;
};

}  // namespace

// The one exported symbol: ABI version, kind "optimizer", name, version, description, build
// fingerprint, config keys and the factory. The name must match the file name
// libmgtrain-optimizer-signsgd.so, which mgtrain_add_plugin(optimizer signsgd ...) produces.
MGT_OPTIMIZER_PLUGIN("signsgd", "1.0.0", "signSGD / Signum: step by lr against the sign of the (averaged) gradient",
                     kSignSgdKeys, SignSgd)
