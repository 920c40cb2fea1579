#include "runtime/stop_signal.hpp"

#include <csignal>
#include <initializer_list>

namespace mgt {

namespace {
volatile std::sig_atomic_t requested_signal = 0;

extern "C" void on_stop_signal(int signal) { requested_signal = signal; }
}  // namespace

void install_stop_handlers() {
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  // The handler only sets a flag that the training loop polls, so nothing needs a system call cut
  // short: the libraries' calls (MPI, PMIx, HDF5, oneDNN) resume instead of failing with EINTR.
  action.sa_flags = SA_RESTART;
  sigemptyset(&action.sa_mask);
  for (int signal : {SIGTERM, SIGINT, SIGUSR1}) sigaction(signal, &action, nullptr);
}

bool stop_requested() { return requested_signal != 0; }
int stop_signal() { return requested_signal; }

}  // namespace mgt
