#pragma once
// How a rank copies into its shared-memory slot the parts of its gradient that the node's other
// ranks sum (SharedMemoryAllreduce::reduce_scatter_sum): with ordinary stores or with
// non-temporal ones, whichever costs less where the rank's core is now.
//
// Ordinary stores leave the lines in this core's caches, where a core of the same core complex
// reads them fastest (through the L3 they share). But a store to a line that another core complex
// still holds waits for that copy's invalidation, one line at a time, and the others read the
// slots every step. Non-temporal stores go past the caches and never wait; the others then read
// the lines from memory. On a 2-core AMD EPYC KVM guest whose host moves the two virtual CPUs
// between core complexes (MLP, 470 KB a copy, the slots double-buffered so that a line is written
// two steps after the other core read it; timers added for the measurement, not kept): with the
// cores together, ordinary stores 16-20 us and the other rank's sum 22-32 us, against 20-23 and
// 40-60 streamed; apart, ordinary stores 70-195 us, streamed 20-23.
//
// So each rank times its own copies and stores ordinarily while that costs at most kPlainMargin
// times the streamed copy (the margin is what the others' sums gain), and tries the other kind
// every kTryEvery copies, since the host moves the cores while the job runs. A kind's cost is the
// median of its last three copies, so that one copy that was preempted does not switch it.
#include <algorithm>
#include <array>
#include <cstdint>

namespace mgt {

class SlotWrites {
 public:
  enum class Kind { plain, streamed };

  static constexpr double kPlainMargin = 2.0;
  static constexpr int64_t kTryEvery = 32;

  // The kind of the coming copy: each kind once, first; then the cheaper, and every kTryEvery-th
  // copy the other one.
  Kind next() {
    const int64_t copies = filled_[0] + filled_[1];
    if (copies < 2) return current_ = copies == 0 ? Kind::plain : Kind::streamed;
    const Kind best = cost(Kind::plain) <= kPlainMargin * cost(Kind::streamed) ? Kind::plain : Kind::streamed;
    const bool trying = copies % kTryEvery == 0;
    return current_ = trying ? other(best) : best;
  }

  // What the copy of next()'s kind took.
  void took(double seconds) {
    auto& last = last_[index(current_)];
    last[filled_[index(current_)]++ % last.size()] = seconds;
  }

  // The median of the kind's last three copies (the larger of two, where it has had two).
  double cost(Kind kind) const {
    const auto& [a, b, c] = last_[index(kind)];
    switch (std::min<int64_t>(filled_[index(kind)], 3)) {
      case 0:
        return 0;
      case 1:
        return a;
      case 2:
        return std::max(a, b);
      default:
        return std::max(std::min(a, b), std::min(std::max(a, b), c));
    }
  }

 private:
  static size_t index(Kind kind) { return kind == Kind::plain ? 0 : 1; }
  static Kind other(Kind kind) { return kind == Kind::plain ? Kind::streamed : Kind::plain; }

  Kind current_ = Kind::plain;
  std::array<std::array<double, 3>, 2> last_{};  // per kind, a ring of its last copies' seconds
  std::array<int64_t, 2> filled_{};              // per kind, copies recorded
};

}  // namespace mgt
