#pragma once
// The one executor of a stack of layers, on any backend: the CPU path runs a SequentialModel
// with it in host memory, the compiled step (GPU path) in device memory. It plans the layers for
// an input shape (activations and their gradients in the backend's memory, each layer's own
// plans and buffers), then runs forward and backward over the backend's operations. Layers that
// alias their input (Flatten) share its memory and are not called.
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "backend_memory.hpp"
#include "kernels/backend.hpp"
#include "mgtrain/layers.hpp"
#include "shard_passes.hpp"

namespace mgt {

// `layer`'s output for `input`, the output of `before` (null: the model's input). A layer that
// refuses its input is named by its own message; the layer whose output_shape() gave that input
// is named after it, since the mistake is as often there (a plugin layer that says it gives what
// it does not).
Shape next_output_shape(const Layer* before, const Layer& layer, const Shape& input);

class LayerExecutor {
 public:
  // The layers (a SequentialModel's) outlive the executor. counted: as BackendMemory's.
  LayerExecutor(kernels::Backend& backend, const std::vector<std::unique_ptr<Layer>>& layers, bool bf16 = false,
                bool counted = true);
  ~LayerExecutor();
  LayerExecutor(const LayerExecutor&) = delete;
  LayerExecutor& operator=(const LayerExecutor&) = delete;

  // Plans every layer for `input` (batch first) unless they are planned for it already; throws
  // ConfigError naming the layer whose input does not fit. Frees the previous plan's memory. With
  // `shards` > 1 the passes hold that many deterministic micro-shards (StepContext::shards), which
  // layers that are not row-wise take one at a time (shard_passes.hpp).
  void plan(const Shape& input, int64_t shards = 1);
  const Shape& planned_input() const { return input_shape_; }
  const Shape& output_shape() const { return output_shape_; }

  // Forward from `input` (the planned shape, backend memory); the logits stay valid until the
  // next forward.
  const Tensor& forward(const float* input, ParameterStore& store, const StepContext& ctx);
  // Where the gradient of the logits goes before backward (the loss writes it there).
  float* logits_grad();
  // Backward from logits_grad() over the latest forward, adding parameter gradients; after each
  // layer with parameters, `ready` gets its handles (their gradients are final for this pass).
  void backward(ParameterStore& store, const StepContext& ctx,
                const std::function<void(const std::vector<ParamHandle>&)>& ready);
  // Every layer's param_handles(), in layer order.
  const std::vector<std::vector<ParamHandle>>& handles() const { return handles_; }

 private:
  class Planner;
  // Checked mode: throws naming `layer` when a guard of the executor's memory changed in `pass`.
  void check_guards(const Layer& layer, const char* pass) const;
  kernels::Backend& backend_;
  std::vector<Layer*> layers_;
  bool bf16_;
  std::unique_ptr<BackendMemory> memory_;
  Shape input_shape_, output_shape_;
  std::vector<std::vector<ParamHandle>> handles_;
  int64_t shards_ = 1;
  std::vector<char> whole_;  // layer i takes a pass of several shards whole (shard_passes::whole)
  std::vector<shard_passes::PlannedState> planned_;  // layer i's planned memory, kept per shard
  std::vector<char> alias_;                          // layer i's output is its input's memory
  std::vector<char> in_place_;                       // layer i runs in place over layer i - 1's output
  std::vector<char> fused_;                          // layer i is a ReLU layer i - 1 runs (fused_relu.hpp)
  std::vector<Tensor> acts_;                         // acts_[i]: output of layer i (a view of backend memory)
  std::vector<Tensor> grads_;                        // grads_[i]: gradient w.r.t. the output of layer i
  Tensor input_;                                     // a view of the latest forward's input
  size_t first_with_params_ = 0;                     // layers before it need no input gradient
  bool forwarded_ = false;
};

}  // namespace mgt
