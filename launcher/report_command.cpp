// `mgtrain report RUN_DIR [--out FILE.svg]`: a picture of a run from its metrics files. No MPI.
#include <boost/program_options.hpp>

#include <cstdio>
#include <iostream>

#include "commands.hpp"
#include "mgtrain/error.hpp"
#include "tools/report.hpp"

namespace po = boost::program_options;

namespace mgt::cli {

int run_report(const std::vector<std::string>& args) {
  po::options_description desc(
      "usage: mgtrain report RUN_DIR [--out FILE.svg]\n"
      "Draws RUN_DIR/metrics.jsonl (and any parameter-server metrics.rank<R>.jsonl) as one SVG:\n"
      "loss, accuracy, samples/s, step time per rank, learning rate, staleness.\noptions");
  desc.add_options()("help", "show this help")("run-dir", po::value<std::string>(),
                                               "run directory (the checkpoint.dir of a run)")(
      "out", po::value<std::string>(), "SVG file to write (default RUN_DIR/report.svg)");
  po::positional_options_description positional;
  positional.add("run-dir", 1);
  po::variables_map vm;
  po::store(po::command_line_parser(args).options(desc).positional(positional).run(), vm);
  po::notify(vm);
  if (vm.count("help")) {
    std::cout << desc << "\n";
    return 0;
  }
  if (!vm.count("run-dir")) throw ConfigError("report: RUN_DIR is required (see mgtrain report --help)");
  const std::string out = vm.count("out") ? vm["out"].as<std::string>() : std::string();
  const ReportResult r = write_report(vm["run-dir"].as<std::string>(), out);
  std::printf("wrote %s (%zu points)\n", printable(r.path).c_str(), r.points);
  return 0;
}

}  // namespace mgt::cli
