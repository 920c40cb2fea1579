// BatchNorm2d: per channel c of x [B, C, H, W], y = gamma_c * (x - mean_c) * inv_std_c + beta_c with
// inv_std_c = 1 / sqrt(var_c + eps). Training takes mean and (biased) variance from the pass's
// rows, or, with StepContext::batch_statistics, from the whole batch's: every rank's pass
// (model.sync_bn) or, in deterministic mode, every micro-shard of the global batch, each shard's
// sums formed over its own rows and added in the shard order, so the bits do not depend on the
// number of ranks. Evaluation uses the running statistics. Those move towards the batch's (the
// variance unbiased), as PyTorch's do, but once a step: per rank, on the pass that holds the
// global batch's first row (rank 0's first micro-batch), so rank 0's statistics, the ones
// checkpoints save, follow the same rows whatever the number of ranks (other ranks take rank 0's
// before they evaluate); over the whole batch, on every rank's first pass, all ranks alike. Every
// step is an operation of mgt::Ops on C-long vectors or on the whole tensor, so the layer runs on
// every executor; backward reads the input (not the output, over which a ReLU may then run in
// place) and recomputes nothing but per-channel sums (over the same batch as forward's):
//   S1 = sum dy, S2 = sum dy (x - mean), dgamma = inv_std S2, dbeta = S1,
//   dx = A dy + B x + D with A = gamma inv_std, B = -A inv_std^2 S2 / M, D = -A S1 / M - B mean.
// The parameters' gradients are this rank's sums (the sync strategy adds the ranks'), or in
// deterministic mode each micro-shard's, written to its buffer (WeightGradientSink::shard_gradients).
// Where the ops can (Ops::channel_ops_fuse_relu), it runs a ReLU after it: the normalisation
// writes max(y, 0), and backward takes the ReLU's gradient, counted where the output is positive,
// in its own two passes: the same bits as the ReLU on its own, two passes over memory fewer.
#include <algorithm>
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
    block_ = planner.input_block();
    fused_relu_ = planner.fused_relu();
    shards_ = std::max<int64_t>(planner.shards(), 1);
    MGT_CHECK(batch_ % shards_ == 0, Error,
              "layer '" + name() + "': " + std::to_string(batch_) + " rows are not " + std::to_string(shards_) +
                  " equal micro-shards");
    for (float** v : {&mean_, &inv_std_, &scale_, &shift_, &t1_, &t2_, &t3_})
      *v = planner.allocate_array<float>(static_cast<size_t>(channels_));
    // S1 and S2 side by side: one reduction sums both.
    s1_ = planner.allocate_array<float>(static_cast<size_t>(2 * channels_));
    s2_ = s1_ + channels_;
    partial_ = planner.allocate_array<float>(static_cast<size_t>(2 * shards_ * channels_));
    planned_ = input;
  }

  void forward(const LayerRun& run, const Tensor& in, Tensor& out) override {
    layers::check_planned(name(), planned_, in.shape());
    Ops& ops = run.ops;
    const int64_t c = channels_;
    float* running_mean = run.store.buffer(running_mean_);
    float* running_var = run.store.buffer(running_var_);
    BatchStatistics* batch = run.step.batch_statistics;
    if (run.step.training) {
      check_shards(run.step);
      if (!batch && shards_ == 1) {
        elements_ = static_cast<double>(batch_ * plane_);
        const auto m = static_cast<float>(elements_);
        ops.channel_sums(in.data(), nullptr, nullptr, tensors(batch_), s1_, nullptr);
        ops.affine(s1_, mean_, c, 1.0f / m, 0.0f);
        // Sum x (x - mean): the sum of squared deviations, without E[x^2] - mean^2's cancellation.
        ops.channel_sums(in.data(), in.data(), mean_, tensors(batch_), s1_, s2_);
      } else {
        // Per micro-shard, each over its own rows in a fixed order, then summed over the batch: the
        // mean first, then the squared deviations from it.
        const int64_t rows = batch_ / shards_, shard_numel = rows * c * plane_;
        elements_ = static_cast<double>(batch_ * plane_);
        for (int64_t k = 0; k < shards_; ++k)
          ops.channel_sums(in.data() + k * shard_numel, nullptr, nullptr, tensors(rows), partial_ + k * c, nullptr);
        sum_over_batch(ops, batch, c, s1_, &elements_);
        ops.affine(s1_, mean_, c, 1.0f / static_cast<float>(elements_), 0.0f);
        float* unused = partial_ + shards_ * c;  // the sums of x again, not needed
        for (int64_t k = 0; k < shards_; ++k)
          ops.channel_sums(in.data() + k * shard_numel, in.data() + k * shard_numel, mean_, tensors(rows),
                           unused + k * c, partial_ + k * c);
        sum_over_batch(ops, batch, c, s2_, nullptr);
      }
      ops.affine(s2_, t1_, c, 1.0f / static_cast<float>(elements_), eps_);  // biased variance + eps
    }
    // Once a step: per rank, on the pass that holds the global batch's first row; with statistics
    // of the whole batch (the same on every rank), on every rank's first pass.
    const bool update_running = batch ? run.step.pass == 0 : run.step.first_sample == 0;
    if (run.step.training && update_running) {
      const auto m = static_cast<float>(elements_);
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
    ops.channel_affine(in.data(), scale_, nullptr, nullptr, shift_, out.data(), tensors(batch_, nullptr, fused_relu_));
  }

  void backward(const LayerRun& run, const Tensor& in, const Tensor& out, const Tensor& grad_out,
                Tensor* grad_in) override {
    Ops& ops = run.ops;
    // With the ReLU after it run here, grad_out is the ReLU's: it counts where the output is > 0.
    const float* mask = fused_relu_ ? out.data() : nullptr;
    const int64_t c = channels_;
    BatchStatistics* batch = run.step.batch_statistics;
    float* dgamma = run.store.grad(gamma_);
    float* dbeta = run.store.grad(beta_);
    if (!batch && shards_ == 1) {
      ops.channel_sums(grad_out.data(), in.data(), mean_, tensors(batch_, mask), s1_, s2_);
      // dgamma = inv_std S2, dbeta = S1: written when the gradients were discarded, else added.
      add_gradients(ops, run.step.overwrite_grads, s1_, s2_, dgamma, dbeta);
    } else {
      // Per micro-shard: S1 and S2 side by side, one block of 2C a shard.
      const int64_t rows = batch_ / shards_, shard_numel = rows * c * plane_;
      for (int64_t k = 0; k < shards_; ++k)
        ops.channel_sums(grad_out.data() + k * shard_numel, in.data() + k * shard_numel, mean_,
                         tensors(rows, mask ? mask + k * shard_numel : nullptr), partial_ + 2 * k * c,
                         partial_ + (2 * k + 1) * c);
      WeightGradientSink* sink = run.store.weight_gradient_sink();
      if (shards_ > 1 && sink) {
        // Deterministic mode: each shard's gradients go to its own buffer, for the reducer's tree.
        for (int64_t k = 0; k < shards_; ++k) {
          float* flat = sink->shard_gradients(k).data();
          add_gradients(ops, true, partial_ + 2 * k * c, partial_ + (2 * k + 1) * c,
                        flat + run.store.info(gamma_).offset, flat + run.store.info(beta_).offset);
        }
      } else {
        // The parameters' gradients are this rank's (the sync strategy sums them over the ranks).
        for (int64_t k = 0; k < shards_; ++k)
          add_gradients(ops, run.step.overwrite_grads && k == 0, partial_ + 2 * k * c, partial_ + (2 * k + 1) * c,
                        dgamma, dbeta);
      }
      sum_over_batch(ops, batch, 2 * c, s1_, nullptr);
    }
    if (!grad_in) return;
    const auto m = static_cast<float>(elements_);
    // A = scale_ (gamma inv_std); B = -A inv_std^2 S2 / M into t1; D = -A S1 / M - B mean into t2.
    ops.binary(BinaryOp::multiply, scale_, inv_std_, t1_, c);
    ops.binary(BinaryOp::multiply, t1_, inv_std_, t1_, c);
    ops.binary(BinaryOp::multiply, t1_, s2_, t1_, c);
    ops.affine(t1_, t1_, c, -1.0f / m, 0.0f);
    ops.binary(BinaryOp::multiply, scale_, s1_, t2_, c);
    ops.affine(t2_, t2_, c, -1.0f / m, 0.0f);
    ops.binary(BinaryOp::multiply, t1_, mean_, t3_, c);
    ops.binary(BinaryOp::subtract, t2_, t3_, t2_, c);
    ops.channel_affine(grad_out.data(), scale_, in.data(), t1_, t2_, grad_in->data(), tensors(batch_, mask));
  }

  std::vector<ParamHandle> param_handles() const override { return {gamma_, beta_}; }
  // `rows` rows of the layer's [B, C, H, W] activations, in its layout, for the per-channel
  // passes; `mask`: the ReLU's output it runs, `relu`: apply that ReLU.
  ChannelTensors tensors(int64_t rows, const float* mask = nullptr, bool relu = false) const {
    ChannelTensors t;
    t.batch = rows;
    t.channels = channels_;
    t.plane = plane_;
    t.block = block_;
    t.relu_mask = mask;
    t.relu = relu;
    return t;
  }
  void hints(const HintQuery& query, LayerHints& hints) const override {
    // It reads its input. (Running the ReLU after it, it reads that ReLU's output, as the ReLU would.)
    hints.backward_reads_output = false;
    // Its normalisation and its backward take the ReLU's mask in their own passes.
    hints.fuses_relu = query.ops->channel_ops_fuse_relu();
    // Its statistics are summed per micro-shard, its gradients formed per micro-shard.
    hints.handles_shards = true;
    // Per channel, in either layout (the sums' order follows the layout).
    hints.blocked_activations = BlockedActivations::same;
  }
  LayerDescription describe() const override {
    LayerDescription d;
    d.kind = LayerKind::batch_norm2d;
    d.floats = {{"epsilon", eps_}};
    d.params = {gamma_, beta_};
    d.buffers = {running_mean_, running_var_};
    return d;
  }

 private:
  void check_shards(const StepContext& step) const {
    MGT_CHECK(std::max<int64_t>(step.shards, 1) == shards_, Error,
              "layer '" + name() + "': a pass of " + std::to_string(step.shards) + " micro-shards, planned for " +
                  std::to_string(shards_));
  }

  // partial_'s `shards_` blocks of `count` summed over the batch into `total`: by the trainer's
  // BatchStatistics, or over this pass's shards in order.
  void sum_over_batch(Ops& ops, BatchStatistics* batch, int64_t count, float* total, double* elements) {
    if (batch) {
      batch->sum(ops, partial_, shards_, count, total, elements);
      return;
    }
    ops.copy(total, partial_, static_cast<size_t>(count) * sizeof(float));
    for (int64_t k = 1; k < shards_; ++k) ops.binary(BinaryOp::add, total, partial_ + k * count, total, count);
  }

  // dgamma = inv_std S2, dbeta = S1: written, or added to what is there.
  void add_gradients(Ops& ops, bool overwrite, const float* s1, const float* s2, float* dgamma, float* dbeta) {
    const int64_t c = channels_;
    if (overwrite) {
      ops.binary(BinaryOp::multiply, inv_std_, s2, dgamma, c);
      ops.copy(dbeta, s1, static_cast<size_t>(c) * sizeof(float));
    } else {
      ops.binary(BinaryOp::multiply, inv_std_, s2, t3_, c);
      ops.binary(BinaryOp::add, dgamma, t3_, dgamma, c);
      ops.binary(BinaryOp::add, dbeta, s1, dbeta, c);
    }
  }

  int64_t channels_;
  float eps_, momentum_;
  ParamHandle gamma_ = 0, beta_ = 0;
  BufferHandle running_mean_ = 0, running_var_ = 0;
  int64_t batch_ = 0, plane_ = 0, shards_ = 1;
  int64_t block_ = 1;        // the activations' channel block
  bool fused_relu_ = false;  // it runs the ReLU after it (LayerPlanner::fused_relu)
  double elements_ = 0;      // the values each statistic sums over (the whole batch's), from forward
  Shape planned_;
  // Per channel, in the executor's memory: the pass's mean and 1 / sqrt(var + eps) (kept for
  // backward), the affine form of the normalisation, sums and scratch.
  float *mean_ = nullptr, *inv_std_ = nullptr, *scale_ = nullptr, *shift_ = nullptr;
  float *s1_ = nullptr, *s2_ = nullptr, *t1_ = nullptr, *t2_ = nullptr, *t3_ = nullptr;
  float* partial_ = nullptr;  // per micro-shard sums: 2 x shards x C
};

}  // namespace

std::unique_ptr<Layer> make_batch_norm2d(const std::string& name, int64_t channels, float eps, float momentum) {
  return std::make_unique<BatchNorm2dLayer>(name, channels, eps, momentum);
}

}  // namespace mgt
