// Layer normalisation over the last dimension (each token's features), as PyTorch's LayerNorm:
// parameters "<name>.weight" (1) and "<name>.bias" (0). Its backward forms the row statistics
// again from the input, so it keeps nothing from forward. Each row is normalised on its own, but
// the parameter gradients are sums over rows: a deterministic pass of several micro-shards goes
// through it whole, each shard's parameter gradients summed into that shard's buffer of the
// WeightGradientSink (the bits of a shard taken alone).
#include <algorithm>
#include <string>

#include "layer_checks.hpp"
#include "mgtrain/layers.hpp"

namespace mgt {
namespace {

class LayerNormLayer final : public Layer {
 public:
  LayerNormLayer(const std::string& name, int64_t dim, float eps) : Layer(name), dim_(dim), eps_(eps) {
    layers::check_positive(name, "dim", dim);
    MGT_CHECK(eps > 0.0f, ConfigError, "layer '" + name + "': eps must be positive, got " + std::to_string(eps));
  }

  void declare(ParameterStore& store) override {
    weight_ = store.declare(name() + ".weight", {dim_}, Init::ones, dim_);
    bias_ = store.declare(name() + ".bias", {dim_}, Init::zeros, dim_);
  }

  Shape output_shape(const Shape& input) const override {
    MGT_CHECK(input.size() >= 2 && input.back() == dim_, ConfigError,
              "layer '" + name() + "' normalises the last dimension of " + std::to_string(dim_) + ", got input " +
                  shape_string(input));
    return input;
  }

  void forward(const LayerRun& run, const Tensor& in, Tensor& out) override {
    run.ops.layer_norm_forward(in.data(), run.store.param(weight_), run.store.param(bias_), out.data(),
                               in.numel() / dim_, dim_, eps_);
  }

  void plan(LayerPlanner& planner, const Shape&) override { shards_ = std::max<int64_t>(planner.shards(), 1); }

  void backward(const LayerRun& run, const Tensor& in, const Tensor&, const Tensor& grad_out,
                Tensor* grad_in) override {
    const int64_t rows = in.numel() / dim_;
    WeightGradientSink* sink = run.store.weight_gradient_sink();
    if (shards_ > 1 && sink) {
      // Per micro-shard, its rows' sums written to its own buffer (the reducer's tree adds them).
      MGT_CHECK(rows % shards_ == 0, Error,
                "layer '" + name() + "': " + std::to_string(rows) + " rows are not " + std::to_string(shards_) +
                    " equal micro-shards");
      const int64_t shard_rows = rows / shards_, shard_numel = shard_rows * dim_;
      for (int64_t k = 0; k < shards_; ++k) {
        float* flat = sink->shard_gradients(k).data();
        run.ops.layer_norm_backward(
            in.data() + k * shard_numel, run.store.param(weight_), grad_out.data() + k * shard_numel,
            grad_in ? grad_in->data() + k * shard_numel : nullptr, flat + run.store.info(weight_).offset,
            flat + run.store.info(bias_).offset, shard_rows, dim_, eps_, /*accumulate=*/false);
      }
      return;
    }
    // The rows in order: the same sums as the shards one after another.
    run.ops.layer_norm_backward(in.data(), run.store.param(weight_), grad_out.data(),
                                grad_in ? grad_in->data() : nullptr, run.store.grad(weight_), run.store.grad(bias_),
                                rows, dim_, eps_, !run.step.overwrite_grads);
  }

  std::vector<ParamHandle> param_handles() const override { return {weight_, bias_}; }
  void hints(const HintQuery&, LayerHints& hints) const override {
    hints.backward_reads_output = false;
    // Rows on their own; the parameter gradients per micro-shard (backward).
    hints.handles_shards = true;
  }
  LayerDescription describe() const override {
    LayerDescription d;
    d.kind = LayerKind::layer_norm;
    d.params = {weight_, bias_};
    d.floats = {{"epsilon", eps_}};
    return d;
  }

 private:
  int64_t dim_;
  float eps_;
  ParamHandle weight_ = 0, bias_ = 0;
  int64_t shards_ = 1;
};

}  // namespace

std::unique_ptr<Layer> make_layer_norm(const std::string& name, int64_t dim, float eps) {
  return std::make_unique<LayerNormLayer>(name, dim, eps);
}

}  // namespace mgt
