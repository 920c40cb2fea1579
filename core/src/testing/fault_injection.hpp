#pragma once
// Test-only fault injection: failures, a slow rank and NaN gradients on demand. Compiled only into
// test builds (MGTRAIN_BUILD_TESTS=ON defines MGTRAIN_TEST_HOOKS); elsewhere every hook is an
// inline no-op and no variable below is read.
// MGTRAIN_FAULT="RANK:STEP:PHASE:ACTION" makes rank RANK, at global step STEP (1-based), in
// PHASE, do ACTION, so that tests can show every kind of failure ends the job cleanly, names the
// rank, and loses no checkpoint.
//   PHASE:  forward, backward, allreduce, optimizer, checkpoint-before-data,
//           checkpoint-after-data, checkpoint-before-rename
//   ACTION: kill (SIGKILL itself), exit (exit code 1, no message), throw (an exception the
//           launcher reports), hang (sleep for an hour, as a rank stuck in I/O would)
// Ranks that do not write the checkpoint meet the checkpoint phases where they wait for it.
// MGTRAIN_FAULT_ONCE=FILE fires it once across restarts of the job (FILE marks that it fired).
#include <cstdint>
#include <memory>

#include "observers/observer.hpp"

namespace mgt::fault {

enum class Phase {
  forward,
  backward,
  allreduce,
  optimizer,
  checkpoint_before_data,
  checkpoint_after_data,
  checkpoint_before_rename,
};

#ifdef MGTRAIN_TEST_HOOKS

// Reads MGTRAIN_FAULT for this rank; throws ConfigError naming the variable when it is malformed.
void configure(int rank);

// MGTRAIN_TEST_SLOW_RANK="R:MS": rank R sleeps MS milliseconds at the start of every step, inside
// the step's time, to measure how a strategy copes with one slow rank. The training loop's
// callback for it; null where this rank is not the slow one.
std::unique_ptr<TrainingCallback> make_slowdown_callback(int rank);
// MGTRAIN_TEST_NAN_AT="R:S": rank R's first input sample is NaN at step S (1-based), to exercise
// train.nonfinite. Returns this rank's S, 0 for none.
int64_t nan_step(int rank);
// MGTRAIN_TEST_STEP_IN_DEVICE_MEMORY=1: a CPU rank runs its step as a GPU rank does, on copies in
// the backend's memory with the step's own executor and the batch staged, so that the GPU path's
// program is tested on machines without a GPU.
bool step_in_device_memory();

namespace detail {
extern bool armed;
void fire(Phase phase, int64_t step);
}  // namespace detail

// Does the configured action when (phase, step) is the configured one on this rank.
inline void at(Phase phase, int64_t step) {
  if (detail::armed) detail::fire(phase, step);
}

#else

// A build without tests: no faults, no slow rank, no NaN.
inline void configure(int) {}
inline int64_t nan_step(int) { return 0; }
inline bool step_in_device_memory() { return false; }
inline void at(Phase, int64_t) {}

#endif

}  // namespace mgt::fault
