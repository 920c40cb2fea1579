#pragma once
// The interface a sync-strategy plugin implements: how the ranks' gradients become the gradient
// the optimizer applies (all-reduce, accumulation over micro-batches, a parameter server).
#include <cstdint>
#include <vector>

#include "mgtrain/communicator.hpp"
#include "mgtrain/parameters.hpp"

namespace mgt {

class SyncStrategy {
 public:
  virtual ~SyncStrategy() = default;
  // Called once after the parameter store is finalized, before step 1.
  virtual void setup(Communicator& comm, ParameterStore& store) = 0;
  // Micro-batches per optimizer step; the global batch is world * micro-batch * this.
  virtual int64_t accumulation_steps() const { return 1; }
  // Before forward of micro-batch `micro_step` (0-based within the step).
  virtual void begin_micro_batch(int64_t micro_step) { (void)micro_step; }
  // During backward: these gradients are final for this micro-batch.
  virtual void gradients_ready(const std::vector<ParamHandle>& handles) { (void)handles; }
  // After backward of micro-batch `micro_step` (0-based within the step). Returns true when the
  // gradient buffer holds the sum over all ranks and micro-batches and the optimizer should step.
  virtual bool end_backward(int64_t micro_step) = 0;
};

}  // namespace mgt
