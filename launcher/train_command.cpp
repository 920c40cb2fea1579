// `mgtrain train`: parses options and overrides, starts MPI, runs the trainer, and turns any error
// into one line and an exit code that ends every rank.
#include <boost/program_options.hpp>

#include <cstdio>
#include <iostream>

#include "commands.hpp"
#include "mpi_communicator.hpp"
#include "trainer.hpp"

namespace po = boost::program_options;

namespace mgt::cli {

namespace {

po::options_description train_options() {
  po::options_description desc(
      "usage: mgtrain train --config FILE [--section.key=value ...] [options]\n"
      "Any config key can be given on the command line as --section.key=value.\noptions");
  desc.add_options()
      ("help", "show this help")
      ("config", po::value<std::string>(), "INI file with the run's configuration")
      ("resume", po::value<std::string>(), "'latest' (newest in checkpoint.dir) or a checkpoint path")
      ("json", po::bool_switch(), "end with one JSON line from rank 0")
      ("plugin-path", po::value<std::vector<std::string>>()->composing(), "extra plugin directory (repeatable)");
  return desc;
}

}  // namespace

int run_train(int argc, char** argv, const std::vector<std::string>& args) {
  const auto desc = train_options();
  const auto parsed = po::command_line_parser(args).options(desc).allow_unregistered().run();
  po::variables_map vm;
  po::store(parsed, vm);
  po::notify(vm);
  if (vm.count("help")) {
    std::cout << desc << "\n";
    return 0;
  }

  MpiRuntime mpi(&argc, &argv);
  auto comm = make_mpi_communicator();
  try {
    TrainOptions options;
    if (vm.count("resume")) options.resume = vm["resume"].as<std::string>();
    if (vm.count("plugin-path")) options.plugin_paths = vm["plugin-path"].as<std::vector<std::string>>();
    agree(*comm, [&] {
      if (!vm.count("config")) throw ConfigError("mgtrain train: --config FILE is required");
      options.config = Config::from_ini_file(vm["config"].as<std::string>());
      for (const auto& opt : parsed.options) {
        if (!opt.unregistered) continue;
        const std::string token = opt.original_tokens.empty() ? opt.string_key : opt.original_tokens[0];
        if (opt.string_key.find('.') == std::string::npos || opt.value.size() != 1)
          throw ConfigError("mgtrain train: unexpected argument '" + token +
                            "'; config overrides are written --section.key=value");
        options.config.set(opt.string_key, opt.value[0], "command line");
      }
    });
    const TrainResult r = train(*comm, std::move(options), std::cout);
    if (comm->rank() == 0) {
      if (vm["json"].as<bool>()) {
        std::printf("{\"steps\":%lld,\"steps_run\":%lld,\"samples\":%lld,\"train_seconds\":%.6f,"
                    "\"samples_per_s\":%.3f,\"final_loss\":%.9g,\"checkpoint\":\"%s\",\"world_size\":%d,"
                    "\"peak_rss_mb\":%.1f,\"compute_ms\":%.4f,\"sync_ms\":%.4f,"
                    "\"data_wait_ms\":%.4f,\"optimizer_ms\":%.4f}\n",
                    static_cast<long long>(r.steps), static_cast<long long>(r.steps_run),
                    static_cast<long long>(r.samples), r.train_seconds, r.samples_per_s, r.final_loss,
                    r.checkpoint.c_str(), comm->size(), r.peak_rss_mb, 1e3 * r.phases.compute,
                    1e3 * r.phases.sync, 1e3 * r.phases.data_wait, 1e3 * r.phases.optimizer);
      } else {
        std::printf("done: %lld steps, %.0f samples/s, final loss %.4f, checkpoint %s\n",
                    static_cast<long long>(r.steps), r.samples_per_s, r.final_loss, r.checkpoint.c_str());
      }
      std::fflush(stdout);
    }
    return 0;
  } catch (const StartupError& e) {
    // Every rank got here together; the one that found the problem says it.
    if (e.report()) std::fprintf(stderr, "mgtrain: error: [rank %d] %s\n", comm->rank(), e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mgtrain: error: [rank %d] %s\n", comm->rank(), e.what());
    std::fflush(stderr);
    // The other ranks may be waiting on this one: end the whole job now rather than let them hang.
    if (comm->size() > 1) comm->abort(1);
    return 1;
  }
}

}  // namespace mgt::cli
