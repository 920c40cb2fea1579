#pragma once
// The building blocks a model plugin composes, and the interface of a plugin's own layer. Each
// layer has forward and backward over a batch (first dimension), written over mgtrain/ops.hpp;
// backward *adds* its parameter gradients into the gradient buffer (so several micro-batches can
// accumulate) and writes the input gradient when one is asked for.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "mgtrain/export.hpp"
#include "mgtrain/layer_description.hpp"
#include "mgtrain/ops.hpp"
#include "mgtrain/parameters.hpp"
#include "mgtrain/tensor.hpp"

namespace mgt {

class BatchStatistics;
class Layer;

// Told when each layer's forward and backward begin and end (a residual block's layers inside its
// own), while a timeline is written (metrics.trace). On a GPU that is the time the host took to
// launch the layer's work, not the GPU's.
class MGT_API LayerTimer {
 public:
  virtual ~LayerTimer() = default;
  virtual void begin(const Layer& layer) = 0;
  virtual void end(const Layer& layer) = 0;
};

// What a layer may need to know about the step besides its input.
struct StepContext {
  uint64_t seed = 0;
  int64_t step = 0;          // global optimizer step, for dropout masks
  int64_t micro_step = 0;    // micro-batch within the step (gradient accumulation)
  int64_t first_sample = 0;  // global index of this rank's first row in the batch
  bool training = true;
  // Backward only: the parameter gradients hold garbage (ParameterStore::discard_grads), so each
  // layer writes its gradients instead of adding to them, saving a pass over memory to zero them.
  // Every backward must then write every gradient of the layer.
  bool overwrite_grads = false;
  // Deterministic mode: the rows are this many micro-shards of equal size, in order (more than one
  // only when the model is shard_batchable). A layer passes it to the WeightGradientSink.
  int64_t shards = 1;
  // The pass's index within the step on this rank (micro-batches and their passes, in order).
  int64_t pass = 0;
  // Where a layer that normalises by batch statistics (batch norm) sums them over the batch: null
  // when each pass normalises by its own rows (per rank, as PyTorch's BatchNorm2d); otherwise over
  // every rank's pass (model.sync_bn) or, in deterministic mode, over every micro-shard of the
  // global batch in a fixed order.
  BatchStatistics* batch_statistics = nullptr;
  // Set only while the trainer looks for where a non-finite gradient came from: the executor calls
  // it after each layer's forward (a residual block's layers too) with the layer and its output.
  const std::function<void(const Layer&, const Tensor&)>* after_layer = nullptr;
  // Set while a timeline is written: the executor reports each layer's forward and backward.
  LayerTimer* layer_timer = nullptr;
};

// Sums per-micro-shard statistics over the batch a layer normalises by. The trainer provides it
// (StepContext::batch_statistics) when statistics span more than one pass; a layer calls it from
// forward and backward, so every rank must make the same calls in the same order.
class MGT_API BatchStatistics {
 public:
  virtual ~BatchStatistics() = default;
  // partial: `shards` blocks of `count` floats in the executor's memory, one per micro-shard of the
  // pass (StepContext::shards), in order. Writes into `total` (count floats, executor memory) their
  // sum over the whole batch. With `elements` (the values each partial sum of this pass adds up, all
  // shards together), sets it to that count over the whole batch.
  virtual void sum(Ops& ops, const float* partial, int64_t shards, int64_t count, float* total,
                   double* elements = nullptr) = 0;
};

// What an executor hands a layer when it plans it for an input shape: the operations, and memory
// of the executor's (device memory on a GPU) for the layer's own buffers (a dropout mask, bf16
// copies of its operands), zero-filled and kept until the layer is planned again.
class MGT_API LayerPlanner {
 public:
  virtual ~LayerPlanner() = default;
  virtual Ops& ops() = 0;
  virtual void* allocate(size_t bytes) = 0;
  template <typename T>
  T* allocate_array(size_t count) {
    return static_cast<T*>(allocate(count * sizeof(T)));
  }
  // GEMMs and convolutions on bfloat16 operands with FP32 accumulation (gpu.precision = bf16).
  virtual bool bf16() const { return false; }
  // The passes run with this many deterministic micro-shards (StepContext::shards). A layer that
  // handles_shards (LayerHints) is planned for all of their rows; any other for one shard's rows
  // when it is not row_wise (the executor then runs it one shard at a time).
  virtual int64_t shards() const { return 1; }
  // The channel blocks (mgtrain/ops.hpp) of the layer's input and output, and of their gradients:
  // 1 (plain NCHW) unless the layer said it takes blocked activations (LayerHints::blocked_activations).
  virtual int64_t input_block() const { return 1; }
  virtual int64_t output_block() const { return 1; }
  // The two as the operations take them (Ops::make_conv, make_max_pool).
  ActivationLayout layout() const {
    ActivationLayout l;
    l.input_block = input_block();
    l.output_block = output_block();
    return l;
  }
  // True when the layer runs the ReLU that follows it (LayerHints::fuses_relu): forward writes the
  // ReLU's output, backward gets the gradient of that output, the output being the ReLU's.
  virtual bool fused_relu() const { return false; }
  // Executor memory holding a copy of `bytes` of host memory: constants a layer computes on the
  // host in plan() (RoPE's cos/sin tables, ALiBi's slopes, a fixed mask), which Ops cannot make.
  // Why a method of its own: allocate() gives zero-filled memory and no operation copies from the
  // host, and on a GPU the copy must be made while planning (outside any recorded step), not from
  // forward. The host memory may be freed when it returns. The copy is read-only and kept until
  // the layer is planned again; it is not planned memory a micro-shard's backward reads back, so a
  // layer run one shard at a time (LayerHints::planned_memory_is_scratch) never has it saved or
  // put back: only allocate()'s memory is, and a layer whose only planned memory is uploaded
  // constants may still say its planned memory is scratch.
  virtual const void* upload(const void* host, size_t bytes) = 0;
  template <typename T>
  const T* upload_array(const T* host, size_t count) {
    static_assert(std::is_trivially_copyable_v<T>, "upload_array copies bytes");
    return static_cast<const T*>(upload(host, count * sizeof(T)));
  }
};

// Which activations in a channel block (mgtrain/ops.hpp) a layer takes, for an input shape.
enum class BlockedActivations {
  none,         // plain NCHW in and out: the default, for any layer that reads its tensors' layout
  same,         // either, the output in the input's (batch norm, ReLU, a residual block)
  independent,  // input and output each in either (a convolution, max pooling; global average pooling)
};

// What the executor runs a layer with when it asks for its hints (Layer::hints). Only some hints
// depend on it (LayerHints says which); the others must not.
struct HintQuery {
  // sizeof(HintQuery) of the core that filled it (see LayerHints: fields are only appended).
  uint32_t size = sizeof(HintQuery);
  // The executor's operations; never null.
  const Ops* ops = nullptr;
  // The input shape (batch first) of a pass; never null, but empty where the executor asks before
  // it knows the input (hints that depend on it are then not read).
  const Shape* input = nullptr;
  // Deterministic micro-shards in the pass (StepContext::shards): input[0] / shards rows each.
  int64_t shards = 1;
  // The channel block (Ops::channel_block()) the executor would keep activations in; 1: none.
  int64_t block = 1;
};

// A layer's executor hints, one value: a new optimisation is a new field here, not a new virtual
// method of Layer (a new virtual moves the vtable slots a built plugin calls through, and every
// plugin had to be rebuilt). Binary stability: fields are only ever appended, and the struct is
// filled in the core's memory, passed by reference, never returned by value (a small struct comes
// back in registers, and which ones depends on its size). A layer built against an older header
// writes a prefix of a newer core's struct, whose later fields keep the defaults the core put
// there; `size` (the core's sizeof) lets a layer built against a newer header check
// MGT_HAS_FIELD(hints, field) before writing a field an older core may lack. Set fields one by one:
// assigning a whole LayerHints would write the layer's sizeof of it.
struct LayerHints {
  uint32_t size = sizeof(LayerHints);
  // The output is the input's memory seen in another shape (Flatten, dropout of probability 0):
  // the executor aliases the two and calls neither forward nor backward.
  bool aliases_input = false;
  // Forward may write its output over its input and backward reads neither its input nor needs
  // grad_in apart from grad_out (ReLU: element-wise, its backward reads the output): the executor
  // then gives it the input's memory where the layer before does not read its own output in
  // backward, one activation and one gradient buffer fewer.
  bool runs_in_place = false;
  // False when backward does not read this layer's output (Linear, Conv2d), so a layer after it
  // may run in place over that output.
  bool backward_reads_output = true;
  // Depends on the query (ops, input, shards): the layer treats each row on its own, bit for bit,
  // on *query.ops: a row's output and input gradient are the same in a batch of `shards`
  // micro-shards of input[0] / shards rows as in a batch of one shard; and, when the store has a
  // WeightGradientSink, every parameter gradient goes to it. Deterministic mode then runs the
  // shards through the model in one pass (Model::shard_batchable).
  bool row_wise = false;
  // The layer takes a pass of several deterministic micro-shards (StepContext::shards) itself
  // although it is not row-wise: it forms what it needs per shard in order (batch norm: its
  // statistics, summed through StepContext::batch_statistics; each shard's parameter gradient
  // into WeightGradientSink::shard_gradients), or runs layers of its own by the executor's rule (a
  // residual block). The executor runs any other layer that is not row_wise one shard at a time,
  // on a slice of the pass, its parameter gradients going to that shard's buffer: every shard's
  // forward, later every shard's backward; what its plan() allocated is kept per shard between
  // the two (planned_memory_is_scratch).
  bool handles_shards = false;
  // What plan() allocated holds nothing a backward needs from its forward (constants set in plan,
  // scratch of one call). Only an optimisation: a layer run one micro-shard at a time (not
  // row_wise, not handles_shards) gets its planned memory saved after each shard's forward and
  // put back before that shard's backward, so a layer may keep there what its backward reads
  // (Swish's gate, a pooling's maxima); true skips those copies.
  bool planned_memory_is_scratch = false;
  // Depends on the query (ops): the layer can run a ReLU that follows it on *query.ops in its own
  // passes over memory (batch norm, a residual block): the executor then tells it in plan()
  // (LayerPlanner::fused_relu) and calls neither the ReLU's forward nor its backward, where the
  // ReLU runs in place over its output. Backward's grad_out is then the ReLU's output gradient,
  // in memory the layer may overwrite (the ReLU's own backward would write its input gradient
  // there).
  bool fuses_relu = false;
  // Depends on the query (input, block; asked where block > 1): whether forward and backward take
  // [B, C, H, W] activations in the channel block query.block for this input shape. The executor
  // keeps activations blocked between layers that do, where the block divides the channels, and
  // tells each layer in plan() (LayerPlanner::input_block, output_block); the model's input and
  // output stay NCHW.
  BlockedActivations blocked_activations = BlockedActivations::none;
};

// What forward and backward run with: the executor's operations, its parameters and gradients
// (the flat buffers on its device, laid out as the store the layer declared into) and the step.
struct LayerRun {
  Ops& ops;
  ParameterStore& store;
  const StepContext& step;
};

// A layer is written once, over Ops, and every executor runs it: the CPU path, deterministic
// mode and the GPU path. Its tensors are views of the executor's memory: a layer passes their
// pointers to the ops and never dereferences them.
class MGT_API Layer {
 public:
  virtual ~Layer() = default;
  const std::string& name() const { return name_; }

