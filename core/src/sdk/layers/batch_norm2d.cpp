// BatchNorm2d: per channel c of x [B, C, H, W], y = gamma_c * (x - mean_c) * inv_std_c + beta_c with
// inv_std_c = 1 / sqrt(var_c + eps). Training takes mean and (biased) variance from the pass's
// rows; evaluation uses the running statistics. Those move towards the pass's (the variance
// unbiased), as PyTorch's do, but once a step: on the pass that holds the global batch's first
// row (rank 0's first micro-batch). Rank 0's statistics, the ones checkpoints save, then follow
// the same rows whatever the number of ranks, and in deterministic mode (fixed micro-shards) they
// are the same bits at any world size; other ranks take rank 0's before they evaluate. Every step is an operation of
// mgt::Ops on C-long vectors or on the whole tensor, so the layer runs on every executor; backward reads the input (not
// the output, over which a ReLU may then run in place) and recomputes nothing but per-channel sums:
//   S1 = sum dy, S2 = sum dy (x - mean), dgamma = inv_std S2, dbeta = S1,
//   dx = A dy + B x + D with A = gamma inv_std, B = -A inv_std^2 S2 / M, D = -A S1 / M - B mean.
#include <string>

#include "layer_checks.hpp"
#include "mgtrain/layers.hpp"

namespace mgt {
namespace {

class BatchNorm2dLayer final : public Layer {
 public:
  BatchNorm2dLayer(const std::string& name, int64_t channels, float eps, float momentum)
      : Layer(name), channels_(channels), eps_(eps), momentum_(momentum) {
    layers::check_positive(name, "channels", channels);
    MGT_CHECK(eps > 0.0f && momentum >= 0.0f && momentum <= 1.0f, ConfigError,
              "layer '" + name + "': eps must be positive and momentum in [0, 1], got eps " + std::to_string(eps) +
                  ", momentum " + std::to_string(momentum));
  }

  void declare(ParameterStore& store) override {
    gamma_ = store.declare(name() + ".weight", {channels_}, Init::ones, 1);
    beta_ = store.declare(name() + ".bias", {channels_}, Init::zeros, 1);
    running_mean_ = store.declare_buffer(name() + ".running_mean", {channels_}, 0.0f);
    running_var_ = store.declare_buffer(name() + ".running_var", {channels_}, 1.0f);
  }

  Shape output_shape(const Shape& input) const override {
    MGT_CHECK(input.size() == 4 && input[1] == channels_, ConfigError,
              "layer '" + name() + "' expects input [B, " + std::to_string(channels_) + ", H, W], got " +
                  shape_string(input));
    return input;
  }

  void plan(LayerPlanner& planner, const Shape& input) override {
    output_shape(input);
    batch_ = input[0];
    plane_ = input[2] * input[3];
    for (float** v : {&mean_, &inv_std_, &scale_, &shift_, &s1_, &s2_, &t1_, &t2_, &t3_})
      *v = planner.allocate_array<float>(static_cast<size_t>(channels_));
    planned_ = input;
  }

  void forward(const LayerRun& run, const Tensor& in, Tensor& out) override {
    layers::check_planned(name(), planned_, in.shape());
    Ops& ops = run.ops;
    const int64_t c = channels_;
    float* running_mean = run.store.buffer(running_mean_);
    float* running_var = run.store.buffer(running_var_);
    if (run.step.training) {
      const auto m = static_cast<float>(batch_ * plane_);
      ops.channel_sums(in.data(), nullptr, nullptr, batch_, c, plane_, s1_, nullptr);
      ops.affine(s1_, mean_, c, 1.0f / m, 0.0f);
      // Sum x (x - mean): the sum of squared deviations, without E[x^2] - mean^2's cancellation.
      ops.channel_sums(in.data(), in.data(), mean_, batch_, c, plane_, s1_, s2_);
      ops.affine(s2_, t1_, c, 1.0f / m, eps_);  // biased variance + eps
    }
    if (run.step.training && run.step.first_sample == 0) {
      const auto m = static_cast<float>(batch_ * plane_);
      // running = (1 - momentum) running + momentum batch, the variance unbiased (as PyTorch).
      ops.affine(running_mean, running_mean, c, 1.0f - momentum_, 0.0f);
      ops.affine(mean_, t2_, c, momentum_, 0.0f);
      ops.binary(BinaryOp::add, running_mean, t2_, running_mean, c);
      ops.affine(running_var, running_var, c, 1.0f - momentum_, 0.0f);
      ops.affine(s2_, t2_, c, momentum_ / (m > 1.0f ? m - 1.0f : 1.0f), 0.0f);
      ops.binary(BinaryOp::add, running_var, t2_, running_var, c);
    } else if (!run.step.training) {
      ops.copy(mean_, running_mean, static_cast<size_t>(c) * sizeof(float));
      ops.affine(running_var, t1_, c, 1.0f, eps_);
    }
    ops.unary(UnaryOp::sqrt, t1_, t1_, c);
    ops.unary(UnaryOp::reciprocal, t1_, inv_std_, c);
    // y = scale x + shift, scale = gamma inv_std, shift = beta - mean scale.
    ops.binary(BinaryOp::multiply, run.store.param(gamma_), inv_std_, scale_, c);
    ops.binary(BinaryOp::multiply, mean_, scale_, t1_, c);
    ops.binary(BinaryOp::subtract, run.store.param(beta_), t1_, shift_, c);
    ops.channel_affine(in.data(), scale_, nullptr, nullptr, shift_, out.data(), batch_, c, plane_);
  }

