// The core shared between a step and its worker (mgtrain/idle_core.hpp), with real threads: the
// worker works only while the core is lent, gives it back when the lender's wait is over or it has
// no work, and stops when told; one owner at a time.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>

#include "mgtrain/idle_core.hpp"

namespace {

using mgt::IdleCore;
using namespace std::chrono_literals;

// A worker that counts pieces of work until `limit` (then rests) or until it is stopped.
struct CountingWorker {
  const void* owner;
  int64_t limit;
  std::atomic<int64_t> pieces{0};
  std::atomic<bool> stopped{false}, rested{false};
  std::thread thread;

  CountingWorker(const void* owner_, int64_t limit_, std::chrono::milliseconds attach_after = 0ms)
      : owner(owner_), limit(limit_) {
    thread = std::thread([this, attach_after] {
      std::this_thread::sleep_for(attach_after);
      IdleCore::attach(owner);
      while (pieces.load() < limit) {
        if (!IdleCore::may_run()) {
          stopped = true;
          break;
        }
        pieces.fetch_add(1);
      }
      if (!stopped) {
        IdleCore::rest();
        rested = true;
      }
      IdleCore::detach();
    });
  }
  ~CountingWorker() {
    IdleCore::stop_worker(owner);
    thread.join();
  }
};

bool at_least_ten(const void* worker) { return static_cast<const CountingWorker*>(worker)->pieces.load() >= 10; }
bool never(const void*) { return false; }

TEST(IdleCore, WorkerRunsOnlyWhileTheCoreIsLent) {
  int owner = 0;
  ASSERT_TRUE(IdleCore::claim(&owner));
  {
    CountingWorker worker(&owner, 1'000'000);
    std::this_thread::sleep_for(50ms);
    EXPECT_EQ(worker.pieces.load(), 0) << "the worker ran before the core was lent";
    IdleCore::lend_until(at_least_ten, &worker);
    const int64_t after_lend = worker.pieces.load();
    EXPECT_GE(after_lend, 10);
    // Handed back between two pieces: at most the piece in flight when the wait ended.
    EXPECT_LE(after_lend, 11);
    std::this_thread::sleep_for(50ms);
    EXPECT_EQ(worker.pieces.load(), after_lend) << "the worker went on after the core was given back";
  }
  IdleCore::release(&owner);
}

TEST(IdleCore, LendReturnsAtOnceWhenTheWorkerHasNoWork) {
  int owner = 0;
  ASSERT_TRUE(IdleCore::claim(&owner));
  {
    CountingWorker worker(&owner, 3);
    IdleCore::wait_for_worker(
        &owner, [](const void* w) { return static_cast<const CountingWorker*>(w)->rested.load(); }, &worker);
    EXPECT_EQ(worker.pieces.load(), 3);
    const auto start = std::chrono::steady_clock::now();
    IdleCore::lend_until(never, nullptr);  // nothing to do: it must not wait for `never`
    EXPECT_LT(std::chrono::steady_clock::now() - start, 1s);
  }
  IdleCore::release(&owner);
}

TEST(IdleCore, WaitForWorkerLendsBeforeTheWorkerAsks) {
  int owner = 0;
  ASSERT_TRUE(IdleCore::claim(&owner));
  {
    // The worker attaches only after the owner started waiting for it: the lend must still reach it.
    CountingWorker worker(&owner, 1'000'000, 50ms);
    IdleCore::wait_for_worker(&owner, at_least_ten, &worker);
    EXPECT_GE(worker.pieces.load(), 10);
  }
  IdleCore::release(&owner);
}

TEST(IdleCore, StopWakesAWaitingWorker) {
  int owner = 0;
  ASSERT_TRUE(IdleCore::claim(&owner));
  auto worker = std::make_unique<CountingWorker>(&owner, 1'000'000);
  std::this_thread::sleep_for(20ms);
  const auto start = std::chrono::steady_clock::now();
  worker.reset();  // stops and joins: a hang here is the failure
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
  IdleCore::release(&owner);
}

TEST(IdleCore, OneOwnerAtATime) {
  int first = 0, second = 0;
  ASSERT_TRUE(IdleCore::claim(&first));
  EXPECT_TRUE(IdleCore::claim(&first));
  EXPECT_FALSE(IdleCore::claim(&second));
  {
    // The refused owner's thread is no worker: it runs freely, and lending to it does nothing.
    CountingWorker free_running(&second, 100);
    IdleCore::wait_for_worker(&second, never, nullptr);  // not the owner: returns at once
    const auto deadline = std::chrono::steady_clock::now() + 5s;
    while (!free_running.rested && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(1ms);
    EXPECT_EQ(free_running.pieces.load(), 100);
  }
  IdleCore::release(&first);
  EXPECT_TRUE(IdleCore::claim(&second));
  IdleCore::release(&second);
}

}  // namespace
