// Token embedding: [B, T] token ids (held as floats) -> [B, T, dim], the id's row of the table
// plus the position's row of a learned position table, or (kNoPositions) the table's row alone,
// for a model that places its tokens otherwise: the layer then declares no position table and
// takes any T. Its backward is a scatter-add in row order
// (Ops::embedding_backward), so the same batch gives the same bits on every run. Rows with the
// same token meet in one gradient row, so a deterministic pass of several micro-shards scatters
// each shard into its own buffer of the WeightGradientSink (the bits of a shard taken alone);
// forward takes the pass whole.
#include <algorithm>
#include <string>

#include "layer_checks.hpp"
#include "mgtrain/layers.hpp"

namespace mgt {
namespace {

class TokenEmbeddingLayer final : public Layer {
 public:
  TokenEmbeddingLayer(const std::string& name, int64_t vocab, int64_t positions, int64_t dim, bool table_shared)
      : Layer(name), vocab_(vocab), positions_(positions), dim_(dim), table_shared_(table_shared) {
    layers::check_positive(name, "vocab", vocab);
    MGT_CHECK(positions >= 0, ConfigError,
              "layer '" + name + "': positions must be positive, or kNoPositions (0) for no position table, got " +
                  std::to_string(positions));
    layers::check_positive(name, "dim", dim);
  }

  void declare(ParameterStore& store) override {
    table_ = store.declare(name() + ".weight", {vocab_, dim_}, Init::small_normal, dim_);
    if (has_positions()) position_ = store.declare(name() + ".position", {positions_, dim_}, Init::small_normal, dim_);
  }

  Shape output_shape(const Shape& input) const override {
    if (!has_positions())
      MGT_CHECK(input.size() == 2 && input[1] >= 1, ConfigError,
                "layer '" + name() + "' expects token ids [B, T], got " + shape_string(input));
    else
      MGT_CHECK(input.size() == 2 && input[1] >= 1 && input[1] <= positions_, ConfigError,
                "layer '" + name() + "' expects token ids [B, T] with T at most " + std::to_string(positions_) +
                    " positions, got " + shape_string(input));
    return {input[0], input[1], dim_};
  }

  void plan(LayerPlanner& planner, const Shape& input) override {
    planned_ = input;
    shards_ = std::max<int64_t>(planner.shards(), 1);
  }

  void forward(const LayerRun& run, const Tensor& in, Tensor& out) override {
    layers::check_planned(name(), planned_, in.shape());
    const float* position = has_positions() ? run.store.param(position_) : nullptr;  // null: no position term
    run.ops.embedding_forward(in.data(), run.store.param(table_), position, out.data(), in.numel(), in.dim(1), dim_);
  }

  void backward(const LayerRun& run, const Tensor& in, const Tensor&, const Tensor& grad_out, Tensor*) override {
    WeightGradientSink* sink = run.store.weight_gradient_sink();
    if (shards_ > 1 && sink) {
      MGT_CHECK(in.dim(0) % shards_ == 0, Error,
                "layer '" + name() + "': " + std::to_string(in.dim(0)) + " rows are not " + std::to_string(shards_) +
                    " equal micro-shards");
      const int64_t rows = in.dim(0) / shards_, t = in.dim(1);
      for (int64_t k = 0; k < shards_; ++k) {
        float* flat = sink->shard_gradients(k).data();
        scatter(run.ops, in.data() + k * rows * t, grad_out.data() + k * rows * t * dim_, rows, t,
                flat + run.store.info(table_).offset,
                has_positions() ? flat + run.store.info(position_).offset : nullptr, true);
      }
      return;
    }
    scatter(run.ops, in.data(), grad_out.data(), in.dim(0), t_of(in), run.store.grad(table_),
            has_positions() ? run.store.grad(position_) : nullptr, run.step.overwrite_grads);
  }

  std::vector<ParamHandle> param_handles() const override { return params(); }
  void hints(const HintQuery&, LayerHints& hints) const override {
    hints.backward_reads_output = false;
    // Forward row by row; the parameter gradients per micro-shard (backward).
    hints.handles_shards = true;
  }
  LayerDescription describe() const override {
    LayerDescription d;
    d.kind = LayerKind::token_embedding;
    d.params = params();  // {weight} alone: a Gather without the position term
    return d;
  }

 private:
  bool has_positions() const { return positions_ != kNoPositions; }
  std::vector<ParamHandle> params() const {
    return has_positions() ? std::vector<ParamHandle>{table_, position_} : std::vector<ParamHandle>{table_};
  }
  static int64_t t_of(const Tensor& in) { return in.dim(1); }

  // The gradients of `rows` windows of t ids into dtable and dposition (null without positions):
  // written when `overwrite`, else added.
  void scatter(Ops& ops, const float* ids, const float* grad_out, int64_t rows, int64_t t, float* dtable,
               float* dposition, bool overwrite) const {
    // A head that shares the table ran its backward first and wrote (or added) its part.
    if (overwrite && !table_shared_) ops.zero(dtable, static_cast<size_t>(vocab_ * dim_) * sizeof(float));
    ops.embedding_backward(ids, grad_out, dtable, rows * t, dim_);
    if (!dposition) return;
    if (overwrite) ops.zero(dposition, static_cast<size_t>(positions_ * dim_) * sizeof(float));
    // Position t's gradient is the sum over the batch of row t: column sums of [B, T * dim].
    ops.add_column_sums(grad_out, dposition, rows, t * dim_);
  }

  int64_t vocab_, positions_, dim_;
  bool table_shared_;
  ParamHandle table_ = 0, position_ = 0;
  Shape planned_;
  int64_t shards_ = 1;
};

}  // namespace

std::unique_ptr<Layer> make_token_embedding(const std::string& name, int64_t vocab, int64_t positions, int64_t dim,
                                            bool table_shared) {
  return std::make_unique<TokenEmbeddingLayer>(name, vocab, positions, dim, table_shared);
}

}  // namespace mgt
