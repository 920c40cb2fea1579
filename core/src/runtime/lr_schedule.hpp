#pragma once
// The run's learning-rate schedule (train.lr_schedule): the built-in constant and cosine, or a
// schedule plugin (mgtrain/schedule.hpp) of any other name, asked for every step's rate. Built-in
// schedules are not plugins so that a run that names none loads, records and lists the same
// plugins as before, and keeps running where no plugin directory is found.
#include <cstdint>
#include <memory>
#include <string>

#include "loader/plugin_loader.hpp"
#include "mgtrain/config.hpp"
#include "mgtrain/schedule.hpp"

namespace mgt {

// "constant" or "cosine": the schedules the core has itself; any other name is a plugin's.
bool is_builtin_schedule(const std::string& name);

// The built-in schedule `name`, not set up. Both rise linearly from base_rate / warmup_steps to
// base_rate over the warm-up steps; then constant stays there and cosine decays to 0 at run_steps
// (the last step of train.epochs, or train.max_steps where that is sooner: a run stopped by a
// signal or `verify` and resumed with the same keys follows the same curve). Throws ConfigError
// for another name.
std::unique_ptr<LearningRateSchedule> make_builtin_schedule(const std::string& name);

class RunSchedule {
 public:
  // train.lr_schedule's schedule: built in, or created from the plugin of that name in `registry`
  // (already loaded and its keys validated), set up with `run`.
  RunSchedule(PluginRegistry& registry, const Config& config, const ScheduleRun& run);
  // The rate of the update made at 0-based step `step`. Throws Error naming the schedule and the
  // step when the schedule gives a rate that is not finite or is negative: the optimizer would
  // otherwise ruin every parameter without a word.
  double at(int64_t step) const;
  const std::string& name() const { return name_; }

 private:
  std::string name_;
  std::unique_ptr<LearningRateSchedule> schedule_;
};

}  // namespace mgt
