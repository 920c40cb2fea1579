#include "runtime/optimizer_check.hpp"

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <vector>

#include "mgtrain/error.hpp"
#include "mgtrain/update_rule.hpp"

namespace mgt {

namespace {

// 37 elements: more than a vector register's lanes, with a tail.
constexpr size_t kProbe = 37;
constexpr int kUpdates = 3;

// Values in [-1, 1) from a fixed linear congruential sequence; every seventh one is zero (a
// gradient of zero is where sign-based and momentum updates branch).
std::vector<float> probe_values(uint32_t state) {
  std::vector<float> v(kProbe);
  for (size_t i = 0; i < kProbe; ++i) {
    state = state * 1664525u + 1013904223u;
    v[i] = i % 7 == 3 ? 0.0f : static_cast<float>(state >> 8) / static_cast<float>(1u << 23) - 1.0f;
  }
  return v;
}

std::string number(float v) {
  char text[32];
  std::snprintf(text, sizeof text, "%.9g", static_cast<double>(v));
  return text;
}

}  // namespace

void check_step_matches_element_update(Optimizer& by_step, Optimizer& by_rule, const std::string& name) {
  const auto update = by_rule.element_update();
  if (!update) return;
  const std::string plugin = "optimizer '" + name + "'";
  const std::string fix =
      "mgtrain runs step() or the element update depending on sync.name and the device, so they must be one "
      "update: run the rule in step() (mgt::run_element_update<Rule>(params, grads, state, scalars, size, "
      "decay_mask()), mgtrain/update_rule.hpp)";
  by_step.setup(kProbe);
  by_rule.setup(kProbe);
  std::vector<uint8_t> mask(kProbe);
  for (size_t i = 0; i < kProbe; ++i) mask[i] = i % 2 == 0 ? 1 : 0;
  by_step.set_decay_mask(mask);
  by_rule.set_decay_mask(mask);
  auto rule_buffers = by_rule.state_buffers();
  MGT_CHECK(rule_buffers.size() == static_cast<size_t>(update->states()), ConfigError,
            plugin + ": element_update() reads " + std::to_string(update->states()) +
                " state buffers, state_buffers() " + "lists " + std::to_string(rule_buffers.size()) +
                "; they must be the same buffers, in that order");
  std::vector<float*> state;
  for (auto& b : rule_buffers) state.push_back(b.data);
  std::vector<float> p_step = probe_values(1), p_rule = p_step;
  std::vector<double> scalars((update->scalars_bytes() + sizeof(double) - 1) / sizeof(double) + 1);
  for (int t = 1; t <= kUpdates; ++t) {
    const std::vector<float> grads = probe_values(100u + static_cast<uint32_t>(t));
    try {
      by_step.step(p_step.data(), grads.data(), kProbe);
    } catch (const std::exception& e) {
      throw ConfigError(plugin + ": step() failed on a probe of " + std::to_string(kProbe) + " parameters (" +
                        e.what() + "), while its element_update() ran; " + fix);
    }
    update->scalars(by_rule.learning_rate(), t, scalars.data());
    update->run(p_rule.data(), grads.data(), state.data(), scalars.data(), kProbe, mask.data());
    for (size_t i = 0; i < kProbe; ++i)
      if (std::memcmp(&p_step[i], &p_rule[i], sizeof(float)) != 0)
        throw ConfigError(plugin + ": step() and element_update() give different updates: after update " +
                          std::to_string(t) + " of a probe, parameter element " + std::to_string(i) + " is " +
                          number(p_step[i]) + " by step() and " + number(p_rule[i]) + " by the element update; " + fix);
    const auto step_buffers = by_step.state_buffers();
    for (size_t k = 0; k < step_buffers.size() && k < state.size(); ++k)
      for (size_t i = 0; i < kProbe; ++i)
        if (std::memcmp(&step_buffers[k].data[i], &state[k][i], sizeof(float)) != 0)
          throw ConfigError(plugin + ": step() and element_update() keep different state: after update " +
                            std::to_string(t) + " of a probe, " + step_buffers[k].name + " element " +
                            std::to_string(i) + " is " + number(step_buffers[k].data[i]) + " by step() and " +
                            number(state[k][i]) + " by the element update; " + fix);
  }
}

}  // namespace mgt
