// The SDK layers. Each keeps handles into the ParameterStore and fetches its parameter and
// gradient pointers at use time (the flat buffers do not move after finalize). Parameter
// gradients are added, so micro-batches accumulate, except where StepContext::overwrite_grads
// says the buffer holds garbage: then they are written.
#include "mgtrain/layers.hpp"

#include <cstring>
#include <string>

#include "kernels/cpu/conv2d.hpp"
#include "kernels/cpu/gemm.hpp"
#include "kernels/cpu/pointwise.hpp"
#include "kernels/cpu/pool.hpp"
#include "layer_flatten.hpp"
#include "mgtrain/error.hpp"
#include "mgtrain/rng.hpp"

namespace mgt {

namespace {

void check_positive(const std::string& layer, const char* what, int64_t value) {
  MGT_CHECK(value > 0, ConfigError,
            "layer '" + layer + "': " + what + " must be positive, got " + std::to_string(value));
}

// Elements per row of a batch-first tensor.
int64_t row_size(const Shape& s) {
  int64_t n = 1;
  for (size_t i = 1; i < s.size(); ++i) n *= s[i];
  return n;
}

void require_finalized(const Layer& layer, const ParameterStore* store) {
  MGT_CHECK(store && store->finalized(), Error,
            "layer '" + layer.name() + "' used before its parameters were declared and finalized");
}

void copy_if_distinct(const Tensor& from, Tensor& to) {
  if (to.data() != from.data())
    std::memcpy(to.data(), from.data(), sizeof(float) * static_cast<size_t>(from.numel()));
}

// ---------------------------------------------------------------------------------------------

class LinearLayer final : public Layer {
 public:
  LinearLayer(const std::string& name, int64_t in, int64_t out, Init init)
      : Layer(name), in_(in), out_(out), init_(init) {
    check_positive(name, "in_features", in);
    check_positive(name, "out_features", out);
  }

  void declare(ParameterStore& store) override {
    store_ = &store;
    weight_ = store.declare(name() + ".weight", {out_, in_}, init_, in_);
    bias_ = store.declare(name() + ".bias", {out_}, Init::zeros, in_);
  }

  Shape output_shape(const Shape& input) const override {
    MGT_CHECK(input.size() >= 2 && row_size(input) == in_, ConfigError,
              "layer '" + name() + "' expects input [B, " + std::to_string(in_) +
                  "] (or higher rank with that many features per row), got " + shape_string(input));
    return {input[0], out_};
  }

  void forward(const Tensor& in, Tensor& out, const StepContext&) override {
    require_finalized(*this, store_);
    const int64_t batch = in.dim(0);
    // y = b broadcast, then y += x W^T in the GEMM (beta = 1).
    kernels::broadcast_rows(store_->param(bias_), out.data(), batch, out_);
    kernels::sgemm(false, true, batch, out_, in_, 1.0f, in.data(), in_, store_->param(weight_), in_,
                   1.0f, out.data(), out_);
  }

  void backward(const Tensor& in, const Tensor&, const Tensor& grad_out, Tensor* grad_in,
                const StepContext& ctx) override {
    require_finalized(*this, store_);
    const int64_t batch = in.dim(0);
    if (WeightGradientSink* sink = store_->weight_gradient_sink()) {
      // Deterministic mode: the reducer forms dW and db from the factors, per micro-shard.
      sink->add_linear(weight_, bias_, grad_out.data(), in.data(), batch, out_, in_, ctx.shards);
    } else {
      // dW += dy^T x, db += column sums of dy (= when the gradients were discarded).
      kernels::sgemm(true, false, out_, in_, batch, 1.0f, grad_out.data(), out_, in.data(), in_,
                     ctx.overwrite_grads ? 0.0f : 1.0f, store_->grad(weight_), in_);
      if (ctx.overwrite_grads) std::fill_n(store_->grad(bias_), out_, 0.0f);
      kernels::add_column_sums(grad_out.data(), store_->grad(bias_), batch, out_);
    }
    if (grad_in)
      kernels::sgemm(false, false, batch, in_, out_, 1.0f, grad_out.data(), out_,
                     store_->param(weight_), in_, 0.0f, grad_in->data(), in_);
  }

