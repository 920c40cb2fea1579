#include "mgtrain/idle_core.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

#include "mgtrain/error.hpp"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

// Switches stacks: saves the callee-saved registers and the SSE and x87 control words on this
// stack, stores its pointer in *from, and resumes the context whose stack pointer is `to`. What
// Boost.Context's fcontext does; not ucontext's swapcontext, which makes a system call per switch
// (the signal mask) and which AddressSanitizer warns about on every run.
#if defined(__x86_64__)
extern "C" void mgt_switch_stack(void** from, void* to);
asm(R"(
  .pushsection .text
  .globl mgt_switch_stack
  .hidden mgt_switch_stack
  .type mgt_switch_stack, @function
  .p2align 4
mgt_switch_stack:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $16, %rsp
  stmxcsr 8(%rsp)
  fnstcw 12(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr 8(%rsp)
  fldcw 12(%rsp)
  addq $16, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size mgt_switch_stack, .-mgt_switch_stack
  .popsection
)");
#define MGT_FIBERS 1
#else
// Elsewhere start_worker() refuses, and the owner's worker is a thread of its own.
extern "C" inline void mgt_switch_stack(void**, void*) { std::abort(); }
#endif

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

// The worker's stack: the reader's reads (HDF5 among them) run on it. A guard page below, so that
// an overflow faults instead of writing over other memory.
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
  void* step_sp = nullptr;    // the step's stack pointer while the worker runs
  void* worker_sp = nullptr;  // the worker's while the step runs
  char* mapping = nullptr;    // the guard page, then the stack
  bool finished = false;      // work returned; its stack can go
  bool stopping = false;
  bool lending = false;  // a lend is under way: may_run() returns while done(arg) does not hold
  IdleCore::Done done = nullptr;
  const void* arg = nullptr;
  void* step_fake_stack = nullptr;
  void* worker_fake_stack = nullptr;
  const void* step_stack_bottom = nullptr;
  size_t step_stack_size = 0;

  char* stack() const { return mapping + page_bytes(); }
  static size_t page_bytes() { return static_cast<size_t>(sysconf(_SC_PAGESIZE)); }
};

Shared& shared() {
  static Shared s;
  return s;
}

thread_local bool is_step_thread = false;  // the thread that started the worker
thread_local bool in_worker = false;       // on the step's thread: the worker is running now

// Where a new worker's stack starts: the first switch to it returns here.
[[noreturn]] void worker_entry() {
  Shared& s = shared();
  sanitizer_finish_switch(nullptr, &s.step_stack_bottom, &s.step_stack_size);
  s.work(s.work_arg);  // noexcept by contract: an exception out of here ends the process
  s.finished = true;
  in_worker = false;
  sanitizer_start_switch(nullptr, s.step_stack_bottom, s.step_stack_size);  // this stack ends
  void* unused = nullptr;
  mgt_switch_stack(&unused, s.step_sp);
  __builtin_unreachable();
}

// A new stack, laid out as mgt_switch_stack leaves one: the control words, six registers (zero)
// and the address it returns to, worker_entry, where the stack pointer is then 8 past a multiple
// of 16, as at any function's entry; a zero return address above it ends backtraces.
void* first_frame(char* stack, size_t bytes) {
  auto top = reinterpret_cast<uintptr_t>(stack + bytes) & ~uintptr_t{15};
  auto* slot = reinterpret_cast<uint64_t*>(top);
  *--slot = 0;                                          // worker_entry's return address: none
  *--slot = reinterpret_cast<uint64_t>(&worker_entry);  // where mgt_switch_stack returns
  for (int i = 0; i < 6; ++i) *--slot = 0;              // rbp, rbx, r12-r15
  slot -= 2;                                            // the control words, as this thread's
#if defined(MGT_FIBERS)
  uint32_t mxcsr = 0;
  uint16_t fpu_control = 0;
  asm volatile("stmxcsr %0" : "=m"(mxcsr));
  asm volatile("fnstcw %0" : "=m"(fpu_control));
  std::memcpy(reinterpret_cast<char*>(slot) + 8, &mxcsr, sizeof mxcsr);
  std::memcpy(reinterpret_cast<char*>(slot) + 12, &fpu_control, sizeof fpu_control);
#endif
  return slot;
}

// From the step: runs the worker until it pauses (or ends).
void resume(Shared& s) {
  in_worker = true;
  sanitizer_start_switch(&s.step_fake_stack, s.stack(), kStackBytes);
  mgt_switch_stack(&s.step_sp, s.worker_sp);
  sanitizer_finish_switch(s.step_fake_stack, nullptr, nullptr);
  in_worker = false;
  if (s.finished && s.mapping) {
    munmap(s.mapping, Shared::page_bytes() + kStackBytes);
    s.mapping = nullptr;
    s.has_worker = false;
    s.busy = false;
  }
}

// From the worker: back to the step, until it resumes the worker.
void pause_worker(Shared& s) {
  in_worker = false;
  sanitizer_start_switch(&s.worker_fake_stack, s.step_stack_bottom, s.step_stack_size);
  mgt_switch_stack(&s.worker_sp, s.step_sp);
  sanitizer_finish_switch(s.worker_fake_stack, &s.step_stack_bottom, &s.step_stack_size);
  in_worker = true;
}

// Whether the calling thread may run the worker now.
bool can_lend(const Shared& s) { return is_step_thread && !in_worker && s.mapping && !s.finished; }

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
#if !defined(MGT_FIBERS)
  return false;
#endif
  {
    std::lock_guard lock(s.m);
    if (s.owner != owner || s.has_worker) return false;
  }
  const size_t bytes = Shared::page_bytes() + kStackBytes;
  void* mapping = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
  MGT_CHECK(mapping != MAP_FAILED, Error,
            "could not map " + std::to_string(bytes) + " bytes for the data reader's stack: " + std::strerror(errno));
  s.mapping = static_cast<char*>(mapping);
  mprotect(s.mapping, Shared::page_bytes(), PROT_NONE);
#if defined(__SANITIZE_ADDRESS__)
  // The range may have held an earlier worker's stack, whose frames' red zones are still marked.
  __asan_unpoison_memory_region(s.stack(), kStackBytes);
#endif
  s.work = work;
  s.work_arg = arg;
  s.finished = s.stopping = s.lending = false;
  s.worker_sp = first_frame(s.stack(), kStackBytes);
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
