#include "shard_passes.hpp"

#include <string>

#include "layer_hints.hpp"
#include "mgtrain/error.hpp"

namespace mgt::shard_passes {
namespace {

// Shard `s` of a pass of `shards`: a view of its rows.
Tensor slice(const Tensor& t, int64_t shards, int64_t s) {
  Shape shape = t.shape();
  shape[0] /= shards;
  const int64_t numel = shape_numel(shape);
  float* data = t.data() ? const_cast<float*>(t.data()) + s * numel : nullptr;
  return Tensor::view(data, shape);
}

// The step as one shard of the pass sees it.
StepContext shard_context(const StepContext& pass, int64_t rows, int64_t s) {
  StepContext c = pass;
  c.shards = 1;
  c.first_sample = pass.first_sample + s * rows;
  return c;
}

// For the duration of one shard's backward: the store's gradient is that shard's buffer of the
// sink, and the sink is out of the store, so that every gradient (a Linear's too) lands there.
class ShardGradients {
 public:
  ShardGradients(ParameterStore& store, WeightGradientSink& sink, int64_t shard)
      : store_(store), sink_(sink), buffer_(sink.shard_gradients(shard)) {
    store_.swap_grads(buffer_);
    store_.set_weight_gradient_sink(nullptr);
  }
  ~ShardGradients() {
    store_.set_weight_gradient_sink(&sink_);
    store_.swap_grads(buffer_);
  }
  ShardGradients(const ShardGradients&) = delete;
  ShardGradients& operator=(const ShardGradients&) = delete;

 private:
  ParameterStore& store_;
  WeightGradientSink& sink_;
  Tensor& buffer_;
};

// Reports a layer's forward or backward to the step's LayerTimer, when there is one.
class Timed {
 public:
  Timed(const Layer& layer, const StepContext& step) : layer_(layer), timer_(step.layer_timer) {
    if (timer_) timer_->begin(layer_);
  }
  ~Timed() {
    if (timer_) timer_->end(layer_);
  }
  Timed(const Timed&) = delete;
  Timed& operator=(const Timed&) = delete;

 private:
  const Layer& layer_;
  LayerTimer* timer_;
};

}  // namespace

bool whole(const Layer& layer, const Ops& ops, const Shape& input, int64_t shards) {
  if (shards <= 1) return true;
  const LayerHints plain = layer_hints::of(layer, ops);
  if (plain.aliases_input || plain.handles_shards) return true;
  MGT_CHECK(!input.empty() && input[0] % shards == 0, Error,
            "layer '" + layer.name() + "': a pass of " + shape_string(input) + " rows is not " +
                std::to_string(shards) + " equal micro-shards");
  return layer_hints::of(layer, ops, input, shards).row_wise;
}

void* PlannedState::Recorder::allocate(size_t bytes) {
  void* p = inner_.allocate(bytes);
  if (p && bytes > 0) {
    state_.regions_.emplace_back(static_cast<unsigned char*>(p), bytes);
    state_.bytes_ += bytes;
  }
  return p;
}

void PlannedState::keep_per_shard(LayerPlanner& planner, const Layer& layer, bool whole, int64_t shards) {
  copies_ = nullptr;
  if (whole || shards <= 1 || bytes_ == 0 || layer_hints::of(layer, planner.ops()).planned_memory_is_scratch) return;
  copies_ = static_cast<unsigned char*>(planner.allocate(bytes_ * static_cast<size_t>(shards)));
}

void PlannedState::save(Ops& ops, int64_t shard) const {
  unsigned char* to = copies_ + static_cast<size_t>(shard) * bytes_;
  for (const auto& [p, bytes] : regions_) {
    ops.copy(to, p, bytes);
    to += bytes;
  }
}

void PlannedState::restore(Ops& ops, int64_t shard) const {
  const unsigned char* from = copies_ + static_cast<size_t>(shard) * bytes_;
  for (const auto& [p, bytes] : regions_) {
    ops.copy(p, from, bytes);
    from += bytes;
  }
}

bool plan(Layer& layer, LayerPlanner& planner, const Shape& input, PlannedState& state) {
  state = PlannedState();
  const int64_t shards = planner.shards();
  const bool taken_whole = whole(layer, planner.ops(), input, shards);
  PlannedState::Recorder recorder(planner, state);
  layer.plan(recorder, plan_shape(input, shards, taken_whole));
  state.keep_per_shard(planner, layer, taken_whole, shards);
  return taken_whole;
}

Shape plan_shape(const Shape& input, int64_t shards, bool whole) {
  if (whole || shards <= 1) return input;
  Shape shape = input;
  shape[0] /= shards;
  return shape;
}

void forward(Layer& layer, const LayerRun& run, const Tensor& in, Tensor& out, bool whole, const PlannedState& state) {
  const int64_t shards = run.step.shards;
  const Timed timed(layer, run.step);
  if (whole || shards <= 1) {
    layer.forward(run, in, out);
  } else {
    const int64_t rows = in.shape()[0] / shards;
    for (int64_t s = 0; s < shards; ++s) {
      const StepContext ctx = shard_context(run.step, rows, s);
      Tensor out_s = slice(out, shards, s);
      layer.forward(LayerRun{run.ops, run.store, ctx}, slice(in, shards, s), out_s);
      if (state.active()) state.save(run.ops, s);
    }
  }
  if (run.step.after_layer) (*run.step.after_layer)(layer, out);
}

void ran_before(const Layer& layer, const LayerRun& run, const Tensor& out) {
  if (run.step.after_layer) (*run.step.after_layer)(layer, out);
}

void backward(Layer& layer, const LayerRun& run, const Tensor& in, const Tensor& out, const Tensor& grad_out,
              Tensor* grad_in, bool whole, const PlannedState& state) {
  const int64_t shards = run.step.shards;
  const Timed timed(layer, run.step);
  if (whole || shards <= 1) {
    layer.backward(run, in, out, grad_out, grad_in);
    return;
  }
  const int64_t rows = in.shape()[0] / shards;
  WeightGradientSink* sink = run.store.weight_gradient_sink();
  for (int64_t s = 0; s < shards; ++s) {
    StepContext ctx = shard_context(run.step, rows, s);
    if (state.active()) state.restore(run.ops, s);  // what this shard's forward left in the planned memory
    Tensor dx_s = grad_in ? slice(*grad_in, shards, s) : Tensor();
    const LayerRun shard_run{run.ops, run.store, ctx};
    if (sink) {
      // Each shard's buffer holds this layer's gradient of that shard alone: written.
      ctx.overwrite_grads = true;
      ShardGradients into(run.store, *sink, s);
      layer.backward(shard_run, slice(in, shards, s), slice(out, shards, s), slice(grad_out, shards, s),
                     grad_in ? &dx_s : nullptr);
    } else {
      // No one to keep them apart: the shards' gradients add up in the store's.
      ctx.overwrite_grads = s == 0 && run.step.overwrite_grads;
      layer.backward(shard_run, slice(in, shards, s), slice(out, shards, s), slice(grad_out, shards, s),
                     grad_in ? &dx_s : nullptr);
    }
  }
}

}  // namespace mgt::shard_passes
