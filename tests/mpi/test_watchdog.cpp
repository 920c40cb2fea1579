// A rank that never reaches a blocking collective: its peer's watchdog must end the job at the
// deadline with one line naming the rank, step and operation (checked by watchdog.sh).
#include <unistd.h>

#include "comm/mpi_communicator.hpp"

int main(int argc, char** argv) {
  mgt::MpiRuntime mpi(&argc, &argv);
  auto comm = mgt::make_mpi_communicator();
  comm->set_timeout_seconds(1.0);
  comm->set_step(5);
  if (comm->rank() == 1) sleep(60);  // stuck, not dead
  comm->barrier();
  return 0;
}
