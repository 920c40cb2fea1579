#pragma once
// The building blocks a model plugin composes. Each layer has forward and backward over a batch
// (first dimension); backward *adds* its parameter gradients into the gradient buffer (so several
// micro-batches can accumulate) and writes the input gradient when one is asked for.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "mgtrain/parameters.hpp"
#include "mgtrain/tensor.hpp"

namespace mgt {

// What a layer may need to know about the step besides its input.
struct StepContext {
  uint64_t seed = 0;
  int64_t step = 0;            // global optimizer step, for dropout masks
  int64_t micro_step = 0;      // micro-batch within the step (gradient accumulation)
  int64_t first_sample = 0;    // global index of this rank's first row in the batch
  bool training = true;
  // Backward only: the parameter gradients hold garbage (ParameterStore::discard_grads), so each
  // layer writes its gradients instead of adding to them, saving a pass over memory to zero them.
  // Every backward must then write every gradient of the layer.
  bool overwrite_grads = false;
  // Deterministic mode: the rows are this many micro-shards of equal size, in order (more than one
  // only when the model is shard_batchable). A layer passes it to the WeightGradientSink.
  int64_t shards = 1;
};

// What a layer computes, for an executor other than its own forward and backward (the GPU path
// compiles a model's layers from these). Layers the SDK does not make are `custom`: they run on
// the CPU only.
struct LayerSpec {
  enum class Kind { custom, linear, conv2d, max_pool2d, relu, flatten, dropout };
  Kind kind = Kind::custom;
  int64_t in = 0, out = 0;                      // linear: features; conv2d: channels
  int64_t kernel = 0, stride = 1, padding = 0;  // conv2d, max_pool2d
  float probability = 0.0f;                     // dropout
  uint64_t rng_purpose = 0;                     // dropout: the purpose its masks are drawn under
  ParamHandle weight = 0, bias = 0;             // linear, conv2d
};

class Layer {
 public:
  virtual ~Layer() = default;
  const std::string& name() const { return name_; }

  // Declares parameters as "<name>.weight" etc.; called once before the store is finalized.
  virtual void declare(ParameterStore&) {}
  // Shape of the output for an input shape (batch first).
  virtual Shape output_shape(const Shape& input) const = 0;
  // out has output_shape(in.shape()) and is owned by the caller.
  virtual void forward(const Tensor& in, Tensor& out, const StepContext& ctx) = 0;
  // Adds parameter gradients; writes grad_in (same shape as in) unless it is null.
  virtual void backward(const Tensor& in, const Tensor& out, const Tensor& grad_out,
                        Tensor* grad_in, const StepContext& ctx) = 0;
  // Parameters this layer owns, in the order their gradients become final during backward.
  virtual std::vector<ParamHandle> param_handles() const { return {}; }
  virtual LayerSpec spec() const { return {}; }
  // True when the layer treats each row on its own, bit for bit: a row's output and input
  // gradient are the same in a batch of `shards` micro-shards of `shard_rows` rows as in a batch
  // of one shard; and, when the store has a WeightGradientSink, every parameter gradient goes to
  // it. Deterministic mode then runs the shards through the model in one pass
  // (Model::shard_batchable).
  virtual bool row_wise(int64_t shard_rows, int64_t shards) const {
    (void)shard_rows;
    (void)shards;
    return false;
  }

 protected:
  explicit Layer(std::string name) : name_(std::move(name)) {}
  ParameterStore* store_ = nullptr;

 private:
  std::string name_;
};

// y = x W^T + b; x is [B, in] (higher-rank input is flattened), W is [out, in].
std::unique_ptr<Layer> make_linear(const std::string& name, int64_t in_features,
                                   int64_t out_features, Init weight_init = Init::he_uniform);
// NCHW convolution, square kernel, weight [out_c, in_c, k, k], bias [out_c].
std::unique_ptr<Layer> make_conv2d(const std::string& name, int64_t in_channels,
                                   int64_t out_channels, int64_t kernel, int64_t stride = 1,
                                   int64_t padding = 0);
std::unique_ptr<Layer> make_max_pool2d(const std::string& name, int64_t kernel, int64_t stride);
std::unique_ptr<Layer> make_relu(const std::string& name);
std::unique_ptr<Layer> make_flatten(const std::string& name);
// Inverted dropout; the mask is a function of (seed, step, global sample, element).
std::unique_ptr<Layer> make_dropout(const std::string& name, float probability);

// Mean softmax cross-entropy over the batch. Writes d(loss_sum * grad_scale)/d(logits) into
// grad_logits: with grad_scale = 1/global_batch, summing the ranks' gradients gives the gradient
// of the global mean loss. Returns the *sum* of per-sample losses. Labels outside
// [0, classes) raise DataError.
double softmax_cross_entropy(const Tensor& logits, const int32_t* labels, Tensor& grad_logits,
                             float grad_scale);

// Number of rows whose arg-max logit equals the label.
int64_t count_correct(const Tensor& logits, const int32_t* labels);

}  // namespace mgt
