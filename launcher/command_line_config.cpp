#include "command_line_config.hpp"

#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "loader/plugin_loader.hpp"
#include "mgtrain/error.hpp"
#include "runtime/core_keys.hpp"
#include "runtime/plugin_keys.hpp"
#include "runtime/trainer.hpp"

namespace po = boost::program_options;

namespace mgt::cli {

namespace {

// "--section.key=value" or "--section.key": a long option whose name holds a dot.
bool is_override(const std::string& arg) {
  if (arg.size() < 3 || arg.compare(0, 2, "--") != 0) return false;
  const auto eq = arg.find('=');
  const std::string name = arg.substr(2, eq == std::string::npos ? std::string::npos : eq - 2);
  return name.find('.') != std::string::npos;
}

// "--resume=" as "--resume" "": boost refuses the first form and takes the second, so both are
// split the same way and refused below by one message.
std::vector<std::string> split_empty_values(const std::vector<std::string>& options) {
  std::vector<std::string> out;
  for (const auto& arg : options) {
    if (arg.size() > 3 && arg.compare(0, 2, "--") == 0 && arg.back() == '=' && arg.find('=') == arg.size() - 1) {
      out.push_back(arg.substr(0, arg.size() - 1));
      out.emplace_back();
    } else {
      out.push_back(arg);
    }
  }
  return out;
}

// The first option given an empty string ("--resume ''"), which would otherwise read as not given.
std::string empty_option_error(const std::string& command, const po::variables_map& vm,
                               const po::options_description& desc) {
  for (const auto& [name, value] : vm) {
    const auto* text = boost::any_cast<std::string>(&value.value());
    if (!text || !text->empty() || value.defaulted()) continue;
    const auto* option = desc.find_nothrow(name, false);
    // A switch that takes no value (--help) is stored as an empty string too.
    if (option && option->semantic()->max_tokens() == 0) continue;
    return command + ": option '--" + name + "' is empty; expected " +
           (option ? option->description() : std::string("a value")) + " (see mgtrain " + command + " --help)";
  }
  return "";
}

}  // namespace

RunCommandLine parse_run_command_line(const std::string& command, const std::vector<std::string>& args,
                                      const po::options_description& desc) {
  RunCommandLine out;
  std::vector<std::string> options;
  for (const auto& arg : args) (is_override(arg) ? out.overrides : options).push_back(arg);
  try {
    out.parsed.emplace(po::command_line_parser(split_empty_values(options)).options(desc).allow_unregistered().run());
    po::store(*out.parsed, out.vm);
    po::notify(out.vm);
    out.error = empty_option_error(command, out.vm, desc);
  } catch (const po::error& e) {
    out.error = command + ": " + e.what() + " (see mgtrain " + command + " --help)";
  }
  return out;
}

Config config_from_command_line(const std::string& ini_file, const RunCommandLine& command_line) {
  if (!command_line.error.empty()) throw ConfigError(command_line.error);
  Config config = Config::from_ini_file(ini_file);
  for (const auto& opt : command_line.parsed->options) {
    // A word without "--" (a positional argument) is stored by boost under no name and would be
    // dropped silently.
    if (!opt.unregistered && !opt.string_key.empty()) continue;
    const std::string token = opt.original_tokens.empty() ? opt.string_key : opt.original_tokens[0];
    throw ConfigError("unexpected argument '" + token + "'; config overrides are written --section.key=value");
  }
  for (const auto& arg : command_line.overrides) {
    const auto eq = arg.find('=');
    if (eq == std::string::npos)
      throw ConfigError("unexpected argument '" + arg +
                        "'; config overrides are written --section.key=value "
                        "(--section.key= sets the empty value)");
    config.set(arg.substr(2, eq - 2), arg.substr(eq + 1), "command line");
  }
  return config;
}

Config checked_run_config(const std::string& ini_file, const RunCommandLine& command_line,
                          const std::vector<std::string>& plugin_paths, std::string* note, double* timeout_s) {
  Config config = config_from_command_line(ini_file, command_line);
  PluginRegistry registry(plugin_paths);
  *note = drop_keys_of_unchosen_plugins(registry, config);
  Config resolved = config;
  resolved.validate(known_config_keys(registry, plugin_choice(resolved)));
  check_core_key_ranges(resolved);
  *timeout_s = resolved.get_real("comm.timeout_s");
  return config;
}

Config resolved_run_config(const std::string& ini_file, const RunCommandLine& command_line,
                           const std::vector<std::string>& plugin_paths) {
  std::string note;
  double timeout_s = 0;
  Config config = checked_run_config(ini_file, command_line, plugin_paths, &note, &timeout_s);
  PluginRegistry registry(plugin_paths);
  config.validate(known_config_keys(registry, plugin_choice(config)));
  return config;
}

bool refuse_low_open_file_limit() {
  // A rank under mpirun needs about 20 (Open MPI's shared memory, sockets and pipes; the plugins;
  // HDF5's files; the checkpoint directory's lock), one started alone about 28, as Open MPI
  // starts its own daemon; below 32 mpirun itself fails or hangs in its start-up.
  constexpr rlim_t kNeeded = 32;
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return false;
  // Too low a soft limit is raised towards the hard one, to Linux's usual 1024 at most: Open MPI
  // closes every descriptor up to the limit in each process it starts.
  if (limit.rlim_cur != RLIM_INFINITY && limit.rlim_cur < kNeeded && limit.rlim_cur < limit.rlim_max) {
    rlimit raised = limit;
    raised.rlim_cur = limit.rlim_max == RLIM_INFINITY ? 1024 : std::min<rlim_t>(limit.rlim_max, 1024);
    if (setrlimit(RLIMIT_NOFILE, &raised) == 0) limit = raised;
  }
  if (limit.rlim_cur == RLIM_INFINITY || limit.rlim_cur >= kNeeded) return false;
  if (launch_rank() == 0)
    std::fprintf(stderr,
                 "mgtrain: error: [rank 0] the open-file limit (ulimit -n) is %llu, hard limit %s, and a rank "
                 "needs at least %llu (Open MPI's connections, plugins, data and checkpoint files): raise it "
                 "(ulimit -n 1024) before mpirun\n",
                 static_cast<unsigned long long>(limit.rlim_cur),
                 limit.rlim_max == RLIM_INFINITY ? "unlimited" : std::to_string(limit.rlim_max).c_str(),
                 static_cast<unsigned long long>(kNeeded));
  return true;
}

int launch_rank() {
  for (const char* name : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"}) {
    const char* value = std::getenv(name);
    char* end = nullptr;
    if (value && *value) {
      const long rank = std::strtol(value, &end, 10);
      if (*end == '\0' && rank >= 0) return static_cast<int>(rank);
    }
  }
  return 0;
}

}  // namespace mgt::cli
