#pragma once
// The run's configuration as `mgtrain train`, `bench`, `verify` and `doctor` take it: the INI file
// of --config, then each --section.key=value on the command line over it.
#include <boost/program_options.hpp>

#include <optional>
#include <string>
#include <vector>

#include "mgtrain/config.hpp"

namespace mgt::cli {

// A command line of a command that takes a config, parsed before MPI starts. Under mpirun every
// rank parses the same line, so a syntax error is kept here rather than thrown: the caller raises
// it once MPI is up, inside agree(), and the lowest rank alone reports it.
struct RunCommandLine {
  std::optional<boost::program_options::parsed_options> parsed;  // the options but the overrides
  boost::program_options::variables_map vm;
  std::vector<std::string> overrides;  // every "--section.key[=value]", in the order given
  std::string error;                   // "" when the line parsed
};

// Takes the `--section.key=value` overrides out (boost refuses "--section.key=" with nothing after
// the '=', which must set the key to the empty value) and parses the rest with `desc`, allowing
// unregistered options so they can be reported as misspelt overrides.
RunCommandLine parse_run_command_line(const std::string& command, const std::vector<std::string>& args,
                                      const boost::program_options::options_description& desc);

// The INI file, then each override over it: "--data.test=" sets data.test to the empty value, as
// `test =` in the file does. Throws ConfigError naming an argument that is not an override.
Config config_from_command_line(const std::string& ini_file, const RunCommandLine& command_line);

// The run's config as every command that takes one starts from it: the file and overrides, the
// keys of plugins the config does not choose dropped (`note` names them), then every key checked
// as a run checks it (on a copy: the config is returned as given, without defaults). Called inside
// agree(), so a bad key ends every rank before any command's own work, where ranks part ways.
// `timeout_s` is the validated comm.timeout_s, the deadline of the command's waits.
Config checked_run_config(const std::string& ini_file, const RunCommandLine& command_line,
                          const std::vector<std::string>& plugin_paths, std::string* note, double* timeout_s);

// checked_run_config's config with every key's default filled in: what a run would read, for a
// command that starts runs rather than being one (`mgtrain launch`).
Config resolved_run_config(const std::string& ini_file, const RunCommandLine& command_line,
                           const std::vector<std::string>& plugin_paths);

// This process's rank as the launcher (mpirun, srun) announced it, for an error printed before or
// without MPI: 0 when not launched as one of several ranks.
int launch_rank();

// Before MPI_Init, in every command that runs over MPI: raises an open-file soft limit below what
// a rank needs towards the hard one, and where that is too low, returns true after rank 0 alone (no
// rank can tell the others yet) printed the one line that says so; the caller exits with 2. Below
// it Open MPI's MPI_Init fails with dozens of lines and no word from mgtrain.
bool refuse_low_open_file_limit();

}  // namespace mgt::cli
