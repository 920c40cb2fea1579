// The `mgtrain` executable: subcommands, option parsing and the one place errors are printed.
#include <hdf5.h>
#include <boost/program_options.hpp>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <new>
#include <string>
#include <vector>

#include "base/atomic_file.hpp"
#include "base/host_memory.hpp"
#include "command_line_config.hpp"
#include "commands.hpp"
#include "mgtrain/error.hpp"
#include "mgtrain/version.hpp"

namespace po = boost::program_options;

namespace {

void print_usage(std::ostream& out) {
  out << "mgtrain " << MGTRAIN_VERSION
      << " - data-parallel neural-network training over MPI\n\n"
         "usage: mgtrain <command> [options]\n\n"
         "commands:\n"
         "  train --config FILE [--section.key=value ...]   train (launch with mpirun/srun)\n"
         "  launch --hostfile F -- train ...                 train under mpirun, restarted on the nodes left\n"
         "  bench --config FILE [--steps N]                  throughput, scaling, time split, all-reduce bandwidth\n"
         "  verify --config FILE [--world-size M]            self-check: resume and world size change nothing\n"
         "  doctor                                           per rank: host, GPU, memory, versions; a verdict\n"
         "  eval --checkpoint FILE --data FILE               accuracy and loss of a checkpoint\n"
         "  export --checkpoint FILE --out MODEL.onnx        a checkpoint's model as ONNX\n"
         "  generate --checkpoint F --prompt T --tokens N    a language model continues a text prompt\n"
         "  data convert ...                                 IDX or CSV to the HDF5 sample format\n"
         "  data inspect FILE                                what an HDF5 data file holds\n"
         "  compare A.h5 B.h5 [--rtol R] [--params-only]     two checkpoints' state, bitwise or close\n"
         "  report RUN_DIR [--out FILE.svg]                  a picture of a run's metrics (SVG)\n"
         "  plugins                                          plugins found, and why any was refused\n"
         "  config-keys                                      every config key with default and meaning\n\n"
         "  --help, --version\n"
         "`mgtrain <command> --help` shows a command's options.\n";
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    print_usage(std::cout);
    return args.empty() ? 2 : 0;
  }
  if (args[0] == "--version") {
    std::cout << "mgtrain " << MGTRAIN_VERSION << "\n";
    return 0;
  }
  const std::string command = args[0];
  args.erase(args.begin());
  // No HDF5 clean-up at exit: HDF5 1.10 leaves a file whose write failed (EFBIG, ENOSPC) half
  // closed, and its exit handler then crashes on it after the error line. Every file mgtrain
  // writes with HDF5 is closed explicitly, so nothing is lost. Before any other HDF5 call.
  H5dont_atexit();
  // A write past `ulimit -f` fails with EFBIG, which every writer reports (and cleans up after),
  // instead of SIGXFSZ killing the process with half a file and no word.
  std::signal(SIGXFSZ, SIG_IGN);
  // Ctrl-C or SIGTERM in a command that writes a file leaves no unfinished temporary. Training has
  // its own stop (stop_signal.hpp).
  if (command == "data" || command == "export" || command == "eval" || command == "report")
    mgt::remove_unfinished_outputs_on_signals("mgtrain: error: [rank " + std::to_string(mgt::cli::launch_rank()) +
                                              "] ");
  try {
    if (command == "train") return mgt::cli::run_train(argc, argv, args);
    if (command == "launch") return mgt::cli::run_launch(args);
    if (command == "bench") return mgt::cli::run_bench(argc, argv, args);
    if (command == "verify") return mgt::cli::run_verify(argc, argv, args);
    if (command == "doctor") return mgt::cli::exec_doctor(argv);
    if (command == "eval") return mgt::cli::run_eval(args);
    if (command == "export") return mgt::cli::run_export(args);
    if (command == "generate") return mgt::cli::run_generate(args);
    if (command == "data") return mgt::cli::run_data(args);
    if (command == "plugins") return mgt::cli::run_plugins(args);
    if (command == "compare") return mgt::cli::run_compare(args);
    if (command == "report") return mgt::cli::run_report(args);
    if (command == "config-keys") return mgt::cli::run_config_keys(args);
    std::fprintf(stderr,
                 "mgtrain: error: [rank %d] unknown command '%s' (expected train, eval, export, generate, "
                 "data, compare, report, plugins or config-keys; see mgtrain --help)\n",
                 mgt::cli::launch_rank(), mgt::printable(command).c_str());
    return 2;
  } catch (const po::error& e) {
    // Errors from outside the core (here boost's) quote arguments too: escaped like the core's.
    std::fprintf(stderr, "mgtrain: error: [rank %d] %s: %s (see mgtrain %s --help)\n", mgt::cli::launch_rank(),
                 command.c_str(), mgt::printable(e.what()).c_str(), command.c_str());
    return 2;
  } catch (const std::bad_alloc&) {
    // Allocations whose size a file or an option decides (a checkpoint's dataset, --batch) name
    // themselves (HostMemoryError); any other says what ran.
    std::fprintf(stderr, "mgtrain: error: [rank %d] %s\n", mgt::cli::launch_rank(),
                 mgt::out_of_host_memory("mgtrain " + command,
                                         "free memory, raise the limit (ulimit -v), or give it less at once")
                     .c_str());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mgtrain: error: [rank %d] %s\n", mgt::cli::launch_rank(), mgt::printable(e.what()).c_str());
    return 1;
  }
}
