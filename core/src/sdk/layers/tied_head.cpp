// The output head of a language model tied to its token embedding (GPT-2): logits = x E^T with E
// the embedding's table [vocab, dim], no bias. The table is the embedding's parameter: this layer
// runs first in backward and writes (or adds) its part of the table's gradient, and the embedding,
// made with table_shared, adds its own and announces the gradient final. Its weight gradient is a
// sum over rows: a deterministic pass of several micro-shards goes through it whole, each shard's
// part of the table's gradient written to that shard's buffer of the WeightGradientSink, and its
// GEMMs split by shard where batching them would change a row's bits (as the linear layer's).
#include <algorithm>
#include <string>

#include "layer_checks.hpp"
#include "mgtrain/layers.hpp"

namespace mgt {
namespace {

class TiedHeadLayer final : public Layer {
 public:
  TiedHeadLayer(const std::string& name, std::string embedding, int64_t vocab, int64_t dim)
      : Layer(name), embedding_(std::move(embedding)), vocab_(vocab), dim_(dim) {
    layers::check_positive(name, "vocab", vocab);
    layers::check_positive(name, "dim", dim);
  }

  void declare(ParameterStore& store) override {
    const std::string table = embedding_ + ".weight";
    table_ = store.find(table, "layer '" + name() + "' (a head tied to the embedding '" + embedding_ + "')");
    MGT_CHECK(store.info(table_).shape == (Shape{vocab_, dim_}), ConfigError,
              "layer '" + name() + "': the tied table '" + table + "' is " + shape_string(store.info(table_).shape) +
                  ", expected [" + std::to_string(vocab_) + ", " + std::to_string(dim_) + "]");
  }

  Shape output_shape(const Shape& input) const override {
    MGT_CHECK(input.size() >= 2 && input.back() == dim_, ConfigError,
              "layer '" + name() + "' expects input [..., " + std::to_string(dim_) + "], got " + shape_string(input));
    Shape out = input;
    out.back() = vocab_;
    return out;
  }

  void plan(LayerPlanner& planner, const Shape& input) override {
    shards_ = std::max<int64_t>(planner.shards(), 1);
    const int64_t rows = shape_numel(input) / dim_;
    MGT_CHECK(rows % shards_ == 0, Error,
              "layer '" + name() + "': " + std::to_string(rows) + " rows are not " + std::to_string(shards_) +
                  " equal micro-shards");
    gemm_shards_ =
        shards_ > 1 && !planner.ops().gemm_rows_independent(rows / shards_, shards_, vocab_, dim_) ? shards_ : 1;
  }

  void forward(const LayerRun& run, const Tensor& in, Tensor& out) override {
    const int64_t rows = in.numel() / dim_ / gemm_shards_;
    for (int64_t s = 0; s < gemm_shards_; ++s)
      run.ops.gemm(false, true, rows, vocab_, dim_, 1.0f, in.data() + s * rows * dim_, dim_, run.store.param(table_),
                   dim_, 0.0f, out.data() + s * rows * vocab_, vocab_);
  }

  void backward(const LayerRun& run, const Tensor& in, const Tensor&, const Tensor& grad_out,
                Tensor* grad_in) override {
    const int64_t rows = in.numel() / dim_;
    Ops& ops = run.ops;
    WeightGradientSink* sink = run.store.weight_gradient_sink();
    if (shards_ > 1 && sink) {
      // Each shard's part of the table's gradient, written to its buffer (the embedding adds its own).
      const int64_t shard_rows = rows / shards_;
      for (int64_t k = 0; k < shards_; ++k)
        ops.gemm(true, false, vocab_, dim_, shard_rows, 1.0f, grad_out.data() + k * shard_rows * vocab_, vocab_,
                 in.data() + k * shard_rows * dim_, dim_, 0.0f,
                 sink->shard_gradients(k).data() + run.store.info(table_).offset, dim_);
    } else {
      ops.gemm(true, false, vocab_, dim_, rows, 1.0f, grad_out.data(), vocab_, in.data(), dim_,
               run.step.overwrite_grads ? 0.0f : 1.0f, run.store.grad(table_), dim_);
    }
    if (!grad_in) return;
    const int64_t gemm_rows = rows / gemm_shards_;
    for (int64_t s = 0; s < gemm_shards_; ++s)
      ops.gemm(false, false, gemm_rows, dim_, vocab_, 1.0f, grad_out.data() + s * gemm_rows * vocab_, vocab_,
               run.store.param(table_), dim_, 0.0f, grad_in->data() + s * gemm_rows * dim_, dim_);
  }

  void hints(const HintQuery&, LayerHints& hints) const override {
    hints.backward_reads_output = false;
    // Rows on their own in forward and in the input gradient; the table's gradient per micro-shard.
    hints.handles_shards = true;
  }
  LayerDescription describe() const override {
    LayerDescription d;
    d.kind = LayerKind::tied_head;
    d.params = {table_};
    return d;
  }

 private:
  std::string embedding_;
  int64_t vocab_, dim_;
  ParamHandle table_ = 0;
  int64_t shards_ = 1, gemm_shards_ = 1;  // micro-shards a pass; GEMM calls a pass (1, or shards_)
};

}  // namespace

std::unique_ptr<Layer> make_tied_head(const std::string& name, const std::string& embedding, int64_t vocab,
                                      int64_t dim) {
  return std::make_unique<TiedHeadLayer>(name, embedding, vocab, dim);
}

}  // namespace mgt