  std::vector<ParamHandle> param_handles() const override { return {weight_, bias_}; }
  LayerSpec spec() const override {
    LayerSpec s;
    s.kind = LayerSpec::Kind::linear;
    s.in = in_;
    s.out = out_;
    s.weight = weight_;
    s.bias = bias_;
    return s;
  }
  bool row_wise(int64_t shard_rows, int64_t shards) const override {
    return kernels::sgemm_rows_independent(shard_rows, shards, out_, in_);
  }

 private:
  int64_t in_, out_;
  Init init_;
  ParamHandle weight_ = 0, bias_ = 0;
};

// ---------------------------------------------------------------------------------------------

class Conv2dLayer final : public Layer {
 public:
  Conv2dLayer(const std::string& name, int64_t in_c, int64_t out_c, int64_t k, int64_t stride,
              int64_t padding)
      : Layer(name) {
    check_positive(name, "in_channels", in_c);
    check_positive(name, "out_channels", out_c);
    check_positive(name, "kernel", k);
    check_positive(name, "stride", stride);
    MGT_CHECK(padding >= 0, ConfigError,
              "layer '" + name + "': padding must be >= 0, got " + std::to_string(padding));
    shape_.in_channels = in_c;
    shape_.out_channels = out_c;
    shape_.kernel = k;
    shape_.stride = stride;
    shape_.padding = padding;
  }

  void declare(ParameterStore& store) override {
    store_ = &store;
    const int64_t fan_in = shape_.in_channels * shape_.kernel * shape_.kernel;
    weight_ = store.declare(name() + ".weight",
                            {shape_.out_channels, shape_.in_channels, shape_.kernel, shape_.kernel},
                            Init::he_uniform, fan_in);
    bias_ = store.declare(name() + ".bias", {shape_.out_channels}, Init::zeros, fan_in);
  }

  Shape output_shape(const Shape& input) const override {
    MGT_CHECK(input.size() == 4 && input[1] == shape_.in_channels, ConfigError,
              "layer '" + name() + "' expects input [B, " + std::to_string(shape_.in_channels) +
                  ", H, W], got " + shape_string(input));
    const kernels::Conv2dShape s = with_input(input);
    MGT_CHECK(s.out_height() > 0 && s.out_width() > 0, ConfigError,
              "layer '" + name() + "': input " + shape_string(input) + " is smaller than kernel " +
                  std::to_string(shape_.kernel) + " with padding " +
                  std::to_string(shape_.padding));
    return {input[0], shape_.out_channels, s.out_height(), s.out_width()};
  }

  void forward(const Tensor& in, Tensor& out, const StepContext&) override {
    require_finalized(*this, store_);
    conv_.forward(with_input(in.shape()), in.dim(0), in.data(), store_->param(weight_),
                  store_->param(bias_), out.data());
  }

  void backward(const Tensor& in, const Tensor&, const Tensor& grad_out, Tensor* grad_in,
                const StepContext& ctx) override {
    require_finalized(*this, store_);
    const kernels::Conv2dShape s = with_input(in.shape());
    conv_.backward_weights(s, in.dim(0), in.data(), grad_out.data(), store_->grad(weight_),
                           store_->grad(bias_), /*accumulate=*/!ctx.overwrite_grads);
    if (grad_in)
      conv_.backward_data(s, in.dim(0), grad_out.data(), store_->param(weight_), grad_in->data());
  }

