#include <string>

#include "layer_flatten.hpp"
#include "mgtrain/error.hpp"
#include "mgtrain/model.hpp"

namespace mgt {

void SequentialModel::add(std::unique_ptr<Layer> layer) {
  MGT_CHECK(layer != nullptr, Error, "SequentialModel::add: null layer");
  layers_.push_back(std::move(layer));
  sized_for_.clear();
}

void SequentialModel::declare(ParameterStore& store) {
  handles_.clear();
  for (auto& layer : layers_) {
    layer->declare(store);
    handles_.push_back(layer->param_handles());
  }
}

Shape SequentialModel::output_shape(const Shape& input) const {
  Shape s = input;
  for (const auto& layer : layers_) s = layer->output_shape(s);
  return s;
}

bool SequentialModel::shard_batchable(int64_t shard_rows, int64_t shards) const {
  for (const auto& layer : layers_)
    if (!layer->row_wise(shard_rows, shards)) return false;
  return !layers_.empty();
}

const Tensor& SequentialModel::forward(const Tensor& input, const StepContext& ctx) {
  MGT_CHECK(!layers_.empty(), Error, "SequentialModel::forward: the model has no layers");
  const size_t n = layers_.size();
  if (input.shape() != sized_for_ || activations_.size() != n) {
    // First batch (or a new batch shape): size activations and gradients once. A Flatten between
    // two other layers aliases its neighbours' memory rather than copying.
    std::vector<char> alias(n, 0);
    for (size_t i = 1; i + 1 < n; ++i)
      alias[i] = dynamic_cast<FlattenLayer*>(layers_[i].get()) != nullptr;
    if (alias != alias_ || activations_.size() != n) {
      // Views and owners may not trade places through resize(); start over.
      activations_.clear();
      grads_.clear();
      alias_ = std::move(alias);
    }
    activations_.resize(n);
    grads_.resize(n);
    if (handles_.size() != n) {
      handles_.clear();
      for (auto& layer : layers_) handles_.push_back(layer->param_handles());
    }
    Shape s = input.shape();
    for (size_t i = 0; i < n; ++i) {
      s = layers_[i]->output_shape(s);
      if (alias_[i])
        activations_[i] = Tensor::view(activations_[i - 1].data(), s);
      else
        activations_[i].resize(s);
    }
    // grads_[n-1] is the caller's grad_logits; the rest mirror the activations.
    for (size_t i = n - 1; i-- > 0;) {
      if (alias_[i + 1])
        grads_[i] = Tensor::view(grads_[i + 1].data(), activations_[i].shape());
      else
        grads_[i].resize(activations_[i].shape());
    }
    first_with_params_ = 0;
    while (first_with_params_ < n && handles_[first_with_params_].empty()) ++first_with_params_;
    sized_for_ = input.shape();
  }
  input_ = &input;
  const Tensor* x = &input;
  for (size_t i = 0; i < n; ++i) {
    if (!alias_[i]) layers_[i]->forward(*x, activations_[i], ctx);
    x = &activations_[i];
  }
  return activations_.back();
}

void SequentialModel::backward(const Tensor& grad_logits, const StepContext& ctx,
                               const GradientsReady& ready) {
  MGT_CHECK(input_ != nullptr && activations_.size() == layers_.size(), Error,
            "SequentialModel::backward called before forward");
  MGT_CHECK(grad_logits.numel() == activations_.back().numel(), Error,
            "SequentialModel::backward: gradient " + shape_string(grad_logits.shape()) +
                " does not match the logits " + shape_string(activations_.back().shape()));
  const Tensor* dy = &grad_logits;
  for (size_t i = layers_.size(); i-- > 0;) {
    if (!alias_[i]) {
      const Tensor& in = i == 0 ? *input_ : activations_[i - 1];
      // Below the first layer with parameters no gradient is needed (e.g. fc1's dx after a
      // leading Flatten would be a wasted GEMM).
      Tensor* dx = i <= first_with_params_ ? nullptr : &grads_[i - 1];
      layers_[i]->backward(in, activations_[i], *dy, dx, ctx);
      if (ready && !handles_[i].empty()) ready(handles_[i]);
    }
    if (i <= first_with_params_) break;
    dy = &grads_[i - 1];
  }
}

}  // namespace mgt
