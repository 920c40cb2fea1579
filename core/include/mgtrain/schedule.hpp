#pragma once
// The interface a learning-rate schedule plugin implements (kind "schedule", MGT_SCHEDULE_PLUGIN in
// mgtrain/plugin.hpp). train.lr_schedule names the schedule: the built-in `constant` and `cosine`,
// or a plugin libmgtrain-schedule-<name>.so, whose keys live in the [schedule] section. The core
// asks it for the rate of every step and hands that rate to the optimizer
// (Optimizer::set_learning_rate); the metrics' `lr` is that rate.
#include <cstdint>

#include "mgtrain/export.hpp"

namespace mgt {

// What the run knows about its length and rate, told to a schedule once, before step 1. Filled
// by the core; binary stability as LayerHints (mgtrain/layers.hpp): fields are only appended, and
// MGT_HAS_FIELD(run, field) says whether the core that filled it has a field.
struct ScheduleRun {
  // sizeof(ScheduleRun) of the core that filled it.
  uint32_t size = sizeof(ScheduleRun);
  // optimizer.lr, times train.global_batch / optimizer.lr_base_batch with optimizer.lr_scaling =
  // linear: the rate the schedule scales.
  double base_rate = 0;
  // train.warmup_steps: the built-in schedules rise linearly to base_rate over these steps; a
  // plugin decides what it does with them.
  int64_t warmup_steps = 0;
  // Optimizer steps per epoch (of the global batch).
  int64_t steps_per_epoch = 0;
  // train.epochs x steps_per_epoch. It does not depend on train.max_steps, so a run resumed with
  // another max_steps follows the same curve: the horizon to use for a curve that must not bend
  // when train.max_steps changes.
  int64_t horizon_steps = 0;
  // The step this run ends at: train.max_steps where it caps the run, else horizon_steps; the
  // built-in cosine decays to 0 here. A run stopped by a signal and resumed with the same keys
  // gets the same value; one resumed with another train.max_steps gets a curve that bends there.
  int64_t run_steps = 0;
};

// A schedule is created from its [schedule] section (read and copy its keys in the constructor,
// as every plugin does), then set up once with what the run knows, then asked rate(step) for
// every step, from the rank's main thread. It is made on every rank, so it must be a pure function
// of its keys, the ScheduleRun and the step: a resumed run asks it for the steps after the
// checkpoint alone, and every rank must get the same rate.
class MGT_API LearningRateSchedule {
 public:
  virtual ~LearningRateSchedule() = default;
  // Once, before the first rate(): a separate call rather than a constructor argument, since the
  // factory of every plugin kind takes its config section alone (PluginDescriptor::create) and the
  // epoch length is known only once the data is open. Throw mgt::ConfigError naming the key for a
  // value that does not suit the run (a decay longer than the run).
  virtual void setup(const ScheduleRun& run) = 0;
  // The learning rate of the update made at 0-based step `step` (the metrics' step `step + 1`).
  // Must be finite and >= 0: the core stops the run at the first step where it is not, naming the
  // schedule and the step.
  virtual double rate(int64_t step) const = 0;
};

}  // namespace mgt
