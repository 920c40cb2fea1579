#include "base/idle_core.hpp"

#include <atomic>
#include <boost/context/fiber.hpp>
#include <boost/context/protected_fixedsize_stack.hpp>
#include <cstddef>
#include <memory>
#include <mutex>
#include <new>
#include <string>

#include "mgtrain/error.hpp"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

namespace ctx = boost::context;

namespace mgt {

namespace {

// AddressSanitizer follows one stack per thread: it is told of each switch to another.
void sanitizer_start_switch(void** fake_stack, const void* bottom, size_t size) {
#if defined(__SANITIZE_ADDRESS__)
  __sanitizer_start_switch_fiber(fake_stack, bottom, size);
#else
  (void)fake_stack, (void)bottom, (void)size;
#endif
}
void sanitizer_finish_switch(void* fake_stack, const void** bottom, size_t* size) {
#if defined(__SANITIZE_ADDRESS__)
  __sanitizer_finish_switch_fiber(fake_stack, bottom, size);
#else
  (void)fake_stack, (void)bottom, (void)size;
#endif
}

// The worker's stack: the reader's reads (HDF5 among them) run on it. Boost.Context's protected
// stack has a guard page below, so that an overflow faults instead of writing over other memory.
constexpr size_t kStackBytes = size_t{1} << 20;

struct Shared {
  std::mutex m;                         // the claim, which any thread may ask for
  const void* owner = nullptr;          // under m
  std::atomic<bool> has_worker{false};  // a worker was started and has not finished
  // The worker has work (it did not rest since the last wake): one load for a barrier's poll.
  std::atomic<bool> busy{false};

  // The rest is the step thread's alone (the worker runs on it).
  void (*work)(void*) = nullptr;
  void* work_arg = nullptr;
  ctx::fiber worker;      // the worker, suspended, while the step runs; empty once it ended
  ctx::fiber step;        // the step, suspended, while the worker runs
  bool finished = false;  // work returned; its stack is gone
  bool stopping = false;
  bool lending = false;  // a lend is under way: may_run() returns while done(arg) does not hold
  IdleCore::Done done = nullptr;
  const void* arg = nullptr;
  // For AddressSanitizer: the worker's stack, and the step's as the switch to the worker saw it.
  const char* worker_stack_bottom = nullptr;
  size_t worker_stack_size = 0;
  void* step_fake_stack = nullptr;
  void* worker_fake_stack = nullptr;
  const void* step_stack_bottom = nullptr;
  size_t step_stack_size = 0;
};

// Never destroyed: a worker still suspended at exit (a rank ending on an error) is left as it is,
// where destroying its fiber would unwind the reader's frames during static destruction.
Shared& shared() {
  static Shared& s = *new Shared;
  return s;
}

thread_local bool is_step_thread = false;  // the thread that started the worker
thread_local bool in_worker = false;       // on the step's thread: the worker is running now

// Boost.Context's guarded stack, whose place the switches tell AddressSanitizer.
struct WorkerStack {
  ctx::protected_fixedsize_stack stack{kStackBytes};

