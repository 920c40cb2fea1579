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
#include "mgtrain/update_rule.hpp"

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

// The update of one element, written once (mgtrain/update_rule.hpp): mgtrain runs it on the host
// (mgt::Optimizer::apply_update) and compiles the same text for a GPU, so this optimizer trains on
// every device without a step() of its own.
// In the body only float arithmetic and C math functions: both compilers see it.
// One statement per line, as the updates read.
// clang-format off
MGT_UPDATE_SCALARS(SignSgdScalars, float lr; float decay; float keep;)
MGT_ELEMENT_UPDATE(SignSgdPlain, SignSgdScalars, 0,
                   const float sign = (grad > 0.0f ? 1.0f : 0.0f) - (grad < 0.0f ? 1.0f : 0.0f);
                   param -= s.lr * sign + (decayed ? s.decay * param : 0.0f);)
MGT_ELEMENT_UPDATE(Signum, SignSgdScalars, 1,
                   state0 = s.keep * state0 + (1.0f - s.keep) * grad;
                   const float sign = (state0 > 0.0f ? 1.0f : 0.0f) - (state0 < 0.0f ? 1.0f : 0.0f);
                   param -= s.lr * sign + (decayed ? s.decay * param : 0.0f);)
// clang-format on

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
    if (momentum_ > 0.0) momentum_buf_.assign(size, 0.0f);
  }

  // The update for every path (the host's, the GPU's), with the scalars of update number t.
  std::unique_ptr<mgt::ElementwiseUpdate> element_update() const override {
    const auto at = [momentum = momentum_, wd = weight_decay_](double lr, int64_t t) {
      return scalars_of(lr, momentum, wd, t);
    };
    if (momentum_ == 0.0) return mgt::make_element_update<SignSgdPlain>("signsgd", at);
    return mgt::make_element_update<Signum>("signum", at);
  }

  double learning_rate() const override { return lr_; }
  void set_learning_rate(double lr) override { lr_ = lr; }  // the trainer's schedule, every step

  // State the checkpoint stores and a resume restores, one float per parameter.
  std::vector<mgt::OptimizerStateBuffer> state_buffers() override {
    if (momentum_buf_.empty()) return {};
    return {{"momentum", momentum_buf_.data()}};
  }

 private:
  // The first update takes the gradient itself (no bias towards the zero-filled buffer).
  static SignSgdScalars scalars_of(double lr, double momentum, double weight_decay, int64_t update) {
    return {static_cast<float>(lr), static_cast<float>(lr * weight_decay),
            update == 1 ? 0.0f : static_cast<float>(momentum)};
  }

  double lr_;
  double momentum_;
  double weight_decay_;
  std::vector<float> momentum_buf_;
};

}  // namespace

// The one exported symbol: ABI version, kind "optimizer", name, version, description, build
// fingerprint, config keys and the factory. The name must match the file name
// libmgtrain-optimizer-signsgd.so, which mgtrain_add_plugin(optimizer signsgd ...) produces.
MGT_OPTIMIZER_PLUGIN("signsgd", "1.0.0", "signSGD / Signum: step by lr against the sign of the (averaged) gradient",
                     kSignSgdKeys, SignSgd)
