#include "mgtrain/optimizer.hpp"

#include <string>

#include "mgtrain/error.hpp"

namespace mgt {

// Asked for once and kept; host_scalars_ records that it was asked (a null answer included), since
// Optimizer's members are part of the plugin ABI and cannot grow a flag.
const ElementwiseUpdate* Optimizer::host_update() {
  if (host_scalars_.empty()) {
    host_update_ = element_update();
    // Doubles, so that the scalars' struct is aligned whatever its fields.
    host_scalars_.resize(host_update_ ? (host_update_->scalars_bytes() + sizeof(double) - 1) / sizeof(double) + 1 : 1);
  }
  return host_update_.get();
}

// Every host update goes through here, so an optimizer with an element update is updated by it
// alone, whatever its step() does: the loop that runs is the plugin's own instantiation of
// run_element_update<Rule> (behind ElementwiseUpdate::run), vectorized, at the cost of one virtual
// call per update.
void Optimizer::apply_update(float* params, const float* grads, size_t size) {
  const ElementwiseUpdate* update = host_update();
  if (!update) return step(params, grads, size);
  const std::vector<OptimizerStateBuffer> buffers = state_buffers();
  const int states = update->states();
  MGT_CHECK(buffers.size() == static_cast<size_t>(states), Error,
            "optimizer '" + update->name() + "': element_update() reads " + std::to_string(states) +
                " state buffers, state_buffers() lists " + std::to_string(buffers.size()) +
                "; they must be the same buffers, in that order");
  float* state[kMaxUpdateStates] = {};
  for (int k = 0; k < states; ++k) state[k] = buffers[static_cast<size_t>(k)].data;
  ++step_count_;  // update number step_count_, from 1; restored on resume
  update->scalars(learning_rate(), step_count_, host_scalars_.data());
  update->run(params, grads, state, host_scalars_.data(), size, decay_mask());
}

void Optimizer::step(float* params, const float* grads, size_t size) {
  MGT_CHECK(host_update() != nullptr, Error,
            "optimizer: neither step() nor element_update() is defined; a plugin states its update in "
            "element_update() (mgtrain/update_rule.hpp)");
  apply_update(params, grads, size);
}

}  // namespace mgt
