#pragma once
// How a rank's gradient reaches its shared-memory slot, where the node's other ranks sum their
// parts of it (SharedMemoryAllreduce::reduce_scatter_sum): backward writes it there itself, or
// writes a buffer of the rank's own and the parts the others sum are copied into the slot, with
// ordinary stores or with non-temporal ones; whichever costs less where the rank's core is now.
//
// Ordinary stores leave the lines in this core's caches, where a core of the same core complex
// reads them fastest; but a store to a line another core complex still holds waits for that copy's
// invalidation. Non-temporal stores never wait, and the others then read from memory. Which wins
// depends on where the host has put the cores, which changes while the job runs. So each rank
// times its own copies and stores ordinarily while that costs at most kPlainMargin times the
// streamed copy (the margin is what the others' sums gain), tries the other kind every kTryEvery
// steps, and takes a kind's cost as the median of its last three copies (one preempted copy does
// not switch it). Where ordinary stores win, backward writes the slot directly and no copy is
// made, except every kMeasureEvery-th step, when an ordinary copy measures them again. The
// figures behind these choices: docs/benchmarks.md, "Shared memory between cores".
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
