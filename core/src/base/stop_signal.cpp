#include "base/stop_signal.hpp"

#include <pthread.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <mutex>
#include <thread>

namespace mgt {

namespace {

using Clock = std::chrono::steady_clock;

std::atomic<int> requested_signal{0};
std::atomic<bool> accepting{false};
std::once_flag thread_started;

// What end_now_on_a_stop_not_taken left, for the signal thread.
struct NotTaken {
  std::mutex mutex;
  EndNow end_now;                 // empty: no loop steps, or the stop was taken
  double grace_s = 0;             // 0: no limit
  Clock::time_point first_at;     // when the first signal came
  Clock::time_point waited_from;  // the later of that and the loop leaving end_now
  bool ending = false;            // end_now was called
  bool taken = false;             // the loop stepped for the last time
} not_taken;

sigset_t stop_signals() {
  sigset_t set;
  sigemptyset(&set);
  for (int signal : {SIGTERM, SIGINT, SIGUSR1}) sigaddset(&set, signal);
  return set;
}

std::string seconds_text(double s) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", s);
  return text;
}

// Calls end_now where one is left: it ends the process.
void end_now_if_left(int signal, const std::string& why) {
  EndNow end_now;
  {
    std::lock_guard lock(not_taken.mutex);
    if (!not_taken.end_now || not_taken.ending) return;
    not_taken.ending = true;
    end_now = not_taken.end_now;
  }
  end_now(signal, why);
  std::_Exit(128 + signal);  // end_now must not return; if it does, end as the signal would
}

// A stop signal while the first one is pending: a second request, unless it is that one again.
void on_signal_while_pending(int signal) {
  {
    std::lock_guard lock(not_taken.mutex);
    if (!not_taken.end_now || Clock::now() - not_taken.first_at < std::chrono::duration<double>(kRepeatGap)) return;
  }
  end_now_if_left(signal, "a second signal came before it ended");
}

// How long the signal thread waits for the next signal, in seconds (negative: no limit): until a
// pending stop's grace runs out, or a short poll while a stop is pending before a loop has left
// end_now (a stop during start-up has its grace from the loop's start).
double seconds_to_wait() {
  std::lock_guard lock(not_taken.mutex);
  if (requested_signal.load() == 0 || not_taken.taken) return -1;
  if (!not_taken.end_now) return 0.2;
  if (not_taken.grace_s <= 0) return -1;
  const auto deadline = not_taken.waited_from + std::chrono::duration<double>(not_taken.grace_s);
  return std::max(0.0, std::chrono::duration<double>(deadline - Clock::now()).count());
}

// The grace of the pending stop has run out: its text, or "" while it has not.
std::string grace_ran_out() {
  std::lock_guard lock(not_taken.mutex);
  if (!not_taken.end_now || not_taken.grace_s <= 0 || requested_signal.load() == 0 ||
      Clock::now() < not_taken.waited_from + std::chrono::duration<double>(not_taken.grace_s))
    return "";
  return "did not end within train.stop_grace_s = " + seconds_text(not_taken.grace_s) + " s";
}

// The only thread that runs for a stop signal. It computes nothing, so a signal never lands in
// the middle of a kernel.
void take_signals_forever(sigset_t set) {
  for (;;) {
    const double wait_s = seconds_to_wait();
    int signal;
    if (wait_s < 0) {
      signal = sigwaitinfo(&set, nullptr);
    } else {
      timespec wait{};
      wait.tv_sec = static_cast<time_t>(wait_s);
      wait.tv_nsec = static_cast<long>((wait_s - std::floor(wait_s)) * 1e9);
      signal = sigtimedwait(&set, nullptr, &wait);
      if (signal < 0 && errno == EAGAIN) {
        if (const std::string why = grace_ran_out(); !why.empty()) end_now_if_left(requested_signal.load(), why);
        continue;
      }
    }
    if (signal < 0) continue;  // EINTR: another signal's handler ran on this thread
    if (accepting.load(std::memory_order_acquire)) {
      int none = 0;
      if (requested_signal.compare_exchange_strong(none, signal)) {
        std::lock_guard lock(not_taken.mutex);
        not_taken.first_at = not_taken.waited_from = Clock::now();
      } else {
        on_signal_while_pending(signal);
      }
      continue;
    }
    // Not training yet: end as the signal would have ended the process, by its default action.
    end_by_default_action(signal);
  }
}

}  // namespace

void take_stop_signals() {
  std::call_once(thread_started, [] {
    const sigset_t set = stop_signals();
    pthread_sigmask(SIG_BLOCK, &set, nullptr);
    std::thread(take_signals_forever, set).detach();
  });
}

void accept_stop_signals() {
  take_stop_signals();
  accepting.store(true, std::memory_order_release);
}

bool stop_signals_accepted() { return accepting.load(std::memory_order_acquire); }
bool stop_requested() { return requested_signal.load(std::memory_order_relaxed) != 0; }
int stop_signal() { return requested_signal.load(std::memory_order_relaxed); }

void end_now_on_a_stop_not_taken(EndNow end_now, double grace_s) {
  {
    std::lock_guard lock(not_taken.mutex);
    not_taken.end_now = std::move(end_now);
    not_taken.grace_s = grace_s;
    not_taken.taken = false;
    // A stop that came before the loop (during start-up) has its grace from now.
    not_taken.waited_from = Clock::now();
  }
}

void stop_taken() {
  std::unique_lock lock(not_taken.mutex);
  not_taken.end_now = nullptr;
  not_taken.taken = true;
  if (!not_taken.ending) return;
  // end_now runs on the signal thread and ends the process: nothing more is to be done here.
  lock.unlock();
  for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
}

void end_by_default_action(int signal) {
  struct sigaction default_action {};
  default_action.sa_handler = SIG_DFL;
  sigemptyset(&default_action.sa_mask);
  sigaction(signal, &default_action, nullptr);
  sigset_t just_this;
  sigemptyset(&just_this);
  sigaddset(&just_this, signal);
  pthread_sigmask(SIG_UNBLOCK, &just_this, nullptr);
  raise(signal);
  std::_Exit(128 + signal);  // a signal whose default action does not end the process
}

}  // namespace mgt
