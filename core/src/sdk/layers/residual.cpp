// Residual: out = branch(x) + shortcut(x), a block of layers with a skip connection, as one layer
// of a stack: the executor plans and runs it like any other, so a residual network is still a
// SequentialModel and runs on every executor. The block plans its children itself, each output
// and output gradient a buffer of its own in the executor's memory (no aliasing or in-place runs
// inside a block); backward sends the block's output gradient down both paths and adds the two
// input gradients (the identity shortcut passes the output gradient itself). A pass of several
// deterministic micro-shards goes through its layers by the executor's rule (shard_passes.hpp).
#include <string>
#include <utility>

#include "layer_checks.hpp"
#include "mgtrain/layers.hpp"
#include "sdk/shard_passes.hpp"

namespace mgt {
namespace {

// A chain of layers run one after another, with the activations and gradients between them.
struct Chain {
  std::vector<std::unique_ptr<Layer>> layers;
  std::vector<Tensor> acts;   // acts[i]: output of layers[i]
  std::vector<Tensor> grads;  // grads[i]: gradient of acts[i] (the last one is the block's grad_out)
  std::vector<char> whole;    // layers[i] takes a pass of several shards whole
  Tensor dx;                  // gradient of the block's input through this chain

  Shape output_shape(Shape s) const {
    for (const auto& layer : layers) s = layer->output_shape(s);
    return s;
  }

  void plan(LayerPlanner& planner, const Shape& input) {
    acts.clear();
    grads.clear();
    whole.clear();
    Shape s = input;
    for (auto& layer : layers) {
      whole.push_back(shard_passes::whole(*layer, planner.ops(), s, planner.shards()));
      layer->plan(planner, shard_passes::plan_shape(s, planner.shards(), whole.back()));
      s = layer->output_shape(s);
      const auto n = static_cast<size_t>(shape_numel(s));
      acts.push_back(Tensor::view(planner.allocate_array<float>(n), s));
      grads.push_back(Tensor::view(planner.allocate_array<float>(n), s));
    }
    if (!layers.empty())
      dx = Tensor::view(planner.allocate_array<float>(static_cast<size_t>(shape_numel(input))), input);
  }

  const Tensor& forward(const LayerRun& run, const Tensor& in) {
    const Tensor* x = &in;
    for (size_t i = 0; i < layers.size(); ++i) {
      shard_passes::forward(*layers[i], run, *x, acts[i], whole[i]);
      x = &acts[i];
    }
    return *x;
  }

  // Backward from grad_out (the block's); the input gradient into dx when `need_dx`.
  void backward(const LayerRun& run, const Tensor& in, const Tensor& grad_out, bool need_dx) {
    for (size_t i = layers.size(); i-- > 0;) {
      const Tensor& x = i == 0 ? in : acts[i - 1];
      const Tensor& dy = i + 1 == layers.size() ? grad_out : grads[i];
      Tensor* dxi = i > 0 ? &grads[i - 1] : (need_dx ? &dx : nullptr);
      shard_passes::backward(*layers[i], run, x, acts[i], dy, dxi, whole[i]);
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
        MGT_CHECK(!layer->aliases_input(), ConfigError,
                  "residual block '" + name + "': layer '" + layer->name() +
                      "' only reshapes its input, which a block that adds two paths of one shape cannot use");
      }
  }

  void declare(ParameterStore& store) override {
    for (Chain* chain : {&branch_, &shortcut_})
      for (auto& layer : chain->layers) layer->declare(store);
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
    branch_.plan(planner, input);
    shortcut_.plan(planner, input);
    planned_ = input;
  }

  void forward(const LayerRun& run, const Tensor& in, Tensor& out) override {
    layers::check_planned(name(), planned_, in.shape());
    const Tensor& b = branch_.forward(run, in);
    const Tensor& s = shortcut_.forward(run, in);
    run.ops.binary(BinaryOp::add, b.data(), s.data(), out.data(), out.numel());
  }

  void backward(const LayerRun& run, const Tensor& in, const Tensor&, const Tensor& grad_out,
                Tensor* grad_in) override {
    const bool need_dx = grad_in != nullptr;
    branch_.backward(run, in, grad_out, need_dx);
    shortcut_.backward(run, in, grad_out, need_dx);
    if (!need_dx) return;
    const float* through_shortcut = shortcut_.layers.empty() ? grad_out.data() : shortcut_.dx.data();
    run.ops.binary(BinaryOp::add, branch_.dx.data(), through_shortcut, grad_in->data(), grad_in->numel());
  }

  // The branch's gradients become final from its last layer back, then the shortcut's.
  std::vector<ParamHandle> param_handles() const override {
    std::vector<ParamHandle> handles;
    for (const Chain* chain : {&branch_, &shortcut_})
      for (size_t i = chain->layers.size(); i-- > 0;)
        for (ParamHandle h : chain->layers[i]->param_handles()) handles.push_back(h);
    return handles;
  }

  // Its output is a sum the block's backward does not read.
  bool backward_reads_output() const override { return false; }
  // Its layers take a pass of several shards by the executor's rule; the sum is element-wise.
  bool handles_shards() const override { return true; }

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
};

}  // namespace

std::unique_ptr<Layer> make_residual(const std::string& name, std::vector<std::unique_ptr<Layer>> branch,
                                     std::vector<std::unique_ptr<Layer>> shortcut) {
  return std::make_unique<ResidualLayer>(name, std::move(branch), std::move(shortcut));
}

}  // namespace mgt
