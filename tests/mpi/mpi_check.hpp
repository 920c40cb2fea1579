#pragma once
// A tiny check-and-count for the MPI test programs: each rank records failures, and the job's
// verdict is the maximum over ranks, printed by rank 0 as "N passed, M failed".
#include <cstdio>
#include <string>

#include "mgtrain/communicator.hpp"

namespace mpi_check {

inline int failures = 0, passes = 0;

inline void check(bool ok, const std::string& what, int rank) {
  if (ok) {
    ++passes;
  } else {
    ++failures;
    std::fprintf(stderr, "[rank %d] FAILED: %s\n", rank, what.c_str());
  }
}

// Returns the process exit code: 0 when no rank failed.
inline int verdict(mgt::Communicator& comm) {
  int64_t failed = failures;
  comm.allreduce_max(&failed, 1);
  if (comm.rank() == 0) std::printf("%d passed, %lld failed\n", passes, static_cast<long long>(failed));
  return failed == 0 ? 0 : 1;
}

}  // namespace mpi_check
