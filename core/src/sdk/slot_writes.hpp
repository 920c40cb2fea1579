#pragma once
// How a rank's gradient reaches its shared-memory slot, where the node's other ranks sum their
// parts of it (SharedMemoryAllreduce::reduce_scatter_sum): backward writes it there itself, or
// writes a buffer of the rank's own and the parts the others sum are copied into the slot, with
// ordinary stores or with non-temporal ones; whichever costs less where the rank's core is now.
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
// every kTryEvery steps, since the host moves the cores while the job runs. A kind's cost is the
// median of its last three copies, so that one copy that was preempted does not switch it.
// Where ordinary stores win, backward's own stores into the slot are ordinary stores to the same
// lines: it then writes the slot directly and no copy is made (on that guest, cores together, the
// step 16 to 18 us shorter at the median, 2%), except every kMeasureEvery-th step, when an
// ordinary copy measures again what those stores cost: the cores moving apart then shows within
// two such copies. That step is about 45 us longer than the others (backward writes the rank's own
// buffer, untouched since the last such step, and the copy follows): 5.6 us a step on average.
// Timing ordinary stores into one page of the coming slot every step instead (scaled to a copy's
// size; tried, not kept) priced them at 25 to 150 us where whole copies took 13 to 23, streamed
// more often, and lowered the MLP's np=2 scaling (bench medians 0.80 against 0.85 over 10
// alternating rounds).
#include <algorithm>
#include <array>
#include <cstdint>

namespace mgt {

class SlotWrites {
 public:
  // direct: backward writes the slot (not timed); plain and streamed: a copy of those kinds.
  enum class Kind { direct, plain, streamed };

  static constexpr double kPlainMargin = 2.0;
  static constexpr int64_t kTryEvery = 32;
  static constexpr int64_t kMeasureEvery = 8;

  // The way of the coming step: each copy kind once, first, then direct once (so that every run
  // of three steps or more takes all three ways); then the cheaper copy kind, and every
  // kTryEvery-th step the other one. Where the cheaper is plain, direct in its place but every
  // kMeasureEvery-th step.
  Kind next() {
    const int64_t step = steps_++;
    if (step < 3) return current_ = step == 0 ? Kind::plain : step == 1 ? Kind::streamed : Kind::direct;
    const Kind best = cost(Kind::plain) <= kPlainMargin * cost(Kind::streamed) ? Kind::plain : Kind::streamed;
    if (step % kTryEvery == 0) return current_ = best == Kind::plain ? Kind::streamed : Kind::plain;
    if (best == Kind::plain && step % kMeasureEvery != 0) return current_ = Kind::direct;
    return current_ = best;
  }

  // What the copy of next()'s kind took (not called for direct).
  void took(double seconds) {
    if (current_ == Kind::direct) return;
    auto& last = last_[index(current_)];
    last[filled_[index(current_)]++ % last.size()] = seconds;
  }

  // The median of the copy kind's last three copies (the larger of two, where it has had two).
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
  static size_t index(Kind kind) { return kind == Kind::streamed ? 1 : 0; }

  Kind current_ = Kind::plain;
  int64_t steps_ = 0;
  std::array<std::array<double, 3>, 2> last_{};  // per copy kind, a ring of its last copies' seconds
  std::array<int64_t, 2> filled_{};              // per copy kind, copies recorded
};

}  // namespace mgt
