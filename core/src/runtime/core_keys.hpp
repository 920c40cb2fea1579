#pragma once
// The config keys the core itself reads. Plugins declare theirs in their descriptors; the union
// is what Config::validate() accepts and what `mgtrain config-keys` documents.
#include <vector>

#include "mgtrain/config.hpp"

namespace mgt {

const std::vector<ConfigKey>& core_config_keys();

}  // namespace mgt
