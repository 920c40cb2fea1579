#pragma once
// Learning rate as a pure function of the step, so a resumed run follows the same curve. The
// horizon is train.epochs (not train.max_steps), so stopping early and resuming does not bend it.
#include <cstdint>
#include <string>

namespace mgt {

class LearningRateSchedule {
 public:
  // kind: "constant" or "cosine"; throws ConfigError naming train.lr_schedule otherwise.
  LearningRateSchedule(const std::string& kind, double base_lr, int64_t warmup_steps, int64_t total_steps);
  // Rate for the update made at 0-based step `step`.
  double at(int64_t step) const;

 private:
  bool cosine_;
  double base_;
  int64_t warmup_, total_;
};

}  // namespace mgt
