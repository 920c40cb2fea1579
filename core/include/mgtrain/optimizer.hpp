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
  // One update over the range: params[i] -= f(grads[i], state[i]); `size` as in setup.
  virtual void step(float* params, const float* grads, size_t size) = 0;
  virtual double learning_rate() const = 0;
  // The trainer's schedule (train.lr_schedule) sets the rate before each update; the plugin's
  // optimizer.lr is the base rate the schedule scales.
  virtual void set_learning_rate(double lr) = 0;
  virtual std::vector<OptimizerStateBuffer> state_buffers() = 0;
  // The update written once (mgtrain/update_rule.hpp), for an executor that applies it itself
  // (the GPU path), with its state buffers in the order state_buffers() lists them; null: only
  // this plugin's step() on the host can update.
  virtual std::unique_ptr<ElementwiseUpdate> element_update() const { return nullptr; }
  // Which elements of the range the weight decay applies to (optimizer.weight_decay_on =
  // matrices: the weights of rank 2 and more, not biases or normalisation scales and shifts),
  // given by the core after setup(): decay_mask()[i] != 0 for a decayed element i; null when the
  // decay applies to every element. A step() passes it to run_element_update, as executors pass
  // it to the element update.
  void set_decay_mask(std::vector<uint8_t> mask) { decay_mask_ = std::move(mask); }
  const uint8_t* decay_mask() const { return decay_mask_.empty() ? nullptr : decay_mask_.data(); }
  // Number of updates done so far (Adam's bias correction depends on it); restored on resume.
  int64_t step_count() const { return step_count_; }
  void set_step_count(int64_t n) { step_count_ = n; }

 protected:
  int64_t step_count_ = 0;
  std::vector<uint8_t> decay_mask_;
};

}  // namespace mgt
