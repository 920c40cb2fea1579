#pragma once
// An optimizer's update, written once and run by every backend. The plugin states the update of
// one element and the scalars it reads:
//
//   MGT_UPDATE_SCALARS(LionScalars, float lr; float decay; float b1; float b2;)
//   MGT_ELEMENT_UPDATE(LionUpdate, LionScalars, 1,
//     const float c = s.b1 * state0 + (1.0f - s.b1) * grad;
//     param = (decayed ? param * s.decay : param) - s.lr * (c > 0.0f ? 1.0f : (c < 0.0f ? -1.0f : 0.0f));
//     state0 = s.b2 * state0 + (1.0f - s.b2) * grad;)
//
// The same text becomes a C++ function, compiled with the plugin for the CPU (Optimizer's
// apply_update() and the CPU backend run it), and CUDA source that a GPU backend compiles at run time
// (NVRTC) into its update kernel: no CUDA in the plugin, one definition for every device. In the
// body, `param`, `state0`..`state3` (float&), `grad` (float), `decayed` (bool) and `s` (the
// scalars) are in scope. `decayed` says whether the optimizer's weight decay applies to the element
// (optimizer.weight_decay_on: to every parameter, or to the weight matrices alone, not to biases
// and normalisation scales and shifts); a rule with a weight decay applies it where it is true.
// Use only arithmetic and the C math functions of float (sqrtf, expf, fabsf, ...), which both
// compilers know. Neither side fuses a*b+c, so both round every operation as written.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>

#include "mgtrain/export.hpp"

