// The core shared between a step and its worker (core/src/base/idle_core.hpp): the worker, a fiber on
// the step's thread, works only while the core is lent, gives it back when the lender's wait is
// over or it has no work, starts again when woken, and is run to its end when stopped; one owner
// at a time, and only the thread that started the worker lends to it.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "base/idle_core.hpp"

namespace {

using mgt::IdleCore;

// A worker that counts pieces of work: `batch` pieces, then rests, `batches` times, or until it
// is stopped. What lives on its stack is destroyed when it ends, however it ends.
struct CountingWorker {
  int64_t batch = 1'000'000, batches = 1;
  std::atomic<int64_t> pieces{0}, rests{0}, unwound{0};
  bool stopped = false, ended = false;

  static void work(void* self) { static_cast<CountingWorker*>(self)->run(); }
  void run() {
    struct OnItsStack {
      CountingWorker* w;
      ~OnItsStack() { w->unwound.fetch_add(1); }
    } on_its_stack{this};
    for (int64_t b = 0; b < batches && !stopped; ++b) {
      for (int64_t i = 0; i < batch; ++i) {
        if (!IdleCore::may_run()) {
          stopped = true;
          break;
        }
        pieces.fetch_add(1);
      }
      if (!stopped) {
        rests.fetch_add(1);
        IdleCore::rest();
      }
    }
    ended = true;
  }
};

bool at_least_ten(const void* worker) { return static_cast<const CountingWorker*>(worker)->pieces.load() >= 10; }
bool never(const void*) { return false; }

// Claims the core for `worker` and starts it; stops it and gives the claim up at the end.
struct Started {
  CountingWorker& worker;
  explicit Started(CountingWorker& w) : worker(w) {
    EXPECT_TRUE(IdleCore::claim(&worker));
    EXPECT_TRUE(IdleCore::start_worker(&worker, CountingWorker::work, &worker));
  }
  ~Started() {
    IdleCore::stop_worker(&worker);
    IdleCore::release(&worker);
  }
};

TEST(IdleCore, WorkerRunsOnlyWhileTheCoreIsLent) {
  CountingWorker worker;
  {
    Started started(worker);
    EXPECT_EQ(worker.pieces.load(), 0) << "the worker ran before the core was lent";
    IdleCore::lend_until(at_least_ten, &worker);
    const int64_t after_lend = worker.pieces.load();
    // Handed back between two pieces, as soon as the wait was over.
    EXPECT_EQ(after_lend, 10);
    IdleCore::lend_until(at_least_ten, &worker);  // the wait is over already: nothing runs
    EXPECT_EQ(worker.pieces.load(), after_lend);
  }
  EXPECT_TRUE(worker.ended);
  EXPECT_TRUE(worker.stopped);
  EXPECT_EQ(worker.unwound.load(), 1);
}

TEST(IdleCore, LendReturnsAtOnceWhenTheWorkerHasNoWork) {
  CountingWorker worker;
  worker.batch = 3;
  worker.batches = 2;
  Started started(worker);
  IdleCore::wait_for_worker(
      &worker, [](const void* w) { return static_cast<const CountingWorker*>(w)->rests.load() >= 1; }, &worker);
  EXPECT_EQ(worker.pieces.load(), 3);
  IdleCore::lend_until(never, nullptr);  // resting: it must not wait for `never`
  EXPECT_EQ(worker.pieces.load(), 3);
  // Woken, it does its second batch in the next lend, and rests again.
  IdleCore::wake(&worker);
  IdleCore::lend_until(never, nullptr);
  EXPECT_EQ(worker.pieces.load(), 6);
  EXPECT_EQ(worker.rests.load(), 2);
}

TEST(IdleCore, WaitForWorkerRunsAWorkerThatRested) {
  CountingWorker worker;
  worker.batch = 5;
  worker.batches = 3;
  Started started(worker);
  // Not woken, but owed: the owner's wait runs it through its rests.
  IdleCore::wait_for_worker(
      &worker, [](const void* w) { return static_cast<const CountingWorker*>(w)->pieces.load() >= 12; }, &worker);
  EXPECT_EQ(worker.pieces.load(), 12);
}

TEST(IdleCore, StopRunsTheWorkerToItsEnd) {
  CountingWorker worker;
  {
    Started started(worker);
    IdleCore::lend_until(at_least_ten, &worker);
    EXPECT_FALSE(worker.ended);
  }  // stop_worker: a hang here is the failure
  EXPECT_TRUE(worker.ended);
  EXPECT_EQ(worker.unwound.load(), 1);
  EXPECT_EQ(worker.pieces.load(), 10);
  // Another worker can start after it.
  CountingWorker next;
  {
    Started started(next);
    IdleCore::lend_until(at_least_ten, &next);
    EXPECT_EQ(next.pieces.load(), 10);
  }
}

TEST(IdleCore, OnlyTheStartingThreadLends) {
  CountingWorker worker;
  Started started(worker);
  std::thread other([&] {
    IdleCore::lend_until(at_least_ten, &worker);
    IdleCore::wait_for_worker(&worker, at_least_ten, &worker);
  });
  other.join();
  EXPECT_EQ(worker.pieces.load(), 0) << "another thread ran the worker";
  IdleCore::lend_until(at_least_ten, &worker);
  EXPECT_EQ(worker.pieces.load(), 10);
}

TEST(IdleCore, OneOwnerAtATime) {
  int first = 0, second = 0;
  ASSERT_TRUE(IdleCore::claim(&first));
  EXPECT_TRUE(IdleCore::claim(&first));
  EXPECT_FALSE(IdleCore::claim(&second));
  CountingWorker refused;
  EXPECT_FALSE(IdleCore::start_worker(&second, CountingWorker::work, &refused)) << "not the owner";
  // Outside a worker, the worker's calls return at once: a refused owner's thread runs freely.
  EXPECT_TRUE(IdleCore::may_run());
  IdleCore::rest();
  IdleCore::release(&first);
  EXPECT_TRUE(IdleCore::claim(&second));
  IdleCore::release(&second);
}

}  // namespace
