// Layer normalisation over the last dimension (each token's features), as PyTorch's LayerNorm:
// parameters "<name>.weight" (1) and "<name>.bias" (0). Its backward forms the row statistics
// again from the input, so it keeps nothing from forward; the parameter gradients are sums over
// rows, so deterministic mode runs it a micro-shard at a time.
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

  void backward(const LayerRun& run, const Tensor& in, const Tensor&, const Tensor& grad_out,
                Tensor* grad_in) override {
    run.ops.layer_norm_backward(in.data(), run.store.param(weight_), grad_out.data(),
                                grad_in ? grad_in->data() : nullptr, run.store.grad(weight_), run.store.grad(bias_),
                                in.numel() / dim_, dim_, eps_, !run.step.overwrite_grads);
  }

  std::vector<ParamHandle> param_handles() const override { return {weight_, bias_}; }
  bool backward_reads_output() const override { return false; }
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
};

}  // namespace

std::unique_ptr<Layer> make_layer_norm(const std::string& name, int64_t dim, float eps) {
  return std::make_unique<LayerNormLayer>(name, dim, eps);
}

}  // namespace mgt
