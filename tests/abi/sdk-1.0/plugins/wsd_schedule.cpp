// Schedule plugin `wsd`: warmup-stable-decay, the learning rate of many recent language models.
// It rises linearly over train.warmup_steps, stays at the base rate, and over the last
// schedule.decay_fraction of the run decays linearly to schedule.final_ratio x the base rate:
//   step < W:             base * (step + 1) / W
//   W <= step < D:        base                                        D = H - round(fraction * H)
//   D <= step:            base * (1 - (1 - final_ratio) * min(1, (step - D + 1) / (H - D)))
// with H the horizon, train.epochs x steps per epoch (ScheduleRun::horizon_steps), so a run stopped
// by train.max_steps and resumed follows the curve of the run never stopped.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include "mgtrain/plugin.hpp"  // the descriptor macros; includes config, error and schedule

namespace {

// The schedule's keys, in its own section [schedule]. train.lr_schedule = wsd chooses it.
const mgt::ConfigKey kWsdKeys[] = {
    {"schedule.decay_fraction", mgt::KeyType::positive_real, "0.2",
     "share of the horizon (train.epochs) at its end over which the rate decays, in (0, 1]"},
    {"schedule.final_ratio", mgt::KeyType::non_negative_real, "0.0",
     "the rate at the horizon's last step, as a share of the base rate, in [0, 1]"},
};

class WarmupStableDecay final : public mgt::LearningRateSchedule {
 public:
  // Runs once per rank, after the config was validated against kWsdKeys: checks beyond the type.
  explicit WarmupStableDecay(const mgt::ConfigSection& section)
      : decay_fraction_(section.get_real("decay_fraction")), final_ratio_(section.get_real("final_ratio")) {
    MGT_CHECK(
        decay_fraction_ <= 1.0, mgt::ConfigError,
        "config key 'schedule.decay_fraction': expected a value in (0, 1], got " + std::to_string(decay_fraction_));
    MGT_CHECK(final_ratio_ <= 1.0, mgt::ConfigError,
              "config key 'schedule.final_ratio': expected a value in [0, 1], got " + std::to_string(final_ratio_));
  }

  // What the run knows, once before step 1. The decay must not begin inside the warm-up.
  void setup(const mgt::ScheduleRun& run) override {
    base_ = run.base_rate;
    warmup_ = run.warmup_steps;
    horizon_ = run.horizon_steps;
    decay_start_ = horizon_ - std::llround(decay_fraction_ * static_cast<double>(horizon_));
    MGT_CHECK(
        decay_start_ >= warmup_ && decay_start_ < horizon_, mgt::ConfigError,
        "config key 'schedule.decay_fraction' = " + std::to_string(decay_fraction_) +
            ": the decay would start at step " + std::to_string(decay_start_) + " of " + std::to_string(horizon_) +
            ", expected at least one step of decay and none inside train.warmup_steps = " + std::to_string(warmup_));
  }

  double rate(int64_t step) const override {
    if (step < warmup_) return base_ * static_cast<double>(step + 1) / static_cast<double>(warmup_);
    if (step < decay_start_) return base_;
    const double progress =
        std::min(1.0, static_cast<double>(step - decay_start_ + 1) / static_cast<double>(horizon_ - decay_start_));
    return base_ * (1.0 - (1.0 - final_ratio_) * progress);
  }

 private:
  double decay_fraction_, final_ratio_;
  double base_ = 0;
  int64_t warmup_ = 0, horizon_ = 0, decay_start_ = 0;
};

}  // namespace

MGT_SCHEDULE_PLUGIN("wsd", "1.0.0", "warmup-stable-decay: linear warm-up, constant, linear decay at the end", kWsdKeys,
                    WarmupStableDecay)
