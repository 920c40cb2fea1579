// The `mgtrain-doctor` executable, which `mgtrain doctor` becomes (exec). It alone links the GPU
// libraries: cuBLAS alone adds some 150 MB of resident memory to every process that loads it, which
// a training rank on the CPU path must not pay.
#include <boost/program_options.hpp>

#include <cstdio>
#include <string>
#include <vector>

#include "command_line_config.hpp"
#include "commands.hpp"

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (!args.empty() && args[0] == "doctor") args.erase(args.begin());
  try {
    return mgt::cli::run_doctor(argc, argv, args);
  } catch (const boost::program_options::error& e) {
    std::fprintf(stderr, "mgtrain: error: [rank %d] doctor: %s (see mgtrain doctor --help)\n", mgt::cli::launch_rank(),
                 e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mgtrain: error: [rank %d] %s\n", mgt::cli::launch_rank(), e.what());
    return 1;
  }
}
