// A schedule that gives a rate it must not at one step (schedule.bad_at, 1-based as the metrics
// count): NaN or a negative rate. The run must stop at that step, naming the schedule and the step.
#include <cmath>
#include <cstdint>
#include <limits>

#include "mgtrain/plugin.hpp"

namespace {

const mgt::ConfigKey kKeys[] = {
    {"schedule.bad_at", mgt::KeyType::positive_integer, "5", "the step whose rate is bad"},
    {"schedule.bad_rate", mgt::KeyType::choice, "nan", "what it gives there", "nan|negative"},
};

class BadRateSchedule final : public mgt::LearningRateSchedule {
 public:
  explicit BadRateSchedule(const mgt::ConfigSection& section)
      : bad_at_(section.get_int("bad_at")), negative_(section.get_string("bad_rate") == "negative") {}
  void setup(const mgt::ScheduleRun& run) override { base_ = run.base_rate; }
  double rate(int64_t step) const override {
    if (step + 1 != bad_at_) return base_;
    return negative_ ? -base_ : std::numeric_limits<double>::quiet_NaN();
  }

 private:
  int64_t bad_at_;
  bool negative_;
  double base_ = 0;
};

}  // namespace

MGT_SCHEDULE_PLUGIN("bad_rate", "1.0.0", "the base rate, but NaN or negative at one step", kKeys, BadRateSchedule)
