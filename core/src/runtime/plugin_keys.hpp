#pragma once
// Config keys of plugins a config does not choose: an INI written for one optimizer (model, sync
// strategy) run with another chosen on the command line.
#include <string>

#include "loader/plugin_loader.hpp"
#include "mgtrain/config.hpp"

namespace mgt {

// Removes from `config` each key of a plugin section ([model], [optimizer], [sync], [schedule])
// that neither the core nor the chosen plugin of that kind (a schedule: train.lr_schedule's)
// declares but another plugin of that kind in the search path does, and returns one line naming
// them and their plugins ("" when none). A key no plugin declares stays, for validation to refuse;
// so does everything when a chosen plugin cannot be loaded, whose error validation reports.
std::string drop_keys_of_unchosen_plugins(PluginRegistry& registry, Config& config);

}  // namespace mgt