  // Declares parameters as "<name>.weight" etc.; called once before the store is finalized. The
  // handles it returns are what forward and backward look up in LayerRun::store.
  virtual void declare(ParameterStore&) {}
  // Shape of the output for an input shape (batch first); throws ConfigError naming the layer
  // when the input does not fit.
  virtual Shape output_shape(const Shape& input) const = 0;
  // Called by the executor before the first forward over an input shape (batch included), and
  // again whenever that shape changes: makes the layer's plans (ops.make_conv) and buffers.
  virtual void plan(LayerPlanner& planner, const Shape& input) {
    (void)planner;
    (void)input;
  }
  // out has output_shape(in.shape()).
  virtual void forward(const LayerRun& run, const Tensor& in, Tensor& out) = 0;
  // Adds parameter gradients (writes them when run.step.overwrite_grads); writes grad_in (same
  // shape as in) unless it is null. Every gradient the layer adds must belong to one of
  // param_handles(): those are what the executor announces as final after this backward.
  virtual void backward(const LayerRun& run, const Tensor& in, const Tensor& out, const Tensor& grad_out,
                        Tensor* grad_in) = 0;
  // Parameters this layer owns, in the order their gradients become final during backward.
  virtual std::vector<ParamHandle> param_handles() const { return {}; }
  // The executor's hints for this layer (LayerHints, below): optimisations it may make, each
  // defaulting to the safe choice. The executor fills `hints` with the defaults and calls this
  // whenever it plans; a layer sets the fields where it differs and leaves the others alone.
  virtual void hints(const HintQuery& query, LayerHints& hints) const {
    (void)query;
    (void)hints;
  }
  // What the layer computes, for `mgtrain export` (mgtrain/layer_description.hpp); the default,
  // LayerKind::none, says it has no export form.
  virtual LayerDescription describe() const { return {}; }

