#pragma once
// The runtime's own callbacks of the training loop, on every training rank (rank 0's reporting
// ones are in observers/): each is what happens at one kind of moment of the run, kept out of the
// loop so that the loop reads as reading and stepping, and each can be tested alone.
#include <memory>

#include "observers/observer.hpp"

namespace mgt {

struct Run;
class TrainingLoop;

// metrics.trace: which steps the timeline records (metrics.trace_steps).
std::unique_ptr<TrainingCallback> make_trace_callback(Run& run);

// train.eval_every_epochs: the model on the test file after every such epoch, every training rank
// evaluating its share and the sums added up, so no rank waits alone. Rank 0 says it and tells
// the loop's other callbacks (on_evaluation). Its time is left out of the interval's rate.
std::unique_ptr<TrainingCallback> make_evaluation_callback(Run& run, TrainingLoop& loop);

// Stop signals (scancel, a time limit): lock-step ranks agree every few steps, so they all stop
// after the same step, and on the signal too (the largest any was sent), so the log names it even
// where rank 0's own copy had not arrived yet (scancel signals each node's tasks separately).
// At the end it says how to continue.
std::unique_ptr<TrainingCallback> make_stop_signal_callback(Run& run);

// checkpoint.every_steps: a lock-step run's checkpoint after every such step (but its last, which
// the run's end writes), gathered from every training rank; an asynchronous run's rank 0 writes
// the servers' state between its steps once a snapshot is complete.
std::unique_ptr<TrainingCallback> make_checkpoint_callback(Run& run, TrainingLoop& loop);

// train.nonfinite: a step whose gradient held NaN or Inf ends the run with a message naming where
// it came from, or (skip) is counted as skipped with a warning. Added after the reporting
// callbacks, so the metrics file records the step before the run ends.
std::unique_ptr<TrainingCallback> make_nonfinite_callback(Run& run);

}  // namespace mgt
