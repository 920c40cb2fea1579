#pragma once
// A rank that runs on one core (mpirun binds each rank to its own core) shares it between the step
// and its background worker, the data reader's thread. Left to the scheduler, the worker runs
// whenever it is woken, which is at the start of a step (a batch handed out frees a slot), so its
// work delays the step; and while the step spins at a barrier for another rank, the worker has
// nothing left to do. With the core shared here, the worker runs only while the step waits: the
// step lends the core when it waits for other ranks or for the worker's batch, and the worker hands
// it back, between two small pieces of its work, as soon as the wait is over. Its work then fills
// time in which the core would otherwise spin.
//
// One owner per process at a time (the training reader), whose thread is the worker. Where no
// owner holds it, the step's calls return at once; the worker's calls return at once on any
// thread but the worker's.
#include "mgtrain/export.hpp"

namespace mgt {

class MGT_API IdleCore {
 public:
  using Done = bool (*)(const void* arg);

  // The step's side: waits until done(arg) holds, the worker running meanwhile, where the worker
  // has work; returns at once, done or not, where it has none: the caller then waits its own way.
  // done(arg) is evaluated by the worker's thread, between pieces of its work.
  static void lend_until(Done done, const void* arg);
  // The owner's side, on the step's thread, waiting for what its worker owes it (its next batch):
  // waits until done(arg) holds, lending the core whether or not the worker has asked for it yet.
  static void wait_for_worker(const void* owner, Done done, const void* arg);

  // The owner: true where `owner` now holds the core's sharing (or already did), false where
  // another owner does. release() gives it up; the owner stops its worker first.
  static bool claim(const void* owner);
  static void release(const void* owner);
  // Wakes the owner's worker out of may_run(), which then returns false until it detaches.
  static void stop_worker(const void* owner);

  // The worker, from its own thread: attach() makes it the worker of `owner`'s claim (nothing
  // where `owner` does not hold it); detach() before the thread ends.
  static void attach(const void* owner);
  static void detach();
  // Before each piece of work: blocks until the core is lent and the lender's wait is not over.
  // False when the worker is to stop.
  static bool may_run();
  // No work for now (the worker is about to wait for some): a lent core goes back at once.
  static void rest();
};

}  // namespace mgt
