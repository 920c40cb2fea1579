#pragma once
// Collectives on a backend's (device) memory through host memory and the host communicator, for
// ranks that share a GPU (gpu.allow_shared), where NCCL refuses to run. Each operation waits for
// the backend's work, copies the buffer to the host, runs the host collective and copies the
// result back: slower than NCCL, and blocking, so a step that uses it is not recorded as a graph.
#include <memory>

#include "kernels/backend.hpp"
#include "mgtrain/communicator.hpp"

namespace mgt {

// Over the ranks of `host`, which must outlive it, as must `backend`.
std::unique_ptr<Communicator> make_staged_communicator(Communicator& host, kernels::Backend& backend);

}  // namespace mgt
