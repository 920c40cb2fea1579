#pragma once
// model.init_from: a new run starts from another run's parameters (fine-tuning). Rank 0 reads the
// checkpoint, copies every parameter and buffer whose name and shape match into the store (the
// others keep their values from the seed), says which were loaded, which are new and which were
// left out, and every rank receives the result. Optimizer state, step, data position and schedule
// start fresh. --resume wins: a resumed run has its own parameters.
namespace mgt {

struct Run;

// Before prepare_run (which hands the parameters to a GPU's step). Collective; every failure is
// agreed by all ranks before step 1. Does nothing without model.init_from.
void initialize_from_checkpoint(Run& run);

}  // namespace mgt
