#pragma once
// The MPI backend of Communicator (host memory), and the process-wide MPI lifetime.
#include <memory>
#include <string>
#include <vector>

#include "mgtrain/communicator.hpp"

namespace mgt {

// Initialises MPI on construction (thread level MULTIPLE) and finalizes it on destruction, unless
// the job is being aborted.
class MpiRuntime {
 public:
  MpiRuntime(int* argc, char*** argv);
  ~MpiRuntime();
  MpiRuntime(const MpiRuntime&) = delete;
  MpiRuntime& operator=(const MpiRuntime&) = delete;
};

std::unique_ptr<Communicator> make_mpi_communicator();
// This process alone, for single-rank reference measurements inside a larger job.
std::unique_ptr<Communicator> make_mpi_self_communicator();

// A barrier over all ranks of the job that sleeps between polls, for ranks that wait while others
// take a measurement: they leave the cores alone. It waits at most `comm`'s deadline
// (comm.timeout_s), then throws CommError saying it was waiting for `waiting_for`.
void sleeping_barrier(const Communicator& comm, const std::string& waiting_for);

// "3", "1, 3", "0-2, 5": ranks in ascending order, runs collapsed, for messages.
std::string rank_list(const std::vector<int>& ranks);

}  // namespace mgt
