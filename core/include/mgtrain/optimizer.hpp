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
  // One update over the range: params[i] -= f(grads[i], state[i]); `size` as in setup. The
  // default runs element_update() over the range on the host, with state_buffers() as its state
  // and decay_mask(): the update is stated once, as the element update, and every path (this
  // step(), the GPU's compiled update) runs that one statement. Override step() only in an
  // optimizer that has no element update (it then trains on the host alone).
  virtual void step(float* params, const float* grads, size_t size);
  virtual double learning_rate() const = 0;
  // The trainer's schedule (train.lr_schedule) sets the rate before each update; the plugin's
  // optimizer.lr is the base rate the schedule scales.
  virtual void set_learning_rate(double lr) = 0;
  virtual std::vector<OptimizerStateBuffer> state_buffers() = 0;
  // The update written once (mgtrain/update_rule.hpp): the default step() runs it on the host and
  // an executor that applies the update itself (the GPU path) compiles it, with its state buffers
  // in the order state_buffers() lists them. Called once per optimizer and kept, so its result
  // must depend on the configuration alone (the learning rate comes with each call). Null: only
  // the plugin's own step() on the host can update.
  virtual std::unique_ptr<ElementwiseUpdate> element_update() const { return nullptr; }
  // Which elements of the range the weight decay applies to (optimizer.weight_decay_on =
  // matrices: the weights of rank 2 and more, not biases or normalisation scales and shifts),
  // given by the core after setup(): decay_mask()[i] != 0 for a decayed element i; null when the
  // decay applies to every element. The default step() and the executors pass it to the element
  // update.
  void set_decay_mask(std::vector<uint8_t> mask) { decay_mask_ = std::move(mask); }
  const uint8_t* decay_mask() const { return decay_mask_.empty() ? nullptr : decay_mask_.data(); }
  // Number of updates done so far (Adam's bias correction depends on it); restored on resume.
  int64_t step_count() const { return step_count_; }
  void set_step_count(int64_t n) { step_count_ = n; }

 protected:
  int64_t step_count_ = 0;
  std::vector<uint8_t> decay_mask_;

 private:
  // The default step()'s: element_update(), made on its first call, and room for its scalars.
  std::unique_ptr<ElementwiseUpdate> host_update_;
  std::vector<double> host_scalars_;
};

}  // namespace mgt
