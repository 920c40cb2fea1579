#pragma once
// Rank 0's progress output. On a terminal: a live bar per epoch (steps, ETA, loss, samples/s)
// redrawn a few times a second. Elsewhere (batch logs): plain lines every train.log_every steps.
#include <chrono>
#include <cstdint>
#include <iosfwd>
#include <string>

namespace mgt {

class ProgressDisplay {
 public:
  // mode: "auto" (a bar when stdout is a terminal), "bar" or "lines". Throws ConfigError otherwise.
  ProgressDisplay(std::ostream& out, const std::string& mode, int64_t epochs, int64_t steps_per_epoch,
                  int64_t first_step, int64_t total_steps);
  // After every step; redraws the bar at most five times a second.
  void step(int64_t step, int64_t epoch);
  // At each logging interval, with the figures agreed over the ranks.
  void interval(int64_t step, int64_t epoch, double loss, double samples_per_s, double data_wait_share);
  void finish();

 private:
  using Clock = std::chrono::steady_clock;
  void draw(int64_t step, int64_t epoch);
  std::ostream& out_;
  bool bar_ = false;
  int64_t epochs_, per_epoch_, first_step_, total_;
  double loss_ = 0, rate_ = 0;
  bool has_loss_ = false, line_open_ = false;
  Clock::time_point start_ = Clock::now(), last_draw_{};
};

}  // namespace mgt
