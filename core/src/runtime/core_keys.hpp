#pragma once
// The config keys the core itself reads. Plugins declare theirs in their descriptors; the union
// is what Config::validate() accepts and what `mgtrain config-keys` documents.
#include <vector>

#include "mgtrain/config.hpp"

namespace mgt {

const std::vector<ConfigKey>& core_config_keys();

// Checks the core keys whose values are used as a narrower type than the table's (an int, a
// duration, a byte count) against what that type holds. Throws ConfigError naming the key, its
// source, the largest value allowed and the value given; and train.label_smoothing against [0, 1).
// Call after Config::validate().
void check_core_key_ranges(const Config& config);

}  // namespace mgt