namespace mgt {

// At most this many state buffers per element (AdamW uses two).
inline constexpr int kMaxUpdateStates = 4;

// Declares `struct Name { fields }` of floats (or other plain types) and keeps its text.
#define MGT_UPDATE_SCALARS(Name, ...)                                               \
  struct Name {                                                                     \
    __VA_ARGS__                                                                     \
    static constexpr const char* name = #Name;                                      \
    static constexpr const char* source = "struct " #Name " { " #__VA_ARGS__ " };"; \
  };

// Declares the update of one element as `struct Name` with `apply` (for the host) and its text
// (for a GPU's run-time compiler); `States` state buffers, in the order the optimizer lists them.
#define MGT_ELEMENT_UPDATE(Name, ScalarsType, States, ...)                                                         \
  struct Name {                                                                                                    \
    using Scalars = ScalarsType;                                                                                   \
    static constexpr int states = States;                                                                          \
    static_assert(States >= 0 && States <= ::mgt::kMaxUpdateStates, "too many state buffers");                     \
    static inline void apply(float& param, float grad, float& state0, float& state1, float& state2, float& state3, \
                             bool decayed, const Scalars& s) {                                                     \
      (void)state0, (void)state1, (void)state2, (void)state3, (void)s, (void)grad, (void)decayed;                  \
      __VA_ARGS__                                                                                                  \
    }                                                                                                              \
    static constexpr const char* body = #__VA_ARGS__;                                                              \
  };

// An update made from such a rule, for an executor: its scalars at a step, the loop on the host,
// and its source for a device's compiler.
class MGT_API ElementwiseUpdate {
 public:
  virtual ~ElementwiseUpdate() = default;
  // A name for messages ("adamw").
  virtual const std::string& name() const = 0;
  virtual int states() const = 0;
  virtual size_t scalars_bytes() const = 0;
  // Writes the scalars of update number `update` (from 1) at learning rate `lr` to `out`
  // (scalars_bytes() of them): worked out on the host, read by every element.
  virtual void scalars(double lr, int64_t update, void* out) const = 0;
  // The update over n elements of host memory; state[k] for k < states(); decayed[i] != 0 where
  // the weight decay applies to element i (null: to every element).
  virtual void run(float* params, const float* grads, float* const* state, const void* scalars, size_t n,
                   const uint8_t* decayed) const = 0;
  // CUDA C++ for a run-time compiler: the scalars' struct as `mgt_scalars`, and
  // `__device__ void mgt_apply(float& param, float grad, float& state0, .., float& state3,
  // bool decayed, const mgt_scalars& s)`.
  virtual std::string device_source() const = 0;
};

// The host loop of a rule: one pass over memory that the compiler vectorizes (the state
// references of unused buffers point at a local). `decayed`: as in ElementwiseUpdate::run; an
// optimizer's apply_update() passes its decay_mask().
template <typename Rule, bool Masked>
void run_element_update_loop(float* __restrict params, const float* __restrict grads, float* const* state,
                             const typename Rule::Scalars& s, size_t n, const uint8_t* __restrict decayed) {
  float unused[kMaxUpdateStates] = {};
  float* __restrict s0 = Rule::states > 0 ? state[0] : nullptr;
  float* __restrict s1 = Rule::states > 1 ? state[1] : nullptr;
  float* __restrict s2 = Rule::states > 2 ? state[2] : nullptr;
  float* __restrict s3 = Rule::states > 3 ? state[3] : nullptr;
  for (size_t i = 0; i < n; ++i) {
    const bool d = Masked ? decayed[i] != 0 : true;
    if constexpr (Rule::states == 0)
      Rule::apply(params[i], grads[i], unused[0], unused[1], unused[2], unused[3], d, s);
    else if constexpr (Rule::states == 1)
      Rule::apply(params[i], grads[i], s0[i], unused[1], unused[2], unused[3], d, s);
    else if constexpr (Rule::states == 2)
      Rule::apply(params[i], grads[i], s0[i], s1[i], unused[2], unused[3], d, s);
    else if constexpr (Rule::states == 3)
      Rule::apply(params[i], grads[i], s0[i], s1[i], s2[i], unused[3], d, s);
    else
      Rule::apply(params[i], grads[i], s0[i], s1[i], s2[i], s3[i], d, s);
  }
}

template <typename Rule>
void run_element_update(float* params, const float* grads, float* const* state, const typename Rule::Scalars& s,
                        size_t n, const uint8_t* decayed) {
  if (decayed)
    run_element_update_loop<Rule, true>(params, grads, state, s, n, decayed);
  else
    run_element_update_loop<Rule, false>(params, grads, state, s, n, nullptr);
}

// The ElementwiseUpdate of `Rule`, with the plugin's function for its scalars.
template <typename Rule>
class ElementwiseUpdateOf final : public ElementwiseUpdate {
 public:
  using Scalars = typename Rule::Scalars;
  using ScalarsAt = std::function<Scalars(double lr, int64_t update)>;
  ElementwiseUpdateOf(std::string name, ScalarsAt at) : name_(std::move(name)), at_(std::move(at)) {}
  const std::string& name() const override { return name_; }
  int states() const override { return Rule::states; }
  size_t scalars_bytes() const override { return sizeof(Scalars); }
  void scalars(double lr, int64_t update, void* out) const override { *static_cast<Scalars*>(out) = at_(lr, update); }
  void run(float* params, const float* grads, float* const* state, const void* scalars, size_t n,
           const uint8_t* decayed) const override {
    run_element_update<Rule>(params, grads, state, *static_cast<const Scalars*>(scalars), n, decayed);
  }
  std::string device_source() const override {
    return std::string(Scalars::source) + "\ntypedef " + Scalars::name + " mgt_scalars;\n" +
           "__device__ __forceinline__ void mgt_apply(float& param, float grad, float& state0, float& state1, " +
           "float& state2, float& state3, bool decayed, const mgt_scalars& s) {\n(void)decayed;\n" + Rule::body +
           "\n}\n";
  }

 private:
  std::string name_;
  ScalarsAt at_;
};

// make_element_update<AdamWUpdate>("adamw", [=](double lr, int64_t update) { return AdamWScalars{...}; })
template <typename Rule>
std::unique_ptr<ElementwiseUpdate> make_element_update(std::string name,
                                                       typename ElementwiseUpdateOf<Rule>::ScalarsAt at) {
  return std::make_unique<ElementwiseUpdateOf<Rule>>(std::move(name), std::move(at));
}

}  // namespace mgt
