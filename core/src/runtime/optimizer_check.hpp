#pragma once
// An optimizer plugin states its update twice: step(), which the host runs (a parameter server's
// shards, and an optimizer without an element update), and element_update(), which every other
// executor runs (all-reduce in place, ZeRO, deterministic mode, the GPU). Which one a run uses
// depends on sync.name and the device, so a plugin whose two differ would train another algorithm
// under another strategy, silently. Before step 1 both run the same updates on a small probe and a
// difference in any bit is refused.
#include <string>

#include "mgtrain/optimizer.hpp"

namespace mgt {

// `by_step` and `by_rule` are two fresh instances of plugin `name` from the run's config. Three
// updates of a probe of parameters and gradients (every other element outside the weight decay's
// mask) through by_step.step() and through by_rule's element update, with by_rule's state buffers;
// throws ConfigError naming the plugin, the update and the first element that differs, or what
// step() threw. Nothing is checked for an optimizer without an element update.
void check_step_matches_element_update(Optimizer& by_step, Optimizer& by_rule, const std::string& name);

}  // namespace mgt
