#pragma once
// Resume (--resume): rank 0 reads the checkpoint (or, with checkpoint.resume_fallback, the newest
// one that loads), checks its position against the data, and every rank receives the parameters,
// buffers, optimizer state and the sync strategy's own state from it.
namespace mgt {

struct Run;

// Moves the run to the checkpoint's position. Collective; every failure is agreed by all ranks.
void resume(Run& run);

}  // namespace mgt