  void backward(const LayerRun& run, const Tensor& in, const Tensor&, const Tensor& grad_out,
                Tensor* grad_in) override {
    Ops& ops = run.ops;
    const int64_t c = channels_;
    const auto m = static_cast<float>(batch_ * plane_);
    ops.channel_sums(grad_out.data(), in.data(), mean_, batch_, c, plane_, s1_, s2_);
    // dgamma = inv_std S2, dbeta = S1: written when the gradients were discarded, else added.
    float* dgamma = run.store.grad(gamma_);
    float* dbeta = run.store.grad(beta_);
    ops.binary(BinaryOp::multiply, inv_std_, s2_, t1_, c);
    if (run.step.overwrite_grads) {
      ops.copy(dgamma, t1_, static_cast<size_t>(c) * sizeof(float));
      ops.copy(dbeta, s1_, static_cast<size_t>(c) * sizeof(float));
    } else {
      ops.binary(BinaryOp::add, dgamma, t1_, dgamma, c);
      ops.binary(BinaryOp::add, dbeta, s1_, dbeta, c);
    }
    if (!grad_in) return;
    // A = scale_ (gamma inv_std); B = -A inv_std^2 S2 / M into t1; D = -A S1 / M - B mean into t2.
    ops.binary(BinaryOp::multiply, scale_, inv_std_, t1_, c);
    ops.binary(BinaryOp::multiply, t1_, inv_std_, t1_, c);
    ops.binary(BinaryOp::multiply, t1_, s2_, t1_, c);
    ops.affine(t1_, t1_, c, -1.0f / m, 0.0f);
    ops.binary(BinaryOp::multiply, scale_, s1_, t2_, c);
    ops.affine(t2_, t2_, c, -1.0f / m, 0.0f);
    ops.binary(BinaryOp::multiply, t1_, mean_, t3_, c);
    ops.binary(BinaryOp::subtract, t2_, t3_, t2_, c);
    ops.channel_affine(grad_out.data(), scale_, in.data(), t1_, t2_, grad_in->data(), batch_, c, plane_);
  }

  std::vector<ParamHandle> param_handles() const override { return {gamma_, beta_}; }
  bool backward_reads_output() const override { return false; }

 private:
  int64_t channels_;
  float eps_, momentum_;
  ParamHandle gamma_ = 0, beta_ = 0;
  BufferHandle running_mean_ = 0, running_var_ = 0;
  int64_t batch_ = 0, plane_ = 0;
  Shape planned_;
  // Per channel, in the executor's memory: the pass's mean and 1 / sqrt(var + eps) (kept for
  // backward), the affine form of the normalisation, sums and scratch.
  float *mean_ = nullptr, *inv_std_ = nullptr, *scale_ = nullptr, *shift_ = nullptr;
  float *s1_ = nullptr, *s2_ = nullptr, *t1_ = nullptr, *t2_ = nullptr, *t3_ = nullptr;
};

}  // namespace

std::unique_ptr<Layer> make_batch_norm2d(const std::string& name, int64_t channels, float eps, float momentum) {
  return std::make_unique<BatchNorm2dLayer>(name, channels, eps, momentum);
}

}  // namespace mgt
