#include "command_line_config.hpp"

#include "mgtrain/error.hpp"

namespace mgt::cli {

Config config_from_command_line(const std::string& ini_file,
                                const boost::program_options::parsed_options& parsed) {
  Config config = Config::from_ini_file(ini_file);
  for (const auto& opt : parsed.options) {
    if (!opt.unregistered) continue;
    const std::string token = opt.original_tokens.empty() ? opt.string_key : opt.original_tokens[0];
    if (opt.string_key.find('.') == std::string::npos || opt.value.size() != 1)
      throw ConfigError("unexpected argument '" + token + "'; config overrides are written --section.key=value");
    config.set(opt.string_key, opt.value[0], "command line");
  }
  return config;
}

}  // namespace mgt::cli
