// Residual: out = branch(x) + shortcut(x), a block of layers with a skip connection, as one layer
// of a stack: the executor plans and runs it like any other, so a residual network is still a
// SequentialModel and runs on every executor. The block plans its children itself, with the
// executor's rules for memory: a ReLU runs in place over an output no backward reads, the
// branch's last layer writes the block's output itself when its backward does not read it (the
// shortcut is then added to it), and the gradients between the layers of both paths, alive only
// during the block's backward, take turns in two buffers. Backward sends the block's output
// gradient down both paths: the branch writes the block's input gradient, to which the shortcut's
// is added (the identity shortcut's is the output gradient itself). A pass of several
// deterministic micro-shards goes through its layers by the executor's rule (shard_passes.hpp). It
// takes channel-blocked activations when both paths can carry its input's block to their ends
// (activation_blocks.hpp): the sum is element-wise, the same in any layout. Where the ops can, it runs
// a ReLU after it (fused_relu.hpp): the sum and the ReLU in one pass, and the ReLU's gradient
// first in backward; inside, its paths fuse their ReLUs by the executor's rule.
#include <algorithm>
#include <optional>
#include <string>
#include <utility>

#include "layer_checks.hpp"
#include "mgtrain/layers.hpp"
#include "sdk/activation_blocks.hpp"
#include "sdk/fused_relu.hpp"
#include "sdk/layer_hints.hpp"
#include "sdk/shard_passes.hpp"

namespace mgt {
namespace {

// A chain of layers run one after another, with the activations and gradients between them.
struct Chain {
  std::vector<std::unique_ptr<Layer>> layers;
  std::vector<Tensor> acts;    // acts[i]: output of layers[i]
  std::vector<Tensor> grads;   // grads[i]: gradient of acts[i], i + 1 < layers.size() (the last is the block's)
  std::vector<int> grad_slot;  // which of the block's two gradient buffers holds grads[i]
  std::vector<Shape> shapes;   // shapes[i]: of acts[i]
  std::vector<char> whole;     // layers[i] takes a pass of several shards whole
  std::vector<char> fused;     // layers[i] is a ReLU layers[i - 1] runs (fused_relu.hpp)
  std::vector<shard_passes::PlannedState> planned;  // layers[i]'s planned memory, kept per shard
  bool writes_block_output = false;                 // acts.back() is the block's output, bound on each forward
  Tensor dx;                                        // the shortcut's input gradient (the branch writes the block's)

  Shape output_shape(Shape s) const {
    for (const auto& layer : layers) s = layer->output_shape(s);
    return s;
  }

  std::vector<Shape> output_shapes(Shape s) const {
    std::vector<Shape> out;
    for (const auto& layer : layers) out.push_back(s = layer->output_shape(s));
    return out;
  }

  // The channel blocks of the layers' outputs when the block's input and output have `block`
  // (activation_blocks.hpp); nothing when a layer cannot keep it.
  std::optional<std::vector<int64_t>> blocks(const Ops& ops, const Shape& input, int64_t block,
                                             int64_t io_block) const {
    std::vector<Layer*> raw;
    for (const auto& layer : layers) raw.push_back(layer.get());
    return activation_blocks::choose(raw, ops, input, output_shapes(input), block, io_block, io_block);
  }

  // Plans the layers and their activations, the input and output in the channel block `io_block`;
  // the gradients get slots, whose sizes (in floats) go into slot_numel, and are bound to memory
  // by bind_gradients.
  void plan(LayerPlanner& planner, const Shape& input, int64_t io_block, bool may_write_block_output, bool own_dx,
            size_t slot_numel[2]) {
    const size_t n = layers.size();
    acts.clear();
    whole.clear();
    shapes = output_shapes(input);
    planned.assign(n, shard_passes::PlannedState());
    // Blocked inside only when the block is: the executor chose that for it.
    const auto chosen = blocks(planner.ops(), input, io_block, io_block);
    MGT_CHECK(chosen.has_value(), Error, "a residual block was planned for a layout its layers cannot keep");
    activation_blocks::Planner blocked(planner);
    std::vector<char> in_place(n, 0);
    for (size_t i = 1; i < n; ++i)
      in_place[i] = !in_place[i - 1] && layer_hints::of(*layers[i], planner.ops()).runs_in_place &&
                    !layer_hints::of(*layers[i - 1], planner.ops()).backward_reads_output;
    fused.assign(n, 0);
    for (size_t i = 1; i < n; ++i)
      // Not the branch's last ReLU: its input gradient is not the block's output gradient, which
      // the shortcut reads after the branch.
      fused[i] = fused_relu::runs_next(*layers[i - 1], *layers[i], in_place[i], i + 1 < n, planner.ops());
    Shape s = input;
    for (size_t i = 0; i < n; ++i) {
      blocked.set_blocks(i == 0 ? io_block : (*chosen)[i - 1], (*chosen)[i]);
      blocked.set_fused_relu(i + 1 < n && fused[i + 1]);
      whole.push_back(shard_passes::plan(*layers[i], blocked, s, planned[i]));
      s = shapes[i];
    }
    writes_block_output = may_write_block_output && n > 0 && !in_place[n - 1] &&
                          !layer_hints::of(*layers[n - 1], planner.ops()).backward_reads_output;
    for (size_t i = 0; i < n; ++i) {
      float* out = in_place[i]                         ? acts[i - 1].data()
                   : i + 1 == n && writes_block_output ? nullptr
                                                       : planner.allocate_array<float>(numel(i));
      acts.push_back(Tensor::view(out, shapes[i]));
    }
    // grads[i] is written by layers[i + 1]'s backward and read by layers[i]'s: the slot other
    // than grads[i + 1]'s, or the same one when layers[i + 1] runs in place (never over the
    // block's output gradient, which the shortcut reads after the branch).
    grad_slot.assign(n > 0 ? n - 1 : 0, 0);
    for (size_t i = grad_slot.size(); i-- > 0;) {
      const bool above_is_block = i + 2 == n;
      grad_slot[i] = above_is_block ? 0 : in_place[i + 1] ? grad_slot[i + 1] : 1 - grad_slot[i + 1];
      slot_numel[grad_slot[i]] = std::max(slot_numel[grad_slot[i]], numel(i));
    }
    if (own_dx && n > 0)
      dx = Tensor::view(planner.allocate_array<float>(static_cast<size_t>(shape_numel(input))), input);
  }

