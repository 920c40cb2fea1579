// `mgtrain train` and `mgtrain bench`: parse options and config overrides, start MPI, run, and
// turn any error into one line and an exit code that ends every rank.
#include <boost/program_options.hpp>

#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <functional>
#include <iostream>
#include <new>
#include <thread>

#include "base/host_memory.hpp"
#include "base/stop_signal.hpp"
#include "comm/mpi_communicator.hpp"
#include "command_line_config.hpp"
#include "commands.hpp"
#include "io/console.hpp"
#include "io/json_line.hpp"
#include "loader/plugin_loader.hpp"
#include "runtime/plugin_keys.hpp"
#include "runtime/result_json.hpp"
#include "runtime/trainer.hpp"
#include "tools/bench.hpp"
#include "tools/verify.hpp"

namespace po = boost::program_options;

namespace mgt::cli {

namespace {

void add_run_options(po::options_description& desc) {
  desc.add_options()("help", "show this help")("config", po::value<std::string>(),
                                               "INI file with the run's configuration")(
      "json", po::bool_switch(), "end with one JSON line from rank 0")(
      "plugin-path", po::value<std::vector<std::string>>()->composing(), "extra plugin directory (repeatable)");
}

// Parses the command line, starts MPI, builds the config (file plus --section.key=value
// overrides, agreed by all ranks) and runs `body` on every rank. Errors before step 1 end every
// rank cleanly (exit 2); later ones end the job (exit 1). A command-line error is raised only once
// MPI is up, inside agree(): every rank finds it, and rank 0 alone reports it, with its own rank.
// Keys of plugins the config does not choose are dropped, with one note from rank 0.
int run_under_mpi(int argc, char** argv, const std::string& command, const std::vector<std::string>& args,
                  const po::options_description& desc,
                  const std::function<void(Communicator&, TrainOptions&, const po::variables_map&)>& body) {
  const RunCommandLine command_line = parse_run_command_line(command, args, desc);
  const po::variables_map& vm = command_line.vm;
  if (command_line.error.empty() && vm.count("help")) {
    std::cout << desc << "\n";
    return 0;
  }

  if (refuse_low_open_file_limit()) return 2;
  MpiRuntime mpi(&argc, &argv);
  auto comm = make_mpi_communicator();
  try {
    TrainOptions options;
    if (vm.count("plugin-path")) options.plugin_paths = vm["plugin-path"].as<std::vector<std::string>>();
    std::string note;
    double timeout_s = comm->timeout_seconds();
    agree(*comm, [&] {
      if (!command_line.error.empty()) throw ConfigError(command_line.error);
      if (!vm.count("config")) throw ConfigError("--config FILE is required");
      options.config =
          checked_run_config(vm["config"].as<std::string>(), command_line, options.plugin_paths, &note, &timeout_s);
    });
    comm->set_timeout_seconds(timeout_s);
    if (comm->rank() == 0 && !note.empty()) {
      std::fprintf(stderr, "mgtrain: note: %s\n", printable(note).c_str());
      std::fflush(stderr);
    }
    body(*comm, options, vm);
    return 0;
  } catch (const StartupError& e) {
    // Every rank got here together; the one that found the problem says it, after the progress
    // bar's last state (a non-finite gradient mid-run), on a line of its own.
    if (e.report())
      console::final_line("mgtrain: error: [rank " + std::to_string(comm->rank()) + "] " + e.what() + "\n");
    else
      console::end_status();
    return 2;
  } catch (const std::bad_alloc&) {
    console::final_line("mgtrain: error: [rank " + std::to_string(comm->rank()) +
                        "] out of host memory: " + kLowerTheMicroBatch + "\n");
    if (comm->size() > 1) comm->abort(1);
    return 1;
  } catch (const std::exception& e) {
    // After the progress bar's last state, on a line of its own.
    console::final_line("mgtrain: error: [rank " + std::to_string(comm->rank()) + "] " + printable(e.what()) + "\n");
    // The other ranks may be waiting on this one: end the whole job now rather than let them hang.
    if (comm->size() > 1) comm->abort(1);
    return 1;
  }
}

// Rank 0's last line: the run's figures, as JSON or as a sentence.
void print_result(const TrainResult& r, int world_size, bool json) {
  if (json) {
    std::printf("%s\n", train_result_json(r, world_size).c_str());
  } else if (r.steps_run == 0) {
    std::printf("done: nothing to train at step %lld, checkpoint %s\n", static_cast<long long>(r.steps),
                printable(r.checkpoint).c_str());
  } else {
    std::printf("done: %lld steps, %.0f samples/s, final loss %.4f, checkpoint %s\n", static_cast<long long>(r.steps),
                r.samples_per_s, r.final_loss, printable(r.checkpoint).c_str());
  }
  std::fflush(stdout);
}

// The run went on without some ranks (sync.on_lost_worker = continue); rank 0 has written the
// final checkpoint and its figures. MPI_Finalize would wait for the lost ranks, which may be alive
// but stuck, so rank 0 ends the job with MPI_Abort and status 0. The other survivors wait for that
// rather than exit: a process leaving without MPI_Finalize makes mpirun end the job at once,
// possibly before rank 0 is done.
[[noreturn]] void end_job_without(Communicator& comm, const std::vector<int>& lost) {
  std::fflush(nullptr);
  if (comm.rank() == 0) {
    std::fprintf(stderr,
                 "mgtrain: the run is complete without rank(s) %s; ending the job with MPI_Abort "
                 "and status 0, since MPI_Finalize would wait for them\n",
                 rank_list(lost).c_str());
    std::fflush(stderr);
    comm.abort(0);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(comm.timeout_seconds());
  while (std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  std::fprintf(stderr,
               "mgtrain: error: [rank %d] rank 0 did not end the job within %.0f s after the run "
               "(comm.timeout_s)\n",
               comm.rank(), comm.timeout_seconds());
  std::fflush(stderr);
  std::_Exit(1);
}

}  // namespace

int run_train(int argc, char** argv, const std::vector<std::string>& args) {
  po::options_description desc(
      "usage: mgtrain train --config FILE [--section.key=value ...] [options]\n"
      "Any config key can be given on the command line as --section.key=value.\noptions");
  add_run_options(desc);
  desc.add_options()("resume", po::value<std::string>(), "'latest' (newest in checkpoint.dir) or a checkpoint path");
  add_allow_unchecked_option(desc);
  int stopped_by_signal = 0;
  // Before MPI_Init, whose threads (like every later one) must not run a stop signal's handler.
  take_stop_signals();
  const int rc = run_under_mpi(argc, argv, "train", args, desc,
                               [&](Communicator& comm, TrainOptions& options, const po::variables_map& vm) {
                                 if (vm.count("resume")) options.resume = vm["resume"].as<std::string>();
                                 apply_allow_unchecked_option(vm);
                                 accept_stop_signals();
                                 const TrainResult r = train(comm, std::move(options), std::cout);
                                 if (r.stopped) stopped_by_signal = r.stop_signal > 0 ? r.stop_signal : SIGTERM;
                                 if (comm.rank() == 0) print_result(r, comm.size(), vm["json"].as<bool>());
                                 if (!r.lost_ranks.empty()) end_job_without(comm, r.lost_ranks);
                               });
  // Stopped by scancel or a time limit: the final checkpoint is written, but the run is not
  // done, which the exit status tells the scheduler (128 + the signal, as if killed by it: 143
  // for SIGTERM). mpirun signalled itself exits 1 whatever the ranks return (docs/clusters.md).
  return rc == 0 && stopped_by_signal != 0 ? 128 + stopped_by_signal : rc;
}

int run_bench(int argc, char** argv, const std::vector<std::string>& args) {
  po::options_description desc(
      "usage: mpirun -np N mgtrain bench --config FILE [--section.key=value ...] [options]\n"
      "Trains a fixed number of steps (no checkpoints) and reports samples/s, scaling against one\n"
      "rank, the time split of a step, and the gradient all-reduce's bus bandwidth next to raw\n"
      "MPI_Allreduce on the same buffer size.\noptions");
  add_run_options(desc);
  desc.add_options()("steps", po::value<int64_t>()->default_value(200), "timed steps")(
      "warmup", po::value<int64_t>()->default_value(20), "untimed steps first")(
      "allreduce-iterations", po::value<int64_t>()->default_value(50), "all-reduce timing iterations")(
      "repeat", po::value<int64_t>()->default_value(1),
      "alternate the one-rank and all-rank runs this many times and report medians (noisy machines)");
  return run_under_mpi(
      argc, argv, "bench", args, desc, [](Communicator& comm, TrainOptions& options, const po::variables_map& vm) {
        const auto steps = vm["steps"].as<int64_t>(), warmup = vm["warmup"].as<int64_t>();
        const auto iterations = vm["allreduce-iterations"].as<int64_t>();
        if (steps <= 0 || warmup < 0 || iterations <= 0)
          throw ConfigError("bench: --steps and --allreduce-iterations must be positive, --warmup >= 0");
        const auto repeats = vm["repeat"].as<int64_t>();
        if (repeats <= 0) throw ConfigError("bench: --repeat must be positive");
        const BenchResult b = mgt::run_bench(comm, options, steps, warmup, iterations, repeats);
        std::string runs;
        for (double s : b.scaling_runs) {
          if (!runs.empty()) runs += ",";
          runs += std::to_string(s);
        }
        if (comm.rank() != 0) return;
        const auto& p = b.run.phases;
        if (vm["json"].as<bool>()) {
          std::printf("%s\n", bench_result_json(b, comm.size(), steps, repeats).c_str());
        } else {
          std::printf("ranks %d, %lld timed steps\n", comm.size(), static_cast<long long>(steps));
          std::printf(
              "  samples/s            %.0f (one rank alone: %.0f; scaling efficiency %.1f%%)%s\n", b.run.samples_per_s,
              b.samples_per_s_np1, 100.0 * b.scaling_efficiency,
              repeats > 1 ? (", medians of " + std::to_string(repeats) + " alternating runs: " + runs).c_str() : "");
          std::printf(
              "  step time, ms        forward+backward %.3f, communication not hidden %.3f, "
              "data wait %.3f, optimizer %.3f\n",
              1e3 * p.compute, 1e3 * p.sync, 1e3 * p.data_wait, 1e3 * p.optimizer);
          std::printf(
              "  gradient all-reduce  %.2f MB: %.3f ms, bus bandwidth %.2f GB/s "
              "(raw MPI_Allreduce %.3f ms, %.2f GB/s)\n",
              b.gradient_bytes / 1e6, b.allreduce_ms, b.allreduce_busbw_gbs, b.mpi_allreduce_ms, b.mpi_busbw_gbs);
          if (!std::isnan(b.hierarchical_busbw_gbs))
            std::printf(
                "  bus bandwidth        flat %.2f GB/s, hierarchical (one leader per node) %.2f GB/s, shared memory in "
                "each node %.2f GB/s\n",
                b.flat_busbw_gbs, b.hierarchical_busbw_gbs, b.shared_memory_busbw_gbs);
          std::printf("  peak RSS per rank    %.1f MB\n", b.run.peak_rss_mb);
        }
        std::fflush(stdout);
      });
}

int run_verify(int argc, char** argv, const std::vector<std::string>& args) {
  po::options_description desc(
      "usage: mpirun -np N mgtrain verify --config FILE [--steps S] [--world-size M] [--section.key=value ...]\n"
      "Checks on your own config that S steps straight and S/2 + stop + resume + S/2 give the same\n"
      "parameters, and with --world-size that M ranks give them too (needs sync.deterministic).\n"
      "Prints the parameter hashes and PASS or FAIL; exits 1 on FAIL.\noptions");
  add_run_options(desc);
  desc.add_options()("steps", po::value<int64_t>()->default_value(20), "steps of each run")(
      "world-size", po::value<int>()->default_value(0), "also run on the first M ranks alone");
  bool pass = true;
  const int rc = run_under_mpi(
      argc, argv, "verify", args, desc, [&](Communicator& comm, TrainOptions& options, const po::variables_map& vm) {
        pass = mgt::run_verify(comm, options, vm["steps"].as<int64_t>(), vm["world-size"].as<int>(), std::cout);
      });
  return rc != 0 ? rc : (pass ? 0 : 1);
}

}  // namespace mgt::cli
