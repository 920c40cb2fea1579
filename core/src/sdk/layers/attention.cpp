// Multi-head scaled dot-product attention over [B, T, 3 * dim] (each token's query, key and value,
// as the linear layer before it gives them, head h in columns h * dim/heads of each) to [B, T, dim]
// (the heads' outputs side by side, for the projection after it). Per sample and head:
// O = softmax(Q K^T / sqrt(dim/heads)) V with a causal mask (a token sees itself and those before
// it) or none (bidirectional, for encoders), as one fused operation of the backend
// (Ops::attention_forward): the probabilities are never kept, only each query's log-sum-exp, from
// which backward forms them again. Samples do not meet and each is computed in an order fixed by
// the shape, so the layer is row-wise.
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
    shape_ = attention_shape(input);
    row_lse_ = planner.allocate_array<float>(static_cast<size_t>(input[0] * heads_ * input[1]));
    workspace_ = planner.allocate(planner.ops().attention_workspace(shape_));
  }

  void forward(const LayerRun& run, const Tensor& in, Tensor& out) override {
    layers::check_planned(name(), planned_, in.shape());
    const float* q = in.data();
    run.ops.attention_forward(shape_, q, q + dim_, q + 2 * dim_, out.data(), row_lse_, workspace_);
  }

  void backward(const LayerRun& run, const Tensor& in, const Tensor& out, const Tensor& grad_out,
                Tensor* grad_in) override {
    if (!grad_in) return;
    const float* q = in.data();
    float* dq = grad_in->data();
    run.ops.attention_backward(shape_, q, q + dim_, q + 2 * dim_, out.data(), grad_out.data(), row_lse_, dq, dq + dim_,
                               dq + 2 * dim_, workspace_);
  }

  void hints(const HintQuery&, LayerHints& hints) const override {
    hints.row_wise = true;
    // Backward reads the output: softmax's backward term per query, the dot product of the output
    // and its gradient.
    hints.backward_reads_output = true;
  }
  LayerDescription describe() const override {
    LayerDescription d;
    d.kind = LayerKind::attention;
    d.ints = {{"heads", heads_}, {"causal", causal_ ? 1 : 0}};
    return d;
  }

 private:
  AttentionShape attention_shape(const Shape& input) const {
    AttentionShape s;
    s.batch = input[0];
    s.tokens = input[1];
    s.heads = heads_;
    s.head_dim = head_dim_;
    s.ld = 3 * dim_;
    s.ld_out = dim_;
    s.scale = 1.0f / std::sqrt(static_cast<float>(head_dim_));
    s.causal = causal_;
    return s;
  }

  int64_t dim_, heads_, head_dim_ = 1;
  bool causal_;
  Shape planned_;
  AttentionShape shape_;
  float* row_lse_ = nullptr;   // [B, heads, T]: each query's log-sum-exp, all backward keeps
  void* workspace_ = nullptr;  // the backend's scratch for the shape
};

}  // namespace

std::unique_ptr<Layer> make_attention(const std::string& name, int64_t dim, int64_t heads, bool causal) {
  return std::make_unique<AttentionLayer>(name, dim, heads, causal);
}

}  // namespace mgt
