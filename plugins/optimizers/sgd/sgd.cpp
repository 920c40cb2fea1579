// Stochastic gradient descent with optional (Nesterov) momentum and L2 weight decay, with
// PyTorch's torch.optim.SGD semantics so that hyper-parameters carry over unchanged.
#include <cstddef>
#include <string>
#include <vector>

#include "mgtrain/config.hpp"
#include "mgtrain/error.hpp"
#include "mgtrain/optimizer.hpp"
#include "mgtrain/plugin.hpp"
#include "mgtrain/update_rule.hpp"

namespace {

const mgt::ConfigKey kSgdKeys[] = {
    {"optimizer.lr", mgt::KeyType::positive_real, "0.01", "learning rate"},
    {"optimizer.momentum", mgt::KeyType::non_negative_real, "0.0", "momentum factor (0 disables momentum)"},
    {"optimizer.nesterov", mgt::KeyType::boolean, "false", "use Nesterov momentum (requires optimizer.momentum > 0)"},
    {"optimizer.weight_decay", mgt::KeyType::non_negative_real, "0.0",
     "L2 penalty added to the gradient: g += weight_decay * p"},
};

// The updates of one element, written once: the host's step (mgt::Optimizer's) and every backend run them. One
// rule per form, chosen once, so each loop is a plain pass over memory. `keep` is 0 on the first
// update: PyTorch starts the momentum buffer as a copy of the first gradient (no dampening).
// One statement per line, as the updates read.
// clang-format off
MGT_UPDATE_SCALARS(SgdScalars, float lr; float wd; float mu; float keep;)
MGT_ELEMENT_UPDATE(SgdPlain, SgdScalars, 0, param -= s.lr * grad;)
MGT_ELEMENT_UPDATE(SgdWeightDecay, SgdScalars, 0, param -= s.lr * (decayed ? grad + s.wd * param : grad);)
MGT_ELEMENT_UPDATE(SgdMomentum, SgdScalars, 1,
                   const float g = decayed ? grad + s.wd * param : grad;
                   const float b = s.keep * state0 + g;
                   state0 = b;
                   param -= s.lr * b;)
MGT_ELEMENT_UPDATE(SgdNesterov, SgdScalars, 1,
                   const float g = decayed ? grad + s.wd * param : grad;
                   const float b = s.keep * state0 + g;
                   state0 = b;
                   param -= s.lr * (g + s.mu * b);)
// clang-format on

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
    if (momentum_ > 0.0) momentum_buf_.assign(size, 0.0f);
  }

  std::unique_ptr<mgt::ElementwiseUpdate> element_update() const override {
    const auto at = [mu = momentum_, wd = weight_decay_](double lr, int64_t t) { return scalars_of(lr, mu, wd, t); };
    switch (form()) {
      case Form::plain:
        return mgt::make_element_update<SgdPlain>("sgd", at);
      case Form::weight_decay:
        return mgt::make_element_update<SgdWeightDecay>("sgd (weight decay)", at);
      case Form::momentum:
        return mgt::make_element_update<SgdMomentum>("sgd (momentum)", at);
      case Form::nesterov:
        return mgt::make_element_update<SgdNesterov>("sgd (Nesterov)", at);
    }
    return nullptr;
  }

  double learning_rate() const override { return lr_; }
  void set_learning_rate(double lr) override { lr_ = lr; }

  std::vector<mgt::OptimizerStateBuffer> state_buffers() override {
    if (momentum_buf_.empty()) return {};
    return {{"momentum", momentum_buf_.data()}};
  }

 private:
  enum class Form { plain, weight_decay, momentum, nesterov };
  // Decided on the float values the updates use.
  Form form() const {
    if (static_cast<float>(momentum_) == 0.0f)
      return static_cast<float>(weight_decay_) == 0.0f ? Form::plain : Form::weight_decay;
    return nesterov_ ? Form::nesterov : Form::momentum;
  }
  static SgdScalars scalars_of(double lr, double momentum, double weight_decay, int64_t update) {
    const auto mu = static_cast<float>(momentum);
    return {static_cast<float>(lr), static_cast<float>(weight_decay), mu, update == 1 ? 0.0f : mu};
  }

  double lr_;
  double momentum_;
  double weight_decay_;
  bool nesterov_;
  std::vector<float> momentum_buf_;
};

}  // namespace

MGT_OPTIMIZER_PLUGIN("sgd", "1.0.0",
                     "SGD with optional momentum, Nesterov momentum and L2 weight decay (PyTorch semantics)", kSgdKeys,
                     Sgd)