 protected:
  explicit Layer(std::string name) : name_(std::move(name)) {}

 private:
  std::string name_;
};

// A planner of layers on the CPU in host memory, for a model plugin that drives layers itself on
// the host and for tests: forward and backward then run with host_ops(). Its allocate() gives
// zero-filled, 64-byte aligned memory that lives as long as the planner; plan a layer again (with
// a new planner) when its input shape changes. An opaque handle: its layout is the core's.
MGT_API std::unique_ptr<LayerPlanner> make_host_layer_planner();

// y = x W^T + b; x is [B, in] (higher-rank input is flattened), W is [out, in].
MGT_API std::unique_ptr<Layer> make_linear(const std::string& name, int64_t in_features, int64_t out_features,
                                           Init weight_init = Init::he_uniform);
// NCHW convolution, square kernel, weight [out_c, in_c, k, k], bias [out_c].
MGT_API std::unique_ptr<Layer> make_conv2d(const std::string& name, int64_t in_channels, int64_t out_channels,
                                           int64_t kernel, int64_t stride = 1, int64_t padding = 0);
MGT_API std::unique_ptr<Layer> make_max_pool2d(const std::string& name, int64_t kernel, int64_t stride);
// Average over k x k windows (no padding), as PyTorch's AvgPool2d(kernel, stride).
MGT_API std::unique_ptr<Layer> make_avg_pool2d(const std::string& name, int64_t kernel, int64_t stride);
// [B, C, H, W] -> [B, C]: each channel's mean over its plane.
MGT_API std::unique_ptr<Layer> make_global_avg_pool2d(const std::string& name);
// Batch normalisation over [B, C, H, W] per channel, as PyTorch's BatchNorm2d: parameters
// "<name>.weight" (1) and "<name>.bias" (0), buffers "<name>.running_mean" (0) and
// "<name>.running_var" (1). Training normalises by the statistics of the pass's own rows, or with
// StepContext::batch_statistics of the whole batch (model.sync_bn; deterministic mode), and moves
// the running ones by `momentum` once a step: per rank, on the pass holding the global batch's first
// row (StepContext::first_sample == 0), so that rank 0's running statistics do not depend on the
// number of ranks; over the whole batch, on every rank's first pass. Evaluation uses the running ones.
MGT_API std::unique_ptr<Layer> make_batch_norm2d(const std::string& name, int64_t channels, float eps = 1e-5f,
                                                 float momentum = 0.1f);
// out = branch(x) + shortcut(x): a residual block. An empty shortcut is the identity; otherwise its
// layers (a projection: a strided 1x1 convolution, batch norm) must give the branch's shape.
// Backward sends the output's gradient through both and adds their input gradients.
MGT_API std::unique_ptr<Layer> make_residual(const std::string& name, std::vector<std::unique_ptr<Layer>> branch,
                                             std::vector<std::unique_ptr<Layer>> shortcut = {});
MGT_API std::unique_ptr<Layer> make_relu(const std::string& name);
MGT_API std::unique_ptr<Layer> make_flatten(const std::string& name);
// Inverted dropout; the mask is a function of (seed, step, global sample, element).
MGT_API std::unique_ptr<Layer> make_dropout(const std::string& name, float probability);

// Sequence models (a transformer), over [B, T, features] activations, the token rows of each sample
// in order:
// Token ids [B, T] (floats) -> [B, T, dim]: the token's row of "<name>.weight" [vocab, dim] plus
// the position's row of "<name>.position" [positions, dim] (T at most positions), both
// N(0, 0.02^2). positions = kNoPositions: the table's row alone, no "<name>.position" parameter
// and any T, for a model whose attention places the tokens itself (rotary) or that relies on the
// causal mask alone. table_shared: an output head (make_tied_head) uses the table too and runs
// its backward first.
inline constexpr int64_t kNoPositions = 0;
MGT_API std::unique_ptr<Layer> make_token_embedding(const std::string& name, int64_t vocab, int64_t positions,
                                                    int64_t dim, bool table_shared = false);
// Layer normalisation over the last dimension, as PyTorch's LayerNorm(dim, eps).
MGT_API std::unique_ptr<Layer> make_layer_norm(const std::string& name, int64_t dim, float eps = 1e-5f);
// y = x W^T + b over the last dimension: [..., in] -> [..., out] (each token on its own).
MGT_API std::unique_ptr<Layer> make_token_linear(const std::string& name, int64_t in_features, int64_t out_features,
                                                 Init weight_init = Init::small_normal);
// Multi-head scaled dot-product attention: [B, T, 3 dim] (queries, keys, values, as a token linear
// layer of dim -> 3 dim gives them) -> [B, T, dim]. causal: each token attends to itself and the
// tokens before it (a decoder); otherwise to all (an encoder). Self-attention is token_linear(dim,
// 3 dim), attention, token_linear(dim, dim).
MGT_API std::unique_ptr<Layer> make_attention(const std::string& name, int64_t dim, int64_t heads, bool causal);
// GELU, tanh form.
MGT_API std::unique_ptr<Layer> make_gelu(const std::string& name);
// Logits [..., vocab] = x E^T with E the table "<embedding>.weight" [vocab, dim] of a token
// embedding declared before it with table_shared = true; no bias.
MGT_API std::unique_ptr<Layer> make_tied_head(const std::string& name, const std::string& embedding, int64_t vocab,
                                              int64_t dim);

// Mean softmax cross-entropy over the batch. Writes d(loss_sum * grad_scale)/d(logits) into
// grad_logits: with grad_scale = 1/global_batch, summing the ranks' gradients gives the gradient
// of the global mean loss. Returns the *sum* of per-sample losses. A label of -1 asks for no
// loss: the row adds nothing and gets a zero gradient (a masked language model's unmasked
// positions). Other labels outside [0, classes) raise DataError.
MGT_API double softmax_cross_entropy(const Tensor& logits, const int32_t* labels, Tensor& grad_logits,
                                     float grad_scale);

// Number of rows whose arg-max logit equals the label (rows labelled -1 never count).
MGT_API int64_t count_correct(const Tensor& logits, const int32_t* labels);

}  // namespace mgt