  void bind_gradients(float* const slots[2]) {
    grads.clear();
    for (size_t i = 0; i < grad_slot.size(); ++i) grads.push_back(Tensor::view(slots[grad_slot[i]], shapes[i]));
  }

  size_t numel(size_t i) const { return static_cast<size_t>(shape_numel(shapes[i])); }

  const Tensor& forward(const LayerRun& run, const Tensor& in) {
    const Tensor* x = &in;
    for (size_t i = 0; i < layers.size(); ++i) {
      if (fused[i])
        shard_passes::ran_before(*layers[i], run, acts[i]);
      else
        shard_passes::forward(*layers[i], run, *x, acts[i], whole[i], planned[i]);
      x = &acts[i];
    }
    return *x;
  }

  // Backward from grad_out (the block's); the input gradient into *grad_in unless it is null.
  void backward(const LayerRun& run, const Tensor& in, const Tensor& grad_out, Tensor* grad_in) {
    const size_t n = layers.size();
    // The gradient of layers[i]'s output, or of the ReLU it runs.
    auto output_gradient = [&](size_t i) -> const Tensor& { return i + 1 == n ? grad_out : grads[i]; };
    for (size_t i = n; i-- > 0;) {
      if (fused[i]) continue;
      const Tensor& x = i == 0 ? in : acts[i - 1];
      const Tensor& dy = i + 1 < n && fused[i + 1] ? output_gradient(i + 1) : output_gradient(i);
      Tensor* dxi = i > 0 ? &grads[i - 1] : grad_in;
      shard_passes::backward(*layers[i], run, x, acts[i], dy, dxi, whole[i], planned[i]);
    }
  }
};

class ResidualLayer final : public Layer {
 public:
  ResidualLayer(const std::string& name, std::vector<std::unique_ptr<Layer>> branch,
                std::vector<std::unique_ptr<Layer>> shortcut)
      : Layer(name) {
    branch_.layers = std::move(branch);
    shortcut_.layers = std::move(shortcut);
    MGT_CHECK(!branch_.layers.empty(), ConfigError, "residual block '" + name + "' has no layers in its branch");
    for (const Chain* chain : {&branch_, &shortcut_})
      for (const auto& layer : chain->layers) {
        MGT_CHECK(layer != nullptr, ConfigError, "residual block '" + name + "': a null layer");
        // Asked before any executor: on the host's operations (aliasing depends on none).
        MGT_CHECK(!layer_hints::of(*layer, host_ops()).aliases_input, ConfigError,
                  "residual block '" + name + "': layer '" + layer->name() +
                      "' only reshapes its input, which a block that adds two paths of one shape cannot use");
      }
  }

  void declare(ParameterStore& store) override {
    for (Chain* chain : {&branch_, &shortcut_})
      for (auto& layer : chain->layers) {
        try {
          layer->declare(store);
        } catch (const Error& e) {
          // Two blocks whose inner layers have the same names declare the same parameters: the
          // usual cause is a layer named without its block's prefix.
          const bool prefixed = layer->name().rfind(name() + ".", 0) == 0;
          throw Error("residual block '" + name() + "', layer '" + layer->name() + "': " + e.what() +
                      (prefixed ? ""
                                : "; name a block's layers inside it ('" + name() + "." + layer->name() +
                                      "'), so that each block's parameters have names of their own"));
        }
      }
  }

  Shape output_shape(const Shape& input) const override {
    const Shape branch = branch_.output_shape(input);
    const Shape shortcut = shortcut_.output_shape(input);
    MGT_CHECK(branch == shortcut, ConfigError,
              "residual block '" + name() + "': for input " + shape_string(input) + " the branch gives " +
                  shape_string(branch) + " and the shortcut " + shape_string(shortcut) +
                  "; they must agree to be added (a projection shortcut: a strided 1x1 convolution)");
    return branch;
  }

