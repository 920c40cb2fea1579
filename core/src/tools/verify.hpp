#pragma once
// `mgtrain verify`: a short self-check of the reproducibility guarantees on the user's own config.
#include <cstdint>
#include <iosfwd>

#include "runtime/trainer.hpp"

namespace mgt {

// Trains `steps` steps straight, and steps/2 + stop + resume + steps/2, on all ranks; with
// other_world > 0 also `steps` straight on the first other_world ranks. Rank 0 prints each run's
// parameter hash (SHA-256) and PASS or FAIL; returns true on PASS (on every rank).
bool run_verify(Communicator& world, const TrainOptions& options, int64_t steps, int other_world, std::ostream& out);

}  // namespace mgt
