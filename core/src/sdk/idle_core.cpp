#include "mgtrain/idle_core.hpp"

#include <atomic>
#include <condition_variable>
#include <mutex>

namespace mgt {

namespace {

struct Shared {
  std::mutex m;
  std::condition_variable worker_cv, lender_cv;
  const void* owner = nullptr;
  // The worker has work: it calls may_run() or rest() next. Written under the mutex; read without
  // it by lend_until, so that a barrier's wait costs one load while the worker has nothing to do.
  std::atomic<bool> busy{false};
  bool lent = false;      // the core is the worker's until done(arg)
  bool stopping = false;  // may_run() returns false until the worker detaches
  IdleCore::Done done = nullptr;
  const void* arg = nullptr;
};

Shared& shared() {
  static Shared s;
  return s;
}

thread_local bool is_worker = false;

// Under the mutex.
void give_back(Shared& s) {
  if (!s.lent) return;
  s.lent = false;
  s.lender_cv.notify_all();
}

void lend(Shared& s, std::unique_lock<std::mutex>& lock, IdleCore::Done done, const void* arg) {
  s.lent = true;
  s.done = done;
  s.arg = arg;
  s.worker_cv.notify_all();
  s.lender_cv.wait(lock, [&] { return !s.lent; });
}

}  // namespace

void IdleCore::lend_until(Done done, const void* arg) {
  Shared& s = shared();
  if (is_worker || !s.busy.load(std::memory_order_acquire)) return;
  std::unique_lock lock(s.m);
  if (!s.owner || !s.busy || s.lent || s.stopping || done(arg)) return;
  lend(s, lock, done, arg);
}

void IdleCore::wait_for_worker(const void* owner, Done done, const void* arg) {
  Shared& s = shared();
  std::unique_lock lock(s.m);
  if (is_worker || s.owner != owner || s.lent || s.stopping || done(arg)) return;
  lend(s, lock, done, arg);
}

bool IdleCore::claim(const void* owner) {
  Shared& s = shared();
  std::lock_guard lock(s.m);
  if (s.owner && s.owner != owner) return false;
  s.owner = owner;
  return true;
}

void IdleCore::release(const void* owner) {
  Shared& s = shared();
  std::lock_guard lock(s.m);
  if (s.owner != owner) return;
  give_back(s);
  s.owner = nullptr;
  s.busy = false;
  s.stopping = false;
}

void IdleCore::stop_worker(const void* owner) {
  Shared& s = shared();
  std::lock_guard lock(s.m);
  if (s.owner != owner) return;
  s.stopping = true;
  give_back(s);
  s.worker_cv.notify_all();
}

void IdleCore::attach(const void* owner) {
  Shared& s = shared();
  std::lock_guard lock(s.m);
  if (s.owner != owner) return;
  // A stop before the thread got here was for the one before it: the owner checks its own flag
  // before giving this one work.
  s.stopping = false;
  is_worker = true;
}

void IdleCore::detach() {
  if (!is_worker) return;
  Shared& s = shared();
  std::lock_guard lock(s.m);
  give_back(s);
  s.busy = false;
  s.stopping = false;
  is_worker = false;
}

bool IdleCore::may_run() {
  if (!is_worker) return true;
  Shared& s = shared();
  std::unique_lock lock(s.m);
  s.busy = true;
  for (;;) {
    if (s.stopping) return false;
    if (s.lent) {
      if (!s.done(s.arg)) return true;
      give_back(s);
    }
    s.worker_cv.wait(lock);
  }
}

void IdleCore::rest() {
  if (!is_worker) return;
  Shared& s = shared();
  std::lock_guard lock(s.m);
  s.busy = false;
  give_back(s);
}

}  // namespace mgt
