// The training loop's runtime callbacks, each driven alone on a Run under mpirun: the stop-signal
// callback makes every rank stop after the same step when one rank was signalled (and none stops
// without a signal), and names the signal once, on rank 0; the non-finite callback ends the run
// naming where the NaN came from, or skips and counts the step, as train.nonfinite says.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>

#include "base/stop_signal.hpp"
#include "comm/mpi_communicator.hpp"
#include "mpi_check.hpp"
#include "runtime/callbacks.hpp"
#include "runtime/run.hpp"

namespace {

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

mgt::NonFiniteFigures nan_from_rank_1(int64_t step, bool skipped) {
  mgt::NonFiniteFigures f;
  f.step = step;
  f.skipped = skipped;
  f.diagnosed = true;
  f.ranks.push_back({1, "fc1", "fc1.weight"});
  return f;
}

}  // namespace

using mpi_check::check;

int main(int argc, char** argv) {
  // As the launcher does: before MPI starts its threads, so that they never take a stop signal.
  mgt::take_stop_signals();
  mgt::MpiRuntime mpi(&argc, &argv);
  auto comm = mgt::make_mpi_communicator();
  comm->set_timeout_seconds(60);
  const int rank = comm->rank();
  std::ostringstream log;
  mgt::Run run(*comm, mgt::TrainOptions{}, log);
  run.train_comm = comm->split(0, rank);
  run.config.set("checkpoint.every_seconds", "0", "test");

  // Stop signals: asked and agreed after every step.
  auto stop = mgt::make_stop_signal_callback(run);
  mgt::accept_stop_signals();
  // checkpoint.every_seconds: rank 0's clock, carried by the stop check (which only a run taking
  // stop signals makes), decides for every rank.
  {
    run.config.set("checkpoint.every_seconds", "0.05", "test");
    auto timed = mgt::make_stop_signal_callback(run);
    run.last_checkpoint_at = mgt::Clock::now();
    check(!timed->should_stop(1) && !run.checkpoint_due, "no checkpoint is due before every_seconds", rank);
    // Only rank 0's clock counts: the others' say it is long past due, rank 0's that it is due now.
    if (rank != 0) run.last_checkpoint_at = mgt::Clock::now() - std::chrono::hours(1);
    check(!timed->should_stop(2) && !run.checkpoint_due, "another rank's clock decides nothing", rank);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (rank != 0) run.last_checkpoint_at = mgt::Clock::now();
    check(!timed->should_stop(3) && run.checkpoint_due, "every rank writes when rank 0's clock says so", rank);
    run.checkpoint_due = false;
    run.config.set("checkpoint.every_seconds", "0", "test");
  }
  check(!stop->should_stop(10), "no rank stops without a signal", rank);
  if (rank == comm->size() - 1) {
    // To the process, as scancel sends it: the stop-signal thread takes it and sets the flag.
    ::kill(::getpid(), SIGUSR1);
    for (int i = 0; i < 500 && !mgt::stop_requested(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    check(mgt::stop_requested(), "the signalled rank sees its stop request", rank);
  }
  comm->barrier();
  // Agreed after every step: mpirun kills the ranks a second after passing SIGTERM on.
  check(stop->should_stop(11), "every rank stops after the next step when the last rank was signalled", rank);
  // Rank 0 says it on stderr: mpirun stops reading the ranks' stdout while it ends a job.
  std::ostringstream said_on_stderr;
  std::streambuf* stderr_buffer = std::cerr.rdbuf(said_on_stderr.rdbuf());
  stop->on_run_end({11, 0, true});
  std::cerr.rdbuf(stderr_buffer);
  check(run.result.stop_signal == SIGUSR1, "every rank knows the signal, for its exit status (128 + it)", rank);
  const std::string said = said_on_stderr.str() + log.str();
  if (rank == 0)
    check(contains(said, "stopped by signal " + std::to_string(SIGUSR1) + " at step 11: writing a final checkpoint") &&
              contains(said, "--resume latest"),
          "rank 0 names the signal another rank got and how to continue: " + said, rank);
  else
    check(said.empty(), "only rank 0 says it: " + said, rank);

  // Non-finite gradients: skipped and counted, with a warning naming the rank, layer and parameter.
  log.str("");
  auto nonfinite = mgt::make_nonfinite_callback(run);
  nonfinite->on_nonfinite(nan_from_rank_1(7, true));
  check(run.result.skipped_steps == 1, "a skipped step is counted", rank);
  if (rank == 0)
    check(contains(log.str(),
                   "warning: non-finite gradient at step 7 (rank 1's gradient, first the output of layer 'fc1', first "
                   "parameter in backward order 'fc1.weight'): step skipped"),
          "the warning names where the NaN came from: " + log.str(), rank);
  // ... or the end of the run, the message to be printed by rank 0 alone.
  std::string error;
  bool report = false;
  try {
    nonfinite->on_nonfinite(nan_from_rank_1(9, false));
  } catch (const mgt::StartupError& e) {
    error = e.what();
    report = e.report();
  }
  check(contains(error, "non-finite gradient at step 9 (rank 1's gradient") &&
            contains(error, "train.nonfinite = skip skips such steps"),
        "an unskipped non-finite step ends the run: '" + error + "'", rank);
  check(report == (rank == 0), "rank 0 alone prints it", rank);
  mgt::NonFiniteFigures overflow;
  overflow.step = 3;
  overflow.diagnosed = true;
  try {
    nonfinite->on_nonfinite(overflow);
    error.clear();
  } catch (const mgt::StartupError& e) {
    error = e.what();
  }
  check(contains(error, "every rank's own gradient was finite: their sum overflowed"),
        "a sum that overflowed is told apart from a rank's NaN: '" + error + "'", rank);
  return mpi_check::verdict(*comm);
}
