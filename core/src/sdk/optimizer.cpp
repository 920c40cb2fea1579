#include "mgtrain/optimizer.hpp"

#include <string>

#include "mgtrain/error.hpp"

namespace mgt {

// The host's step is derived from the element update so that a plugin states its update once:
// the loop that runs is the plugin's own instantiation of run_element_update<Rule> (behind
// ElementwiseUpdate::run), vectorized as before, at the cost of one virtual call per step.
void Optimizer::step(float* params, const float* grads, size_t size) {
  if (!host_update_) host_update_ = element_update();
  MGT_CHECK(host_update_ != nullptr, Error,
            "optimizer: neither step() nor element_update() is defined; a plugin states its update in "
            "element_update() (mgtrain/update_rule.hpp)");
  const std::vector<OptimizerStateBuffer> buffers = state_buffers();
  const int states = host_update_->states();
  MGT_CHECK(buffers.size() == static_cast<size_t>(states), Error,
            "optimizer '" + host_update_->name() + "': element_update() reads " + std::to_string(states) +
                " state buffers, state_buffers() lists " + std::to_string(buffers.size()) +
                "; they must be the same buffers, in that order");
  float* state[kMaxUpdateStates] = {};
  for (int k = 0; k < states; ++k) state[k] = buffers[static_cast<size_t>(k)].data;
  // Doubles, so that the scalars' struct is aligned whatever its fields.
  host_scalars_.resize((host_update_->scalars_bytes() + sizeof(double) - 1) / sizeof(double) + 1);
  ++step_count_;  // update number step_count_, from 1; restored on resume
  host_update_->scalars(learning_rate(), step_count_, host_scalars_.data());
  host_update_->run(params, grads, state, host_scalars_.data(), size, decay_mask());
}

}  // namespace mgt
