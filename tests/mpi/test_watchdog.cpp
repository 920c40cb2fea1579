// Ranks that never reach a blocking collective: the watchdog must end the job at the deadline
// with one line naming the rank, step and operation (checked by watchdog.sh).
//   (no argument)  np=2: rank 1 sleeps, rank 0 waits in a barrier.
//   roll_call      np=3: rank 2 sleeps; rank 0 waits in the world's barrier, rank 1 in the
//                  barrier of a part of the same ranks (another communicator), and both get
//                  SIGTERM after 3 s: each must hear the other in the roll call and name rank 2.
#include <signal.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <thread>

#include "base/stop_signal.hpp"
#include "comm/mpi_communicator.hpp"

int main(int argc, char** argv) {
  mgt::take_stop_signals();  // before MPI starts its threads, as the launcher does
  mgt::MpiRuntime mpi(&argc, &argv);
  const bool roll_call = argc > 1 && std::strcmp(argv[1], "roll_call") == 0;
  auto comm = mgt::make_mpi_communicator();
  if (!roll_call) {
    comm->set_timeout_seconds(1.0);
    comm->set_step(5);
    if (comm->rank() == 1) sleep(60);  // stuck, not dead
    comm->barrier();
    return 0;
  }
  mgt::accept_stop_signals();
  comm->set_timeout_seconds(8.0);
  comm->set_step(5);
  std::unique_ptr<mgt::Communicator> part = comm->split(0, comm->rank());
  part->set_step(5);
  if (comm->rank() == 2) sleep(60);
  std::thread([] {
    sleep(3);
    kill(getpid(), SIGTERM);
  }).detach();
  if (comm->rank() == 0)
    comm->barrier();
  else
    part->barrier();
  return 0;
}
