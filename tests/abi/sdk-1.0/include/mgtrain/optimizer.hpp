#pragma once
// The interface an optimizer plugin implements. It updates a contiguous range of the flat
// parameter buffer in place (all of it under all-reduce, one shard on a parameter server) and
// keeps its state in flat buffers of the same layout, so checkpoints slice them by parameter.
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "mgtrain/export.hpp"
#include "mgtrain/parameters.hpp"
#include "mgtrain/update_rule.hpp"

namespace mgt {

struct OptimizerStateBuffer {
  std::string name;  // "momentum", "exp_avg", ...
  float* data;       // `size` floats, parameter i at params[i].offset - range begin
};

class MGT_API Optimizer {
 public:
  virtual ~Optimizer() = default;
  // Allocates state for `size` floats of the flat buffer (zero-filled).
  virtual void setup(size_t size) = 0;
  // One update over the range on the host, params[i] -= f(grads[i], state[i]) (`size` as in
  // setup), for an optimizer that has no element update: called only when element_update() is
  // null, through apply_update(). Override it only in such an optimizer (it then trains on the
  // host alone). Where element_update() is not null the core never calls step(), so an override
  // there is never run: the update is stated once and every path runs that one statement. The
  // default runs the element update, as apply_update() does.
  virtual void step(float* params, const float* grads, size_t size);
  virtual double learning_rate() const = 0;
  // The trainer's schedule (train.lr_schedule) sets the rate before each update; the plugin's
  // optimizer.lr is the base rate the schedule scales.
  virtual void set_learning_rate(double lr) = 0;
  virtual std::vector<OptimizerStateBuffer> state_buffers() = 0;
  // The update written once (mgtrain/update_rule.hpp): apply_update() runs it on the host and an
  // executor that applies the update itself (the CPU backend's step, the GPU path) runs the
  // plugin's loop or compiles its text, with its state buffers in the order state_buffers() lists
  // them. Kept once asked for, so its result must depend on the configuration alone (the learning
  // rate comes with each call). Null: only the plugin's own step() on the host can update.
  virtual std::unique_ptr<ElementwiseUpdate> element_update() const { return nullptr; }
  // Which elements of the range the weight decay applies to (optimizer.weight_decay_on =
  // matrices: the weights of rank 2 and more, not biases or normalisation scales and shifts),
  // given by the core after setup(): decay_mask()[i] != 0 for a decayed element i; null when the
  // decay applies to every element. apply_update() and the executors pass it to the element
  // update.
  void set_decay_mask(std::vector<uint8_t> mask) { decay_mask_ = std::move(mask); }
  const uint8_t* decay_mask() const { return decay_mask_.empty() ? nullptr : decay_mask_.data(); }
  // The update of the range on the host, which the core (and a sync strategy that runs the
  // optimizer itself, as a parameter server's shards do) calls: element_update() run over the
  // range with state_buffers() and decay_mask(), counting step_count(); step() where there is no
  // element update. One entry point, so that no caller can pick the other form of an optimizer
  // that has both.
  void apply_update(float* params, const float* grads, size_t size);
  // Number of updates done so far (Adam's bias correction depends on it); restored on resume.
  int64_t step_count() const { return step_count_; }
  void set_step_count(int64_t n) { step_count_ = n; }

 protected:
  int64_t step_count_ = 0;
  std::vector<uint8_t> decay_mask_;

 private:
  // element_update(), asked for on the first host update (null: none), and room for its scalars.
  const ElementwiseUpdate* host_update();
  std::unique_ptr<ElementwiseUpdate> host_update_;
  std::vector<double> host_scalars_;  // empty until element_update() was asked for
};

}  // namespace mgt
