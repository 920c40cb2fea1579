// A SIGBUS while copying out of a file mapping, turned into a return value.
#include "datasets/mapped_copy.hpp"

#include <atomic>
#include <csetjmp>
#include <csignal>
#include <cstring>
#include <mutex>

#include <pthread.h>

namespace mgt::data {

namespace {

struct Guard {
  sigjmp_buf resume;
  const char* begin;
  const char* end;
};

// The copy in progress on this thread; a fault inside its source range jumps back to it.
thread_local Guard* active_guard = nullptr;

std::mutex install_mutex;
struct sigaction previous_action {};

void on_sigbus(int signal, siginfo_t* info, void* context) {
  Guard* const guard = active_guard;
  const char* const at = info ? static_cast<const char*>(info->si_addr) : nullptr;
  if (guard && info && info->si_code > 0 && at >= guard->begin && at < guard->end) siglongjmp(guard->resume, 1);
  if (previous_action.sa_flags & SA_SIGINFO) {
    if (previous_action.sa_sigaction) previous_action.sa_sigaction(signal, info, context);
    return;
  }
  if (previous_action.sa_handler != SIG_DFL && previous_action.sa_handler != SIG_IGN) {
    previous_action.sa_handler(signal);
    return;
  }
  // The default action: delivered once this handler returns and the signal is unblocked.
  struct sigaction fallback {};
  fallback.sa_handler = SIG_DFL;
  sigemptyset(&fallback.sa_mask);
  sigaction(signal, &fallback, nullptr);
  raise(signal);
}

}  // namespace

void prepare_mapped_copies() {
  std::lock_guard lock(install_mutex);
  struct sigaction current {};
  if (sigaction(SIGBUS, nullptr, &current) == 0 && (current.sa_flags & SA_SIGINFO) && current.sa_sigaction == on_sigbus)
    return;
  struct sigaction ours {};
  ours.sa_sigaction = on_sigbus;
  ours.sa_flags = SA_SIGINFO;
  sigemptyset(&ours.sa_mask);
  sigaction(SIGBUS, &ours, &previous_action);
}

bool copy_from_mapping(void* to, const void* from, size_t bytes) {
  Guard guard;
  guard.begin = static_cast<const char*>(from);
  guard.end = guard.begin + bytes;
  // No signal mask saved here (a system call each copy): the jump back unblocks SIGBUS itself.
  if (sigsetjmp(guard.resume, 0) != 0) {
    active_guard = nullptr;
    sigset_t bus;
    sigemptyset(&bus);
    sigaddset(&bus, SIGBUS);
    pthread_sigmask(SIG_UNBLOCK, &bus, nullptr);
    return false;
  }
  active_guard = &guard;
  std::atomic_signal_fence(std::memory_order_seq_cst);
  std::memcpy(to, from, bytes);
  std::atomic_signal_fence(std::memory_order_seq_cst);
  active_guard = nullptr;
  return true;
}

}  // namespace mgt::data
