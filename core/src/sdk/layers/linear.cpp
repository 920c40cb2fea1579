// Linear: y = x W^T + b over GEMMs, on rows of a batch (the input flattened) or on each token of a
// sequence (the last dimension: make_token_linear). Deterministic mode hands the weight gradient's factors to the
// store's WeightGradientSink instead (its tree sums do not depend on how ranks split the batch), and
// gives every row the bits of a pass of one micro-shard (below, gemm_shards_).
#include <string>

#include "layer_checks.hpp"
#include "mgtrain/layers.hpp"

namespace mgt {
namespace {

class LinearLayer final : public Layer {
 public:
  LinearLayer(const std::string& name, int64_t in, int64_t out, Init init, bool per_token)
      : Layer(name), in_(in), out_(out), init_(init), per_token_(per_token) {
    layers::check_positive(name, "in_features", in);
    layers::check_positive(name, "out_features", out);
  }

  void declare(ParameterStore& store) override {
    weight_ = store.declare(name() + ".weight", {out_, in_}, init_, in_);
    bias_ = store.declare(name() + ".bias", {out_}, Init::zeros, in_);
  }

  Shape output_shape(const Shape& input) const override {
    if (per_token_) {
      MGT_CHECK(input.size() >= 2 && input.back() == in_, ConfigError,
                "layer '" + name() + "' expects input [..., " + std::to_string(in_) + "] (" + std::to_string(in_) +
                    " features per token), got " + shape_string(input));
      Shape out = input;
      out.back() = out_;
      return out;
    }
    MGT_CHECK(input.size() >= 2 && layers::row_size(input) == in_, ConfigError,
              "layer '" + name() + "' expects input [B, " + std::to_string(in_) +
                  "] (or higher rank with that many features per row), got " + shape_string(input));
    return {input[0], out_};
  }

  void plan(LayerPlanner& planner, const Shape& input) override {
    output_shape(input);
    planned_ = input;
    x_bf16_ = dy_bf16_ = w_bf16_ = nullptr;
    gemm_shards_ = 1;
    if (!planner.bf16()) {
      // A pass of several deterministic micro-shards: whether a row's bits depend on how many rows
      // share a GEMM call depends on the CPU's kernels (oneDNN's AVX2 sgemm blocks a call of 128
      // rows otherwise than one of 16), so it is measured here, once per shape; where they do, the
      // forward and input-gradient GEMMs run once per shard, as in a pass of one shard.
      const int64_t shards = planner.shards();
      const int64_t rows = shape_numel(input) / in_;
      if (shards > 1 && rows % shards == 0 && !planner.ops().gemm_rows_independent(rows / shards, shards, out_, in_))
        gemm_shards_ = shards;
      return;
    }
    const auto rows = static_cast<size_t>(shape_numel(input) / in_);
    x_bf16_ = planner.allocate_array<uint16_t>(rows * static_cast<size_t>(in_));
    dy_bf16_ = planner.allocate_array<uint16_t>(rows * static_cast<size_t>(out_));
    w_bf16_ = planner.allocate_array<uint16_t>(static_cast<size_t>(out_ * in_));
  }

  void forward(const LayerRun& run, const Tensor& in, Tensor& out) override {
    layers::check_planned(name(), planned_, in.shape());
    const int64_t batch = in.numel() / in_;  // rows: samples, or tokens
    Ops& ops = run.ops;
    // y = b broadcast, then y += x W^T in the GEMM (beta = 1).
    ops.broadcast_rows(run.store.param(bias_), out.data(), batch, out_);
    if (x_bf16_) {
      // bf16 operands: the weight rounded from its FP32 master once per forward, kept for backward.
      ops.to_bf16(run.store.param(weight_), w_bf16_, static_cast<size_t>(out_ * in_));
      ops.to_bf16(in.data(), x_bf16_, static_cast<size_t>(batch * in_));
      ops.gemm_bf16(false, true, batch, out_, in_, 1.0f, x_bf16_, in_, w_bf16_, in_, 1.0f, out.data(), out_);
      return;
    }
    const int64_t rows = batch / gemm_shards_;
    for (int64_t s = 0; s < gemm_shards_; ++s)
      ops.gemm(false, true, rows, out_, in_, 1.0f, in.data() + s * rows * in_, in_, run.store.param(weight_), in_, 1.0f,
               out.data() + s * rows * out_, out_);
  }

