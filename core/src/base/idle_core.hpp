#pragma once
// A rank that runs on one core (mpirun binds each rank to its own core) shares it between the step
// and its background worker, the data reader. Left to the scheduler, a worker thread runs whenever
// it is woken, which is at the start of a step (a batch handed out frees a slot), so its work
// delays the step; and while the step spins at a barrier for another rank, the worker has nothing
// left to do. With the core shared here, the worker runs only while the step waits: the step lends
// the core when it waits for other ranks or for the worker's batch, and the worker hands it back,
// between two small pieces of its work, as soon as the wait is over. Its work then fills time in
// which the core would otherwise spin.
//
// The worker is a fiber (Boost.Context), not a thread: it runs on a stack of its own but on the
// step's thread, which switches to it when it lends the core and back when the worker pauses. A
// switch is a change of registers and stack in user space, where handing the core to a thread and
// back took two context switches of the kernel, several times a step.
//
// Internal to mgtrain's own libraries (the data reader, the shared-memory barrier): declared here,
// below the data reader, and built into libmgtrain (sdk/idle_core.cpp), whose shared-memory
// barrier uses it and which exports it for the runtime; not installed with the SDK.
//
// One owner per process at a time (the training reader). Where no owner holds it, or on a thread
// other than the one that started the worker, the step's calls return at once; the worker's calls
// return at once outside the worker.
#include "mgtrain/export.hpp"

namespace mgt {

class MGT_API IdleCore {
 public:
  using Done = bool (*)(const void* arg);

  // The step's side: runs the worker until done(arg) holds, where the worker has work; returns at
  // once, done or not, where it has none: the caller then waits its own way. done(arg) is
  // evaluated between pieces of the worker's work.
  static void lend_until(Done done, const void* arg);
  // The owner's side, waiting for what its worker owes it (its next batch): runs the worker until
  // done(arg) holds, whether or not the worker said it had work.
  static void wait_for_worker(const void* owner, Done done, const void* arg);

  // The owner: true where `owner` now holds the core's sharing (or already did), false where
  // another owner does. release() gives it up, stopping its worker if it still runs.
  static bool claim(const void* owner);
  static void release(const void* owner);

  // Makes work(arg) the worker of `owner`'s claim, on the calling thread (the step's), which the
  // first lend starts. False, and nothing started, where `owner` does not hold the claim or a
  // worker is still running. work(arg) must not let an exception out.
  static bool start_worker(const void* owner, void (*work)(void*), void* arg);
  // Runs the owner's worker to its end, its may_run() returning false. On the step's thread.
  static void stop_worker(const void* owner);
  // The owner's worker has work again (it rested): lends run it from now on.
  static void wake(const void* owner);

  // The worker, before each piece of work: returns once the core is lent and the lender's wait is
  // not over (the step runs meanwhile). False when the worker is to stop.
  static bool may_run();
  // No work for now: the core goes back to the step until wake(); returns when the worker runs
  // again (or is to stop: may_run() says which).
  static void rest();
};

}  // namespace mgt
