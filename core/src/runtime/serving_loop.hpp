#pragma once
// An asynchronous strategy's run (a parameter server): its serving ranks apply the workers'
// pushes in a loop of their own, chosen once at start (serve), while its workers train in the
// training loop; rank 0 checkpoints the servers' state between its steps.
#include <string>

#include "checkpoint/checkpoint.hpp"
#include "mgtrain/serving.hpp"
#include "runtime/trainer.hpp"

namespace mgt {

struct Run;

// Every rank of a serving strategy's run: where it starts (a resumed run's position, the servers'
// parts of the optimizer state) and how often rank 0 checkpoints it.
void start_serving(Run& run);

// A serving rank's whole run: it serves until the workers are done, then hands its part of the
// state to rank 0 and writes its part of the timeline.
TrainResult serve(Run& run);

// A serving run's position as its checkpoints keep it (/sync), checked: every push applied is one
// worker's step, so the steps add up to the updates. `path` names the checkpoint in errors.
ServingPosition serving_position(const SyncState& sync, const std::string& path);

// The checkpoint metadata of an asynchronous run at `at`: its step is the updates per worker,
// its data position that many global batches from the run's start.
CheckpointMeta served_meta(const Run& run, const ServingPosition& at);

// Rank 0 of an asynchronous run, between its steps: a checkpoint of the servers' state once all
// of one moment has come (the others train on meanwhile).
void write_served_checkpoint(Run& run);

}  // namespace mgt
