// An optimizer that states its update twice, as a plugin author can: Lion's element update, and a
// step() override chosen by optimizer.step_form: `inherited` (the SDK's default step()), `other`
// (a hand-written loop that forgets the weight decay) or `throws`. mgtrain never calls the step()
// of an optimizer that has an element update, so all three train alike, by the element update,
// under every sync strategy (tests/e2e/custom_model.sh).
#include <cstddef>
#include <stdexcept>
#include <string>
#include <vector>

#include "mgtrain/plugin.hpp"
#include "mgtrain/update_rule.hpp"

namespace {

const mgt::ConfigKey kKeys[] = {
    {"optimizer.lr", mgt::KeyType::positive_real, "0.001", "learning rate"},
    {"optimizer.weight_decay", mgt::KeyType::non_negative_real, "0.1", "decoupled weight decay"},
    {"optimizer.step_form", mgt::KeyType::choice, "inherited", "what the step() override runs",
     "inherited|other|throws"},
};

// clang-format off
MGT_UPDATE_SCALARS(LionScalars, float lr; float decay; float b1; float b2;)
MGT_ELEMENT_UPDATE(LionUpdate, LionScalars, 1,
                   const float c = s.b1 * state0 + (1.0f - s.b1) * grad;
                   param = (decayed ? param * s.decay : param) - s.lr * (c > 0.0f ? 1.0f : (c < 0.0f ? -1.0f : 0.0f));
                   state0 = s.b2 * state0 + (1.0f - s.b2) * grad;)
// clang-format on

class Lion final : public mgt::Optimizer {
 public:
  explicit Lion(const mgt::ConfigSection& config)
      : lr_(config.get_real("lr")), wd_(config.get_real("weight_decay")), form_(config.get_string("step_form")) {}
  void setup(size_t size) override { momentum_.assign(size, 0.0f); }
  void step(float* params, const float* grads, size_t size) override {
    if (form_ == "inherited") return mgt::Optimizer::step(params, grads, size);
    if (form_ == "throws") throw std::runtime_error("this step() is not written yet");
    ++step_count_;
    const LionScalars s = scalars(lr_);
    for (size_t i = 0; i < size; ++i) {  // `other`: no weight decay
      const float c = s.b1 * momentum_[i] + (1.0f - s.b1) * grads[i];
      params[i] -= s.lr * (c > 0.0f ? 1.0f : (c < 0.0f ? -1.0f : 0.0f));
      momentum_[i] = s.b2 * momentum_[i] + (1.0f - s.b2) * grads[i];
    }
  }
  std::unique_ptr<mgt::ElementwiseUpdate> element_update() const override {
    const double wd = wd_;
    return mgt::make_element_update<LionUpdate>("lion", [wd](double lr, int64_t) {
      return LionScalars{static_cast<float>(lr), static_cast<float>(1.0 - lr * wd), 0.9f, 0.99f};
    });
  }
  double learning_rate() const override { return lr_; }
  void set_learning_rate(double lr) override { lr_ = lr; }
  std::vector<mgt::OptimizerStateBuffer> state_buffers() override { return {{"momentum", momentum_.data()}}; }

 private:
  LionScalars scalars(double lr) const {
    return {static_cast<float>(lr), static_cast<float>(1.0 - lr * wd_), 0.9f, 0.99f};
  }
  double lr_, wd_;
  std::string form_;
  std::vector<float> momentum_;
};

}  // namespace

MGT_OPTIMIZER_PLUGIN("two_updates", "1.0.0", "test: Lion with a step() that differs from its element update", kKeys,
                     Lion)