  void backward(const LayerRun& run, const Tensor& in, const Tensor&, const Tensor& grad_out,
                Tensor* grad_in) override {
    const int64_t batch = in.numel() / in_;
    Ops& ops = run.ops;
    const bool overwrite = run.step.overwrite_grads;
    float* dw = run.store.grad(weight_);
    float* db = run.store.grad(bias_);
    if (x_bf16_) {
      // dW and dx from bf16 operands into FP32; the bias gradient from the FP32 dy.
      ops.to_bf16(grad_out.data(), dy_bf16_, static_cast<size_t>(batch * out_));
      ops.gemm_bf16(true, false, out_, in_, batch, 1.0f, dy_bf16_, out_, x_bf16_, in_, overwrite ? 0.0f : 1.0f, dw,
                    in_);
      if (overwrite) ops.zero(db, static_cast<size_t>(out_) * sizeof(float));
      ops.add_column_sums(grad_out.data(), db, batch, out_);
      if (grad_in)
        ops.gemm_bf16(false, false, batch, in_, out_, 1.0f, dy_bf16_, out_, w_bf16_, in_, 0.0f, grad_in->data(), in_);
      return;
    }
    if (WeightGradientSink* sink = run.store.weight_gradient_sink()) {
      // Deterministic mode: the reducer forms dW and db from the factors, per micro-shard.
      sink->add_linear(weight_, bias_, grad_out.data(), in.data(), batch, out_, in_, run.step.shards);
    } else {
      // dW += dy^T x, db += column sums of dy (= when the gradients were discarded).
      ops.gemm(true, false, out_, in_, batch, 1.0f, grad_out.data(), out_, in.data(), in_, overwrite ? 0.0f : 1.0f, dw,
               in_);
      if (overwrite) ops.zero(db, static_cast<size_t>(out_) * sizeof(float));
      ops.add_column_sums(grad_out.data(), db, batch, out_);
    }
    if (!grad_in) return;
    const int64_t rows = batch / gemm_shards_;
    for (int64_t s = 0; s < gemm_shards_; ++s)
      ops.gemm(false, false, rows, in_, out_, 1.0f, grad_out.data() + s * rows * out_, out_, run.store.param(weight_),
               in_, 0.0f, grad_in->data() + s * rows * in_, in_);
  }

  std::vector<ParamHandle> param_handles() const override { return {weight_, bias_}; }
  void hints(const HintQuery&, LayerHints& hints) const override {
    hints.backward_reads_output = false;
    // On every CPU: the weight gradient goes to the sink, and plan() splits the GEMMs by shard
    // wherever batching them would change a row's bits.
    hints.row_wise = true;
  }
  LayerDescription describe() const override {
    LayerDescription d;
    d.kind = per_token_ ? LayerKind::token_linear : LayerKind::linear;
    d.params = {weight_, bias_};
    return d;
  }

 private:
  int64_t in_, out_;
  Init init_;
  bool per_token_;
  ParamHandle weight_ = 0, bias_ = 0;
  Shape planned_;
  int64_t gemm_shards_ = 1;     // GEMM calls a forward and an input gradient make: one a shard, or one
  uint16_t* x_bf16_ = nullptr;  // bf16: the input, the output gradient and the weight as operands
  uint16_t* dy_bf16_ = nullptr;
  uint16_t* w_bf16_ = nullptr;
};

}  // namespace

std::unique_ptr<Layer> make_linear(const std::string& name, int64_t in_features, int64_t out_features,
                                   Init weight_init) {
  return std::make_unique<LinearLayer>(name, in_features, out_features, weight_init, false);
}

std::unique_ptr<Layer> make_token_linear(const std::string& name, int64_t in_features, int64_t out_features,
                                         Init weight_init) {
  return std::make_unique<LinearLayer>(name, in_features, out_features, weight_init, true);
}

}  // namespace mgt
