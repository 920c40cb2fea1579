#pragma once
// The run's configuration as `mgtrain train`, `bench`, `verify` and `doctor` take it: the INI file
// of --config, then each --section.key=value on the command line over it.
#include <boost/program_options.hpp>

#include <string>

#include "mgtrain/config.hpp"

namespace mgt::cli {

// `parsed` was parsed with allow_unregistered(): its unregistered options are the overrides.
// Throws ConfigError naming an argument that is not one.
Config config_from_command_line(const std::string& ini_file,
                                const boost::program_options::parsed_options& parsed);

}  // namespace mgt::cli
