#include "runtime/lr_schedule.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "mgtrain/error.hpp"

namespace mgt {

LearningRateSchedule::LearningRateSchedule(const std::string& kind, double base_lr, int64_t warmup_steps,
                                           int64_t total_steps)
    : cosine_(kind == "cosine"), base_(base_lr), warmup_(warmup_steps), total_(total_steps) {
  if (kind != "constant" && kind != "cosine")
    throw ConfigError("config key 'train.lr_schedule': expected constant or cosine, got '" + kind + "'");
}

double LearningRateSchedule::at(int64_t step) const {
  if (step < warmup_) return base_ * static_cast<double>(step + 1) / static_cast<double>(warmup_);
  if (!cosine_ || total_ <= warmup_) return base_;
  const double progress = static_cast<double>(step - warmup_) / static_cast<double>(total_ - warmup_);
  return base_ * 0.5 * (1.0 + std::cos(std::numbers::pi * std::min(progress, 1.0)));
}

}  // namespace mgt
