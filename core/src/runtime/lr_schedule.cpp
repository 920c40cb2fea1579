#include "runtime/lr_schedule.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <sstream>

#include "mgtrain/error.hpp"

namespace mgt {

namespace {

// Linear warm-up, then constant or a cosine decay to 0 at the run's last step. The expressions are the
// ones the runs before schedule plugins used, so their rates (and parameters) keep their bits.
class BuiltinSchedule final : public LearningRateSchedule {
 public:
  explicit BuiltinSchedule(bool cosine) : cosine_(cosine) {}

  void setup(const ScheduleRun& run) override {
    base_ = run.base_rate;
    warmup_ = run.warmup_steps;
    // Where the run ends: train.max_steps caps it, and the curve reaches 0 at its last step (as
    // the key's help says). A resumed run with the same train.max_steps follows the same curve.
    total_ = run.run_steps;
  }

  double rate(int64_t step) const override {
    if (step < warmup_) return base_ * static_cast<double>(step + 1) / static_cast<double>(warmup_);
    if (!cosine_ || total_ <= warmup_) return base_;
    const double progress = static_cast<double>(step - warmup_) / static_cast<double>(total_ - warmup_);
    return base_ * 0.5 * (1.0 + std::cos(std::numbers::pi * std::min(progress, 1.0)));
  }

 private:
  bool cosine_;
  double base_ = 0;
  int64_t warmup_ = 0, total_ = 0;
};

}  // namespace

bool is_builtin_schedule(const std::string& name) { return name == "constant" || name == "cosine"; }

std::unique_ptr<LearningRateSchedule> make_builtin_schedule(const std::string& name) {
  if (!is_builtin_schedule(name))
    throw ConfigError("config key 'train.lr_schedule': expected constant or cosine, got '" + name + "'");
  return std::make_unique<BuiltinSchedule>(name == "cosine");
}

RunSchedule::RunSchedule(PluginRegistry& registry, const Config& config, const ScheduleRun& run)
    : name_(config.get_string("train.lr_schedule")),
      schedule_(is_builtin_schedule(name_) ? make_builtin_schedule(name_) : registry.create_schedule(name_, config)) {
  schedule_->setup(run);
}

double RunSchedule::at(int64_t step) const {
  const double rate = schedule_->rate(step);
  if (std::isfinite(rate) && rate >= 0) return rate;
  std::ostringstream text;
  text.precision(17);
  text << "train.lr_schedule = " << name_ << " gave the learning rate " << rate << " for step " << step + 1 << " (rate("
       << step << ")): expected a finite rate >= 0";
  throw Error(text.str());
}

}  // namespace mgt
