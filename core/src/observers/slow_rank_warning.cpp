// The slow-rank warning: the whole job runs at its slowest rank's pace, so rank 0 names a rank
// whose step time stands far above the others' (a slow node, a busy core or GPU).
#include <algorithm>
#include <cstdio>
#include <ostream>

#include "observers/observer.hpp"

namespace mgt {

namespace {

// Warns at each interval where the slowest rank takes over 1.5x the median step time and more
// than a millisecond longer.
class SlowRankWarning final : public TrainingCallback {
 public:
  explicit SlowRankWarning(std::ostream& out) : out_(out) {}

  void on_interval(const IntervalFigures& f) override {
    const std::vector<double>& step_ms = f.rank_step_ms;
    if (step_ms.size() < 2) return;
    std::vector<double> sorted = step_ms;
    std::sort(sorted.begin(), sorted.end());
    const double median = sorted[(sorted.size() - 1) / 2];  // the lower one for an even count
    const auto slowest = std::max_element(step_ms.begin(), step_ms.end());
    if (*slowest > 1.5 * median && *slowest - median > 1.0) {
      char line[256];
      std::snprintf(line, sizeof(line),
                    "warning: rank %d's step time %.1f ms is %.1fx the median %.1f ms; the job runs at "
                    "its pace\n",
                    static_cast<int>(slowest - step_ms.begin()), *slowest, *slowest / median, median);
      out_ << line << std::flush;
    }
  }

 private:
  std::ostream& out_;
};

}  // namespace

std::unique_ptr<TrainingCallback> make_slow_rank_warning(std::ostream& out) {
  return std::make_unique<SlowRankWarning>(out);
}

}  // namespace mgt