  ctx::stack_context allocate() {
    ctx::stack_context context = stack.allocate();
    Shared& s = shared();
    s.worker_stack_size = context.size;
    s.worker_stack_bottom = static_cast<const char*>(context.sp) - context.size;
#if defined(__SANITIZE_ADDRESS__)
    // The range may have held an earlier worker's stack, whose frames' red zones are still marked.
    __asan_unpoison_memory_region(s.worker_stack_bottom, context.size);
#endif
    return context;
  }
  void deallocate(ctx::stack_context& context) noexcept { stack.deallocate(context); }
};

// The worker's fiber: the first switch to it starts here, with the step to switch back to.
ctx::fiber worker_main(ctx::fiber&& step) {
  Shared& s = shared();
  s.step = std::move(step);
  sanitizer_finish_switch(nullptr, &s.step_stack_bottom, &s.step_stack_size);
  s.work(s.work_arg);  // noexcept by contract: an exception out of here ends the process
  s.finished = true;
  in_worker = false;
  sanitizer_start_switch(nullptr, s.step_stack_bottom, s.step_stack_size);  // this stack ends
  return std::move(s.step);
}

// From the step: runs the worker until it pauses (or ends, when its stack goes with it).
void resume(Shared& s) {
  in_worker = true;
  sanitizer_start_switch(&s.step_fake_stack, s.worker_stack_bottom, s.worker_stack_size);
  s.worker = std::move(s.worker).resume();
  sanitizer_finish_switch(s.step_fake_stack, nullptr, nullptr);
  in_worker = false;
  if (s.finished) {
    s.has_worker = false;
    s.busy = false;
  }
}

// From the worker: back to the step, until it resumes the worker.
void pause_worker(Shared& s) {
  in_worker = false;
  sanitizer_start_switch(&s.worker_fake_stack, s.step_stack_bottom, s.step_stack_size);
  s.step = std::move(s.step).resume();
  sanitizer_finish_switch(s.worker_fake_stack, &s.step_stack_bottom, &s.step_stack_size);
  in_worker = true;
}

// Whether the calling thread may run the worker now.
bool can_lend(const Shared& s) { return is_step_thread && !in_worker && s.worker && !s.finished; }

void lend(Shared& s, IdleCore::Done done, const void* arg) {
  s.lending = true;
  s.done = done;
  s.arg = arg;
  resume(s);
  s.lending = false;
}

}  // namespace

void IdleCore::lend_until(Done done, const void* arg) {
  Shared& s = shared();
  if (!s.busy.load(std::memory_order_acquire) || !can_lend(s) || s.stopping || done(arg)) return;
  lend(s, done, arg);
}

void IdleCore::wait_for_worker(const void* owner, Done done, const void* arg) {
  Shared& s = shared();
  {
    std::lock_guard lock(s.m);
    if (s.owner != owner) return;
  }
  // A worker that rested without what the owner waits for is woken: the owner knows it owes it.
  while (can_lend(s) && !s.stopping && !done(arg)) {
    s.busy = true;
    lend(s, done, arg);
  }
}

bool IdleCore::claim(const void* owner) {
  Shared& s = shared();
  std::lock_guard lock(s.m);
  if (s.owner && s.owner != owner) return false;
  s.owner = owner;
  return true;
}

void IdleCore::release(const void* owner) {
  stop_worker(owner);  // where the owner did not (and this is the step's thread)
  Shared& s = shared();
  std::lock_guard lock(s.m);
  if (s.owner == owner) s.owner = nullptr;
}

bool IdleCore::start_worker(const void* owner, void (*work)(void*), void* arg) {
  Shared& s = shared();
  {
    std::lock_guard lock(s.m);
    if (s.owner != owner || s.has_worker) return false;
  }
  s.work = work;
  s.work_arg = arg;
  s.finished = s.stopping = s.lending = false;
  try {
    s.worker = ctx::fiber(std::allocator_arg, WorkerStack{}, worker_main);
  } catch (const std::bad_alloc&) {
    throw Error("could not map " + std::to_string(kStackBytes) + " bytes for the data reader's stack");
  }
  is_step_thread = true;
  s.busy = true;
  s.has_worker = true;
  return true;
}

void IdleCore::stop_worker(const void* owner) {
  Shared& s = shared();
  {
    std::lock_guard lock(s.m);
    if (s.owner != owner) return;
  }
  if (!is_step_thread) return;
  s.stopping = true;
  while (can_lend(s)) resume(s);
  s.stopping = false;
  is_step_thread = false;
}

void IdleCore::wake(const void* owner) {
  Shared& s = shared();
  if (s.has_worker.load(std::memory_order_acquire) && is_step_thread) {
    std::lock_guard lock(s.m);
    if (s.owner == owner) s.busy = true;
  }
}

bool IdleCore::may_run() {
  Shared& s = shared();
  if (!in_worker) return true;
  for (;;) {
    if (s.stopping) return false;
    if (s.lending && !s.done(s.arg)) return true;
    pause_worker(s);
  }
}

void IdleCore::rest() {
  Shared& s = shared();
  if (!in_worker) return;
  s.busy = false;
  pause_worker(s);
}

}  // namespace mgt