  std::vector<ParamHandle> param_handles() const override { return {weight_, bias_}; }
  LayerSpec spec() const override {
    LayerSpec s;
    s.kind = LayerSpec::Kind::conv2d;
    s.in = shape_.in_channels;
    s.out = shape_.out_channels;
    s.kernel = shape_.kernel;
    s.stride = shape_.stride;
    s.padding = shape_.padding;
    s.weight = weight_;
    s.bias = bias_;
    return s;
  }

 private:
  kernels::Conv2dShape with_input(const Shape& input) const {
    kernels::Conv2dShape s = shape_;
    s.height = input[2];
    s.width = input[3];
    return s;
  }

  kernels::Conv2dShape shape_;
  kernels::Conv2d conv_;  // primitives cached per input shape and batch size
  ParamHandle weight_ = 0, bias_ = 0;
};

// ---------------------------------------------------------------------------------------------

class MaxPool2dLayer final : public Layer {
 public:
  MaxPool2dLayer(const std::string& name, int64_t kernel, int64_t stride)
      : Layer(name), kernel_(kernel), stride_(stride) {
    check_positive(name, "kernel", kernel);
    check_positive(name, "stride", stride);
  }

  Shape output_shape(const Shape& input) const override {
    MGT_CHECK(input.size() == 4 && input[2] >= kernel_ && input[3] >= kernel_, ConfigError,
              "layer '" + name() + "' expects input [B, C, H, W] with H, W >= " +
                  std::to_string(kernel_) + ", got " + shape_string(input));
    return {input[0], input[1], (input[2] - kernel_) / stride_ + 1,
            (input[3] - kernel_) / stride_ + 1};
  }
  LayerSpec spec() const override {
    LayerSpec s;
    s.kind = LayerSpec::Kind::max_pool2d;
    s.kernel = kernel_;
    s.stride = stride_;
    return s;
  }

  void forward(const Tensor& in, Tensor& out, const StepContext&) override {
    // The arg-max buffer only grows, so after the first step it is not reallocated.
    if (argmax_.size() < static_cast<size_t>(out.numel())) argmax_.resize(out.numel());
    kernels::max_pool2d_forward(in.data(), out.data(), argmax_.data(), in.dim(0) * in.dim(1),
                                in.dim(2), in.dim(3), kernel_, stride_);
  }

  // Uses the arg-max recorded by the latest forward, which must have been over this input.
  void backward(const Tensor& in, const Tensor&, const Tensor& grad_out, Tensor* grad_in,
                const StepContext&) override {
    if (!grad_in) return;
    kernels::max_pool2d_backward(grad_out.data(), argmax_.data(), grad_in->data(),
                                 in.dim(0) * in.dim(1), in.dim(2), in.dim(3), kernel_, stride_);
  }

 private:
  int64_t kernel_, stride_;
  std::vector<int32_t> argmax_;
};

// ---------------------------------------------------------------------------------------------

class ReluLayer final : public Layer {
 public:
  explicit ReluLayer(const std::string& name) : Layer(name) {}
  Shape output_shape(const Shape& input) const override { return input; }
  LayerSpec spec() const override {
    LayerSpec s;
    s.kind = LayerSpec::Kind::relu;
    return s;
  }
  void forward(const Tensor& in, Tensor& out, const StepContext&) override {
    kernels::relu_forward(in.data(), out.data(), in.numel());
  }
  void backward(const Tensor&, const Tensor& out, const Tensor& grad_out, Tensor* grad_in,
                const StepContext&) override {
    if (grad_in) kernels::relu_backward(out.data(), grad_out.data(), grad_in->data(), out.numel());
  }
  bool row_wise(int64_t, int64_t) const override { return true; }
};

// ---------------------------------------------------------------------------------------------

class DropoutLayer final : public Layer {
 public:
  DropoutLayer(const std::string& name, float p)
      : Layer(name), p_(p), purpose_(rng::purpose_hash("dropout:" + name)) {
    MGT_CHECK(
        p >= 0.0f && p < 1.0f, ConfigError,
        "layer '" + name + "': dropout probability must be in [0, 1), got " + std::to_string(p));
  }