  void plan(LayerPlanner& planner, const Shape& input) override {
    output_shape(input);
    fused_relu_ = planner.fused_relu();
    if (fused_relu_) {
      // The sum and the ReLU after it in one pass: channel_affine over one "channel" of scale 1,
      // (1 a + 1 b) + 0, which is a + b (and its zeros' signs do not survive the ReLU).
      one_ = planner.allocate_array<float>(1);
      planner.ops().affine(one_, one_, 1, 0.0f, 1.0f);
    }
    size_t slot_numel[2] = {0, 0};
    const int64_t io_block = planner.input_block();
    branch_.plan(planner, input, io_block, /*may_write_block_output=*/true, /*own_dx=*/false, slot_numel);
    shortcut_.plan(planner, input, io_block, /*may_write_block_output=*/false, /*own_dx=*/true, slot_numel);
    float* const slots[2] = {planner.allocate_array<float>(slot_numel[0]),
                             planner.allocate_array<float>(slot_numel[1])};
    branch_.bind_gradients(slots);
    shortcut_.bind_gradients(slots);
    planned_ = input;
  }

  void forward(const LayerRun& run, const Tensor& in, Tensor& out) override {
    layers::check_planned(name(), planned_, in.shape());
    if (branch_.writes_block_output) branch_.acts.back().rebind(out.data());
    const Tensor& b = branch_.forward(run, in);
    const Tensor& s = shortcut_.forward(run, in);
    if (fused_relu_) {
      ChannelTensors one_channel;
      one_channel.batch = 1;
      one_channel.channels = 1;
      one_channel.plane = out.numel();
      one_channel.relu = true;
      run.ops.channel_affine(b.data(), one_, s.data(), one_, nullptr, out.data(), one_channel);
    } else {
      run.ops.binary(BinaryOp::add, b.data(), s.data(), out.data(), out.numel());
    }
  }

  void backward(const LayerRun& run, const Tensor& in, const Tensor& out, const Tensor& grad_out,
                Tensor* grad_in) override {
    // The gradient through the ReLU it runs, written where the ReLU would write it: grad_out.
    if (fused_relu_)
      run.ops.relu_backward(out.data(), grad_out.data(), const_cast<float*>(grad_out.data()), out.numel());
    branch_.backward(run, in, grad_out, grad_in);
    shortcut_.backward(run, in, grad_out, grad_in ? &shortcut_.dx : nullptr);
    if (!grad_in) return;
    const float* through_shortcut = shortcut_.layers.empty() ? grad_out.data() : shortcut_.dx.data();
    run.ops.binary(BinaryOp::add, grad_in->data(), through_shortcut, grad_in->data(), grad_in->numel());
  }

  // The branch's gradients become final from its last layer back, then the shortcut's.
  std::vector<ParamHandle> param_handles() const override {
    std::vector<ParamHandle> handles;
    for (const Chain* chain : {&branch_, &shortcut_})
      for (size_t i = chain->layers.size(); i-- > 0;)
        for (ParamHandle h : chain->layers[i]->param_handles()) handles.push_back(h);
    return handles;
  }

  void hints(const HintQuery& query, LayerHints& hints) const override {
    // Its output is a sum the block's backward does not read. (Running the ReLU after it, it
    // reads that ReLU's output, as the ReLU would.)
    hints.backward_reads_output = false;
    // The sum and the ReLU in one pass.
    hints.fuses_relu = query.ops->channel_ops_fuse_relu();
    // Its layers take a pass of several shards by the executor's rule; the sum is element-wise.
    hints.handles_shards = true;
    // Blocked in and out when both paths can keep the block from its input to their outputs.
    const Shape& input = *query.input;
    const int64_t block = query.block;
    if (activation_blocks::blockable(input, block) && branch_.blocks(*query.ops, input, block, block).has_value() &&
        shortcut_.blocks(*query.ops, input, block, block).has_value())
      hints.blocked_activations = BlockedActivations::same;
  }

  LayerDescription describe() const override {
    LayerDescription d;
    d.kind = LayerKind::residual;
    for (const auto& layer : branch_.layers) d.branch.push_back(layer.get());
    for (const auto& layer : shortcut_.layers) d.shortcut.push_back(layer.get());
    return d;
  }

 private:
  Chain branch_, shortcut_;
  Shape planned_;
  bool fused_relu_ = false;  // it runs the ReLU after it (LayerPlanner::fused_relu)
  float* one_ = nullptr;     // 1.0f, the sum's scales when it runs the ReLU
};

}  // namespace

std::unique_ptr<Layer> make_residual(const std::string& name, std::vector<std::unique_ptr<Layer>> branch,
                                     std::vector<std::unique_ptr<Layer>> shortcut) {
  return std::make_unique<ResidualLayer>(name, std::move(branch), std::move(shortcut));
}

}  // namespace mgt
