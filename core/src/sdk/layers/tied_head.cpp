// The output head of a language model tied to its token embedding (GPT-2): logits = x E^T with E
// the embedding's table [vocab, dim], no bias. The table is the embedding's parameter: this layer
// runs first in backward and writes (or adds) its part of the table's gradient, and the embedding,
// made with table_shared, adds its own and announces the gradient final. Not row-wise (its weight
// gradient is a sum over rows).
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

  void forward(const LayerRun& run, const Tensor& in, Tensor& out) override {
    run.ops.gemm(false, true, in.numel() / dim_, vocab_, dim_, 1.0f, in.data(), dim_, run.store.param(table_), dim_,
                 0.0f, out.data(), vocab_);
  }

  void backward(const LayerRun& run, const Tensor& in, const Tensor&, const Tensor& grad_out,
                Tensor* grad_in) override {
    const int64_t rows = in.numel() / dim_;
    Ops& ops = run.ops;
    ops.gemm(true, false, vocab_, dim_, rows, 1.0f, grad_out.data(), vocab_, in.data(), dim_,
             run.step.overwrite_grads ? 0.0f : 1.0f, run.store.grad(table_), dim_);
    if (grad_in)
      ops.gemm(false, false, rows, dim_, vocab_, 1.0f, grad_out.data(), vocab_, run.store.param(table_), dim_, 0.0f,
               grad_in->data(), dim_);
  }

  bool backward_reads_output() const override { return false; }
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
};

}  // namespace

std::unique_ptr<Layer> make_tied_head(const std::string& name, const std::string& embedding, int64_t vocab,
                                      int64_t dim) {
  return std::make_unique<TiedHeadLayer>(name, embedding, vocab, dim);
}

}  // namespace mgt
