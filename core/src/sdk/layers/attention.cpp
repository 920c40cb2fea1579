// Multi-head scaled dot-product attention over [B, T, 3 * dim] (each token's query, key and value,
// as the linear layer before it gives them, head h in columns h * dim/heads of each) to [B, T, dim]
// (the heads' outputs side by side, for the projection after it). Per sample and head: S = Q K^T,
// P = softmax(S / sqrt(dim/heads)) with a causal mask (a token sees itself and those before it) or
// none (bidirectional, for encoders), O = P V; batched GEMMs and a row softmax on the backend.
// The probabilities are kept from forward for backward. Samples do not meet, and each GEMM has the
// same shape in any batch, so the layer is row-wise.
#include <cmath>
#include <string>

#include "layer_checks.hpp"
#include "mgtrain/layers.hpp"

namespace mgt {
namespace {

class AttentionLayer final : public Layer {
 public:
  AttentionLayer(const std::string& name, int64_t dim, int64_t heads, bool causal)
      : Layer(name), dim_(dim), heads_(heads), causal_(causal) {
    layers::check_positive(name, "dim", dim);
    layers::check_positive(name, "heads", heads);
    MGT_CHECK(dim % heads == 0, ConfigError,
              "layer '" + name + "': heads = " + std::to_string(heads) +
                  " does not divide dim = " + std::to_string(dim) + " (a head's width is dim / heads)");
    head_dim_ = dim / heads;
  }

  Shape output_shape(const Shape& input) const override {
    MGT_CHECK(input.size() == 3 && input[2] == 3 * dim_, ConfigError,
              "layer '" + name() + "' expects queries, keys and values [B, T, " + std::to_string(3 * dim_) + "], got " +
                  shape_string(input));
    return {input[0], input[1], dim_};
  }

  void plan(LayerPlanner& planner, const Shape& input) override {
    output_shape(input);
    planned_ = input;
    const auto square = static_cast<size_t>(input[1] * input[1]);
    probs_ = planner.allocate_array<float>(static_cast<size_t>(input[0] * heads_) * square);
    scratch_ = planner.allocate_array<float>(static_cast<size_t>(heads_) * square);
  }

  void forward(const LayerRun& run, const Tensor& in, Tensor& out) override {
    layers::check_planned(name(), planned_, in.shape());
    Ops& ops = run.ops;
    const int64_t batch = in.dim(0), t = in.dim(1), hd = head_dim_, ld = 3 * dim_;
    for (int64_t b = 0; b < batch; ++b) {
      const float* q = in.data() + b * t * ld;
      // S_h = Q_h K_h^T for every head of the sample at once.
      ops.gemm_batched(false, true, t, t, hd, 1.0f, q, ld, hd, q + dim_, ld, hd, 0.0f, probs(b), t, t * t, heads_);
    }
    ops.softmax_rows(probs_, probs_, batch * heads_ * t, t, scale(), causal_);
    for (int64_t b = 0; b < batch; ++b) {
      const float* v = in.data() + b * t * ld + 2 * dim_;
      ops.gemm_batched(false, false, t, hd, t, 1.0f, probs(b), t, t * t, v, ld, hd, 0.0f, out.data() + b * t * dim_,
                       dim_, hd, heads_);
    }
  }

  void backward(const LayerRun& run, const Tensor& in, const Tensor&, const Tensor& grad_out,
                Tensor* grad_in) override {
    if (!grad_in) return;
    Ops& ops = run.ops;
    const int64_t batch = in.dim(0), t = in.dim(1), hd = head_dim_, ld = 3 * dim_;
    for (int64_t b = 0; b < batch; ++b) {
      const float* q = in.data() + b * t * ld;
      const float* k = q + dim_;
      const float* v = q + 2 * dim_;
      const float* dout = grad_out.data() + b * t * dim_;
      float* dq = grad_in->data() + b * t * ld;
      float* dk = dq + dim_;
      float* dv = dq + 2 * dim_;
      // dP = dO V^T; dV = P^T dO; dS = softmax's backward of dP; dQ = dS K; dK = dS^T Q.
      ops.gemm_batched(false, true, t, t, hd, 1.0f, dout, dim_, hd, v, ld, hd, 0.0f, scratch_, t, t * t, heads_);
      ops.gemm_batched(true, false, t, hd, t, 1.0f, probs(b), t, t * t, dout, dim_, hd, 0.0f, dv, ld, hd, heads_);
      ops.softmax_rows_backward(probs(b), scratch_, scratch_, heads_ * t, t, scale());
      ops.gemm_batched(false, false, t, hd, t, 1.0f, scratch_, t, t * t, k, ld, hd, 0.0f, dq, ld, hd, heads_);
      ops.gemm_batched(true, false, t, hd, t, 1.0f, scratch_, t, t * t, q, ld, hd, 0.0f, dk, ld, hd, heads_);
    }
  }

  bool row_wise(const Ops&, int64_t, int64_t) const override { return true; }
  bool backward_reads_output() const override { return false; }
  LayerDescription describe() const override {
    LayerDescription d;
    d.kind = LayerKind::attention;
    d.ints = {{"heads", heads_}, {"causal", causal_ ? 1 : 0}};
    return d;
  }

 private:
  float scale() const { return 1.0f / std::sqrt(static_cast<float>(head_dim_)); }
  float* probs(int64_t sample) const { return probs_ + sample * heads_ * planned_[1] * planned_[1]; }

  int64_t dim_, heads_, head_dim_ = 1;
  bool causal_;
  Shape planned_;
  float* probs_ = nullptr;    // [B, heads, T, T]: the forward's probabilities
  float* scratch_ = nullptr;  // [heads, T, T]: one sample's dP, then dS
};

}  // namespace

std::unique_ptr<Layer> make_attention(const std::string& name, int64_t dim, int64_t heads, bool causal) {
  return std::make_unique<AttentionLayer>(name, dim, heads, causal);
}

}  // namespace mgt
