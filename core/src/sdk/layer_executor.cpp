#include "layer_executor.hpp"

#include <algorithm>
#include <string>

#include "activation_blocks.hpp"
#include "fused_relu.hpp"
#include "layer_hints.hpp"
#include "mgtrain/error.hpp"
#include "shard_passes.hpp"

namespace mgt {

// Hands the layers the backend's operations and memory from the executor's current plan.
class LayerExecutor::Planner final : public LayerPlanner {
 public:
  Planner(BackendMemory& memory, bool bf16, int64_t shards) : memory_(memory), bf16_(bf16), shards_(shards) {}
  Ops& ops() override { return memory_.backend(); }
  void* allocate(size_t bytes) override {
    return memory_.device_bytes(bytes, "a buffer layer '" + planning_ + "' planned");
  }
  // A synchronous copy into the backend's memory: planning runs outside any recorded step.
  const void* upload(const void* host, size_t bytes) override {
    void* p = memory_.device_bytes(bytes, "constants layer '" + planning_ + "' uploaded");
    if (bytes > 0) memory_.backend().upload(p, host, bytes);
    return p;
  }
  void planning(const std::string& layer) { planning_ = layer; }
  bool bf16() const override { return bf16_; }
  int64_t shards() const override { return shards_; }

 private:
  BackendMemory& memory_;
  bool bf16_;
  int64_t shards_;
  std::string planning_;  // the layer whose plan() runs
};

LayerExecutor::LayerExecutor(kernels::Backend& backend, const std::vector<std::unique_ptr<Layer>>& layers, bool bf16,
                             bool counted)
    : backend_(backend), bf16_(bf16), memory_(std::make_unique<BackendMemory>(backend, counted)) {
  MGT_CHECK(!layers.empty(), ConfigError, "the model has no layers");
  for (const auto& owned : layers) {
    Layer* layer = owned.get();
    MGT_CHECK(layer != nullptr, Error, "LayerExecutor: null layer");
    layers_.push_back(layer);
    handles_.push_back(layer->param_handles());
    alias_.push_back(layer_hints::of(*layer, backend_).aliases_input ? 1 : 0);
  }
  while (first_with_params_ < layers_.size() && handles_[first_with_params_].empty()) ++first_with_params_;
}

Shape next_output_shape(const Layer* before, const Layer& layer, const Shape& input) {
  try {
    return layer.output_shape(input);
  } catch (const ConfigError& e) {
    if (!before) throw;
    throw ConfigError(std::string(e.what()) + "; that input is what layer '" + before->name() + "' before it gives (" +
                      shape_string(input) + ", by its output_shape())");
  }
}

LayerExecutor::~LayerExecutor() = default;

void LayerExecutor::plan(const Shape& input, int64_t shards) {
  if (input == input_shape_ && shards == shards_ && !acts_.empty()) return;
  const size_t n = layers_.size();
  // Shapes first, so a layer that does not fit is named before anything is allocated.
  std::vector<Shape> shapes;
  Shape s = input;
  const Layer* before = nullptr;
  for (Layer* layer : layers_) {
    shapes.push_back(s = next_output_shape(before, *layer, s));
    before = layer;
  }
  acts_.clear();
  grads_.clear();
  input_shape_.clear();
  memory_->release_all();
  memory_->guard(checked_mode());
  Planner executor_planner(*memory_, bf16_, shards);
  activation_blocks::Planner planner(executor_planner);
  // Convolutional activations stay in the backend's channel block between the layers that take
  // it; the model's input and its logits are NCHW, which always fits (every activation NCHW).
  // (bf16 convolutions are NCHW only.)
  const int64_t block = bf16_ ? 1 : backend_.channel_block();
  const std::vector<int64_t> blocks = activation_blocks::choose(layers_, backend_, input, shapes, block, 1, 1).value();
  shards_ = shards;
  whole_.assign(n, 1);
  planned_.assign(n, shard_passes::PlannedState());
  acts_.resize(n);
  grads_.resize(n);
  // A layer runs in place over the output of the one before when that output is a buffer of its
  // own which no backward reads: the one before does not, and none after it sees it either.
  in_place_.assign(n, 0);
  for (size_t i = 1; i < n; ++i)
    in_place_[i] = !alias_[i] && !alias_[i - 1] && !in_place_[i - 1] &&
                   layer_hints::of(*layers_[i], backend_).runs_in_place &&
                   !layer_hints::of(*layers_[i - 1], backend_).backward_reads_output;
  // The layer before an in-place ReLU may run it: the ReLU is then called neither in forward nor
  // in backward, its output and gradient being the same memory as the layer's.
  fused_.assign(n, 0);
  for (size_t i = 1; i < n; ++i)
    fused_[i] = fused_relu::runs_next(*layers_[i - 1], *layers_[i], in_place_[i], /*gradient_in_place=*/true, backend_);
  Shape in = input;
  for (size_t i = 0; i < n; ++i) {
    executor_planner.planning(layers_[i]->name());
    planner.set_blocks(i == 0 ? 1 : blocks[i - 1], blocks[i]);
    planner.set_fused_relu(i + 1 < n && fused_[i + 1]);
    whole_[i] = shard_passes::plan(*layers_[i], planner, in, planned_[i]);
    // An aliasing layer's view is pointed at its input on each forward.
    float* out = alias_[i]      ? nullptr
                 : in_place_[i] ? acts_[i - 1].data()
                                : static_cast<float*>(memory_->device_bytes(
                                      static_cast<size_t>(shape_numel(shapes[i])) * sizeof(float),
                                      "the output of layer '" + layers_[i]->name() + "' " + shape_string(shapes[i])));
    acts_[i] = Tensor::view(out, shapes[i]);
    in = shapes[i];
  }
  // grads_[i] is the input gradient of layer i + 1: the same memory as grads_[i + 1] when that
  // layer aliases or runs in place. Below the first layer with parameters no gradient is needed.
  // Backward reads only grads_[i + 1] while it writes grads_[i], so two buffers taken in turn
  // hold them all: slot[i] says which.
  std::vector<int> slot(n, -1);
  size_t slot_numel[2] = {0, 0};
  for (size_t i = n; i-- > 0;) {
    if (i + 1 < n && (alias_[i + 1] || in_place_[i + 1]))
      slot[i] = slot[i + 1];
    else if (i + 1 == n)
      slot[i] = 0;
    else if (i >= first_with_params_)
      slot[i] = 1 - slot[i + 1];
    if (slot[i] >= 0) slot_numel[slot[i]] = std::max(slot_numel[slot[i]], static_cast<size_t>(shape_numel(shapes[i])));
  }
  float* slot_memory[2];
  for (int k = 0; k < 2; ++k)
    slot_memory[k] = static_cast<float*>(
        memory_->device_bytes(slot_numel[k] * sizeof(float),
                              "a gradient buffer between layers (" + std::to_string(slot_numel[k]) + " floats)"));
  for (size_t i = 0; i < n; ++i) grads_[i] = Tensor::view(slot[i] >= 0 ? slot_memory[slot[i]] : nullptr, shapes[i]);
  input_ = Tensor::view(nullptr, input);
  input_shape_ = input;
  output_shape_ = shapes.back();
  forwarded_ = false;
}

const Tensor& LayerExecutor::forward(const float* input, ParameterStore& store, const StepContext& ctx) {
  MGT_CHECK(!acts_.empty(), Error, "LayerExecutor::forward before plan");
  MGT_CHECK(std::max<int64_t>(ctx.shards, 1) == shards_, Error,
            "LayerExecutor::forward: a pass of " + std::to_string(ctx.shards) + " micro-shards, planned for " +
                std::to_string(shards_));
  input_.rebind(const_cast<float*>(input));
  const LayerRun run{backend_, store, ctx};
  const Tensor* x = &input_;
  for (size_t i = 0; i < layers_.size(); ++i) {
    if (alias_[i])
      acts_[i].rebind(const_cast<float*>(x->data()));
    else if (fused_[i])
      shard_passes::ran_before(*layers_[i], run, acts_[i]);
    else
      shard_passes::forward(*layers_[i], run, *x, acts_[i], whole_[i], planned_[i]);
    if (checked_mode()) check_guards(*layers_[i], "forward");
    x = &acts_[i];
  }
  forwarded_ = true;
  return acts_.back();
}

float* LayerExecutor::logits_grad() {
  MGT_CHECK(!grads_.empty(), Error, "LayerExecutor::logits_grad before plan");
  return grads_.back().data();
}

void LayerExecutor::backward(ParameterStore& store, const StepContext& ctx,
                             const std::function<void(const std::vector<ParamHandle>&)>& ready) {
  MGT_CHECK(forwarded_, Error, "LayerExecutor::backward before forward");
  const LayerRun run{backend_, store, ctx};
  for (size_t i = layers_.size(); i-- > first_with_params_;) {
    if (!alias_[i] && !fused_[i]) {
      const Tensor& in = i == 0 ? input_ : acts_[i - 1];
      // Below the first layer with parameters no input gradient is needed (e.g. fc1's dx after a
      // leading Flatten would be a wasted GEMM).
      Tensor* dx = i > first_with_params_ ? &grads_[i - 1] : nullptr;
      // A layer that runs the ReLU after it gets that ReLU's output gradient (the same memory).
      const Tensor& dy = i + 1 < layers_.size() && fused_[i + 1] ? grads_[i + 1] : grads_[i];
      shard_passes::backward(*layers_[i], run, in, acts_[i], dy, dx, whole_[i], planned_[i]);
      if (checked_mode()) check_guards(*layers_[i], "backward");
    }
    if (ready && !handles_[i].empty()) ready(handles_[i]);
  }
}

void LayerExecutor::check_guards(const Layer& layer, const char* pass) const {
  const std::string damage = memory_->damaged_guard();
  if (damage.empty()) return;
  throw Error("checked mode (MGTRAIN_CHECKED=1): layer '" + layer.name() + "' wrote past the memory it was given, in " +
              pass + ": " + damage +
              "; a layer writes its output's numel() floats and the bytes its plan() allocated, no more");
}

}  // namespace mgt