  Shape output_shape(const Shape& input) const override { return input; }
  LayerSpec spec() const override {
    LayerSpec s;
    s.kind = LayerSpec::Kind::dropout;
    s.probability = p_;
    s.rng_purpose = purpose_;
    return s;
  }

  void forward(const Tensor& in, Tensor& out, const StepContext& ctx) override {
    if (!ctx.training || p_ == 0.0f) {
      copy_if_distinct(in, out);
      return;
    }
    const int64_t n = in.numel();
    const int64_t features = row_size(in.shape());
    if (mask_.size() < static_cast<size_t>(n)) mask_.resize(n);
    // Element (row, j) of this rank's slice is element (first_sample + row) * features + j of the
    // step's stream: first_sample is the row's place in the global batch, so the mask does not
    // depend on how ranks or micro-batches split the batch.
    const uint64_t key = rng::make_key(ctx.seed, purpose_);
    const auto stream = static_cast<uint64_t>(ctx.step);
    rng::fill_uniform(mask_.data(), static_cast<size_t>(n), 0.0f, 1.0f, key, stream,
                      static_cast<uint64_t>(ctx.first_sample * features));
    kernels::dropout_scales(mask_.data(), n, p_);
    kernels::multiply(in.data(), mask_.data(), out.data(), n);
  }

  // Each element's mask comes from its global sample index: rows are independent.
  bool row_wise(int64_t, int64_t) const override { return true; }

  // Uses the mask of the latest training forward, which must have been over this input.
  void backward(const Tensor&, const Tensor&, const Tensor& grad_out, Tensor* grad_in,
                const StepContext& ctx) override {
    if (!grad_in) return;
    if (!ctx.training || p_ == 0.0f) {
      copy_if_distinct(grad_out, *grad_in);
      return;
    }
    kernels::multiply(grad_out.data(), mask_.data(), grad_in->data(), grad_out.numel());
  }

 private:
  float p_;
  uint64_t purpose_;
  std::vector<float> mask_;  // per element: 0 or 1 / (1 - p)
};

}  // namespace

// -------------------------------------------------------------------------------------------------

Shape FlattenLayer::output_shape(const Shape& input) const {
  MGT_CHECK(!input.empty(), ConfigError,
            "layer '" + name() + "' expects a batch-first input, got " + shape_string(input));
  return {input[0], row_size(input)};
}

void FlattenLayer::forward(const Tensor& in, Tensor& out, const StepContext&) {
  copy_if_distinct(in, out);
}

void FlattenLayer::backward(const Tensor&, const Tensor&, const Tensor& grad_out, Tensor* grad_in,
                            const StepContext&) {
  if (grad_in) copy_if_distinct(grad_out, *grad_in);
}

std::unique_ptr<Layer> make_linear(const std::string& name, int64_t in_features,
                                   int64_t out_features, Init weight_init) {
  return std::make_unique<LinearLayer>(name, in_features, out_features, weight_init);
}

std::unique_ptr<Layer> make_conv2d(const std::string& name, int64_t in_channels,
                                   int64_t out_channels, int64_t kernel, int64_t stride,
                                   int64_t padding) {
  return std::make_unique<Conv2dLayer>(name, in_channels, out_channels, kernel, stride, padding);
}

std::unique_ptr<Layer> make_max_pool2d(const std::string& name, int64_t kernel, int64_t stride) {
  return std::make_unique<MaxPool2dLayer>(name, kernel, stride);
}

std::unique_ptr<Layer> make_relu(const std::string& name) {
  return std::make_unique<ReluLayer>(name);
}

std::unique_ptr<Layer> make_flatten(const std::string& name) {
  return std::make_unique<FlattenLayer>(name);
}

std::unique_ptr<Layer> make_dropout(const std::string& name, float probability) {
  return std::make_unique<DropoutLayer>(name, probability);
}

}  // namespace mgt
