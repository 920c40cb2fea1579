#include "base/stop_signal.hpp"

#include <pthread.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <mutex>
#include <thread>

namespace mgt {

namespace {

std::atomic<int> requested_signal{0};
std::atomic<bool> accepting{false};
std::once_flag taken;

sigset_t stop_signals() {
  sigset_t set;
  sigemptyset(&set);
  for (int signal : {SIGTERM, SIGINT, SIGUSR1}) sigaddset(&set, signal);
  return set;
}

// The only thread that runs for a stop signal. It computes nothing, so a signal never lands in
// the middle of a kernel.
void take_signals_forever(sigset_t set) {
  for (;;) {
    const int signal = sigwaitinfo(&set, nullptr);
    if (signal < 0) continue;  // EINTR: another signal's handler ran on this thread
    if (accepting.load(std::memory_order_acquire)) {
      int none = 0;
      requested_signal.compare_exchange_strong(none, signal);
      continue;
    }
    // Not training yet: end as the signal would have ended the process, by its default action.
    struct sigaction default_action {};
    default_action.sa_handler = SIG_DFL;
    sigemptyset(&default_action.sa_mask);
    sigaction(signal, &default_action, nullptr);
    sigset_t just_this;
    sigemptyset(&just_this);
    sigaddset(&just_this, signal);
    pthread_sigmask(SIG_UNBLOCK, &just_this, nullptr);
    raise(signal);
  }
}

}  // namespace

void take_stop_signals() {
  std::call_once(taken, [] {
    const sigset_t set = stop_signals();
    pthread_sigmask(SIG_BLOCK, &set, nullptr);
    std::thread(take_signals_forever, set).detach();
  });
}

void accept_stop_signals() {
  take_stop_signals();
  accepting.store(true, std::memory_order_release);
}

bool stop_requested() { return requested_signal.load(std::memory_order_relaxed) != 0; }
int stop_signal() { return requested_signal.load(std::memory_order_relaxed); }

}  // namespace mgt
