#pragma once
// The operations a layer is written in. Every executor (the CPU in host memory, one GPU in device
// memory) implements them, so a layer's forward and backward are written once, over these, and
// run on every device: an SDK layer and a plugin's own layer alike, with no CUDA in either.
//
// Every pointer is in the executor's memory (device memory on a GPU): a layer hands pointers on
// and never reads or writes through them itself. Operations run in the order they are called; on
// a GPU they are asynchronous on one stream and may be recorded once and replayed (a CUDA graph),
// so a layer's forward and backward do no host work that depends on the step: randomness comes
// from uniform(), which draws for the step being run at run time.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <type_traits>

#include "mgtrain/export.hpp"

namespace mgt {

// How a [B, C, H, W] activation lies in memory: its channel block. 1 is plain NCHW. A block of k
// (oneDNN's nChw16c for 16, nChw8c for 8) is [B, C / k, H, W, k]: the k channels of a group side by
// side at each position, the layout a CPU's convolution kernels read and write without reordering.
// Only where k divides C; a sample's values are still contiguous, so rows slice as in NCHW.
// Ops::channel_block() says which block the backend's convolutions prefer.

// Where the activations of an operation lie in memory: the channel blocks of its input (and its
// gradient) and of its output (and its gradient). One value instead of trailing arguments of each
// operation, so that a layout detail to come is a field appended here (MGT_HAS_FIELD), not a new
// parameter of every virtual. Anything but 1 only where channel_block() says the backend has it.
struct ActivationLayout {
  uint32_t size = sizeof(ActivationLayout);
  int64_t input_block = 1;
  int64_t output_block = 1;
};

// The [batch, channels, plane] tensors (plane = H * W) of a per-channel pass (channel_sums,
// channel_affine), with how they lie in memory and what the pass applies with them; as
// ActivationLayout, fields are only appended.
struct ChannelTensors {
  uint32_t size = sizeof(ChannelTensors);
  int64_t batch = 0, channels = 0, plane = 0;
  // The tensors' channel block (1: NCHW); the order of the sums depends on it too.
  int64_t block = 1;
  // Only where channel_ops_fuse_relu(): the output of the ReLU that follows the layer, whose
  // gradient the pass takes: the `a` term counts only where relu_mask > 0, as the gradient that
  // ReLU lets through; null: everywhere.
  const float* relu_mask = nullptr;
  // Only where channel_ops_fuse_relu(), channel_affine alone: y is max(that, 0), as relu_forward
  // would make it.
  bool relu = false;
};

// NCHW 2-D convolution: square kernel, symmetric padding.
struct Conv2dShape {
  int64_t in_channels = 0, out_channels = 0, kernel = 1, stride = 1, padding = 0;
  int64_t height = 0, width = 0;  // input spatial size
  int64_t out_height() const { return (height + 2 * padding - kernel) / stride + 1; }
  int64_t out_width() const { return (width + 2 * padding - kernel) / stride + 1; }
  // Spelled out: CUDA sources that include this header compile as C++17.
  bool operator==(const Conv2dShape& o) const {
    return in_channels == o.in_channels && out_channels == o.out_channels && kernel == o.kernel && stride == o.stride &&
           padding == o.padding && height == o.height && width == o.width;
  }
};

// One convolution's plan for a fixed batch size (oneDNN primitives, cuDNN descriptors and
// algorithms), made once so that a step creates nothing.
class MGT_API ConvOp {
 public:
  virtual ~ConvOp() = default;
  // y = conv(x, w) + bias (bias may be null)
  virtual void forward(const float* x, const float* w, const float* bias, float* y) = 0;
  // dx = conv^T(dy, w), overwriting dx
  virtual void backward_data(const float* dy, const float* w, float* dx) = 0;
  // dw += dW(x, dy), dbias += the sums of dy over batch and space; written instead of added when
  // accumulate is false (the gradients hold garbage: StepContext::overwrite_grads).
  virtual void backward_weights(const float* x, const float* dy, float* dw, float* dbias, bool accumulate = true) = 0;
};

// Max pooling (no padding) for a fixed input shape.
class MGT_API MaxPoolOp {
 public:
  virtual ~MaxPoolOp() = default;
  virtual void forward(const float* x, float* y) = 0;
  // dx (overwritten) from the forward's x and y and the output gradient dy; the latest forward
  // must have been over this x.
  virtual void backward(const float* x, const float* y, const float* dy, float* dx) = 0;
};

// Scaled dot-product attention over `batch` samples of `tokens` tokens, each token's queries,
// keys and values split into `heads` heads of `head_dim` (head h in columns h * head_dim of each
// row): per sample and head, O = softmax(scale * Q K^T) V, where with `causal` a query sees only
// the keys at its position and before it.
struct AttentionShape {
  int64_t batch = 0, tokens = 0, heads = 0, head_dim = 0;
  int64_t ld = 0;      // floats from one token's row of q, k, v (and of their gradients) to the next
  int64_t ld_out = 0;  // the same for the output and its gradient
  float scale = 1.0f;
  bool causal = false;
  bool operator==(const AttentionShape& o) const {
    return batch == o.batch && tokens == o.tokens && heads == o.heads && head_dim == o.head_dim && ld == o.ld &&
           ld_out == o.ld_out && scale == o.scale && causal == o.causal;
  }
};

// Element-wise functions of one tensor, for layers of a plugin's own (an activation and its
// derivative are compositions of these with binary() and affine()). Values are only appended.
// sin and cos (radians): a rotary position embedding's tables made on the device, and periodic
// activations.
enum class UnaryOp { relu, sigmoid, tanh, exp, log, sqrt, reciprocal, square, abs, erf, sin, cos };
// Element-wise functions of two tensors of the same size.
enum class BinaryOp { add, subtract, multiply, divide, maximum, minimum };

class MGT_API Ops {
 public:
  virtual ~Ops() = default;

  // Row-major GEMM: C = alpha * op(A) op(B) + beta * C, op(A) [m, k], op(B) [k, n].
  virtual void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                    int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) = 0;
  // The same with A and B in bfloat16 (raw bits), FP32 accumulation: bf16 mixed precision.
  virtual void gemm_bf16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const uint16_t* a,
                         int64_t lda, const uint16_t* b, int64_t ldb, float beta, float* c, int64_t ldc) = 0;
  // y = x rounded to bfloat16, to nearest, ties to even
  virtual void to_bf16(const float* x, uint16_t* y, size_t n) = 0;
  // True when a GEMM of `shards` x `shard_rows` rows by [k, n] gives each row the bits it has in
  // a GEMM of one shard: deterministic micro-shards may then go through a layer as one batch.
  virtual bool gemm_rows_independent(int64_t shard_rows, int64_t shards, int64_t n, int64_t k) const {
    (void)shard_rows;
    (void)shards;
    (void)n;
    (void)k;
    return false;
  }

  // y[r, :] = bias for each of `rows` rows of `cols`
  virtual void broadcast_rows(const float* bias, float* y, int64_t rows, int64_t cols) = 0;
  // acc[c] += sum over rows of x[r, c]
  virtual void add_column_sums(const float* x, float* acc, int64_t rows, int64_t cols) = 0;

  // y = max(x, 0); dx = dy where y > 0, else 0 (in place too: y may be x, dx may be dy)
  virtual void relu_forward(const float* x, float* y, int64_t n) = 0;
  virtual void relu_backward(const float* y, const float* dy, float* dx, int64_t n) = 0;
  // y = x * s element-wise
  virtual void multiply(const float* x, const float* s, float* y, int64_t n) = 0;
  // y = op(x); y may be x
  virtual void unary(UnaryOp op, const float* x, float* y, int64_t n) = 0;
  // y = op(a, b); y may be a or b
  virtual void binary(BinaryOp op, const float* a, const float* b, float* y, int64_t n) = 0;
  // y = scale * x + shift; y may be x
  virtual void affine(const float* x, float* y, int64_t n, float scale, float shift) = 0;
  // Per channel c of the tensors `t` (ChannelTensors): sum_a[c] = the sum of a over the channel's
  // batch * plane elements, and, when b is not null, sum_ab[c] = the sum of a * (b - center[c])
  // (center null: 0). Summed in double in an order fixed by the shape and layout alone, so the
  // result does not depend on how the work is split: batch normalisation's statistics and the
  // sums of its backward. t.relu: not read.
  virtual void channel_sums(const float* a, const float* b, const float* center, const ChannelTensors& t, float* sum_a,
                            float* sum_ab) = 0;
  // y = scale_a[c] * a + scale_b[c] * b + shift[c] per channel of the tensors `t` (b and scale_b
  // null: no b term; shift null: none); y may be a or b.
  virtual void channel_affine(const float* a, const float* scale_a, const float* b, const float* scale_b,
                              const float* shift, float* y, const ChannelTensors& t) = 0;
  // Whether channel_sums and channel_affine take relu_mask and relu: batch norm then runs a ReLU
  // after it in its own passes over memory (LayerHints::fuses_relu).
  virtual bool channel_ops_fuse_relu() const { return false; }
  virtual void copy(void* dst, const void* src, size_t bytes) = 0;
  virtual void zero(void* dst, size_t bytes) = 0;

  // y[i] = uniform in [0, 1) for element first_index + i of the stream (key, step being run):
  // mgt::rng::fill_uniform's numbers, drawn when the step runs (also on each replay of a recorded
  // step), so a mask keyed by the global sample is the same on every device and layout.
  virtual void uniform(float* y, size_t n, uint64_t key, uint64_t first_index) = 0;
  // Turns uniforms u in [0, 1) into inverted-dropout scales in place: 0 when u < p, else 1/(1-p).
  virtual void dropout_scales(float* u, int64_t n, float p) = 0;

  // The operations of sequence models (a transformer's layers), over rows of tokens.
  //
  // `batch` GEMMs of the same shape whose operands lie `stride_*` floats apart: attention's
  // per-head products. The default runs them one by one; a GPU runs them as one call.
  virtual void gemm_batched(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                            int64_t lda, int64_t stride_a, const float* b, int64_t ldb, int64_t stride_b, float beta,
                            float* c, int64_t ldc, int64_t stride_c, int64_t batch) {
    for (int64_t i = 0; i < batch; ++i)
      gemm(trans_a, trans_b, m, n, k, alpha, a + i * stride_a, lda, b + i * stride_b, ldb, beta, c + i * stride_c, ldc);
  }
  // y[r, :] = table[ids[r], :] + position[r % positions, :] for `rows` rows of `dim` (ids are
  // token ids held as floats, checked against the table by whoever wrote them; position may be
  // null: no position term).
  virtual void embedding_forward(const float* ids, const float* table, const float* position, float* y, int64_t rows,
                                 int64_t positions, int64_t dim) = 0;
  // dtable[ids[r], :] += dy[r, :], the rows added in order r = 0, 1, ... (a fixed order, so the
  // same ids give the same bits on every run and device).
  virtual void embedding_backward(const float* ids, const float* dy, float* dtable, int64_t rows, int64_t dim) = 0;
  // Layer normalisation of each row of `dim`: y = (x - mean) / sqrt(var + eps) * gamma + beta,
  // the biased variance; the statistics summed in a fixed order.
  virtual void layer_norm_forward(const float* x, const float* gamma, const float* beta, float* y, int64_t rows,
                                  int64_t dim, float eps) = 0;
  // Its backward from the forward's input (the statistics are formed again): dx written; dgamma
  // and dbeta the sums over rows, in row order, of dy * x_hat and dy, added to (written when
  // accumulate is false).
  virtual void layer_norm_backward(const float* x, const float* gamma, const float* dy, float* dx, float* dgamma,
                                   float* dbeta, int64_t rows, int64_t dim, float eps, bool accumulate) = 0;
  // y = softmax(scale * x) over each row of `cols`. causal: the rows are blocks of `cols` x `cols`
  // (query by key), and row r keeps only the columns up to its query position r % cols; the
  // others get probability 0. y may be x.
  virtual void softmax_rows(const float* x, float* y, int64_t rows, int64_t cols, float scale, bool causal) = 0;
  // Its backward from the output y: dx = scale * y * (dy - sum over the row of dy * y); dx may be dy.
  virtual void softmax_rows_backward(const float* y, const float* dy, float* dx, int64_t rows, int64_t cols,
                                     float scale) = 0;
  // Attention (AttentionShape) without the [batch, heads, tokens, tokens] probabilities: sample b's
  // token t has its row at q + (b * tokens + t) * ld (k, v likewise) and its output row at
  // out + (b * tokens + t) * ld_out. row_lse [batch, heads, tokens] receives each query's
  // log-sum-exp of its scaled scores over the keys it sees, which is what backward keeps of the
  // softmax. Each sample is computed on its own, in an order fixed by the shape, so a sample gets
  // the same bits in any batch. `workspace` holds attention_workspace(shape) bytes of the
  // executor's memory (planned with the layer: no operation allocates).
  virtual size_t attention_workspace(const AttentionShape& shape) const = 0;
  virtual void attention_forward(const AttentionShape& shape, const float* q, const float* k, const float* v,
                                 float* out, float* row_lse, void* workspace) = 0;
  // Its backward from the forward's inputs, output and row_lse (the probabilities are formed
  // again): dq, dk and dv written, in rows of ld as q, k and v (they may be the columns of one
  // buffer, as q, k and v may).
  virtual void attention_backward(const AttentionShape& shape, const float* q, const float* k, const float* v,
                                  const float* out, const float* dout, const float* row_lse, float* dq, float* dk,
                                  float* dv, void* workspace) = 0;
  // GELU, tanh form (GPT-2's): y = x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))); y may be x.
  virtual void gelu_forward(const float* x, float* y, int64_t n) = 0;
  // dx = dy * GELU'(x); dx may be dy.
  virtual void gelu_backward(const float* x, const float* dy, float* dx, int64_t n) = 0;

  // Plans, made when a layer is planned for a shape; each may hold memory of its own.
  // bf16: bfloat16 operands and result, FP32 accumulation, converted at the op's edges (x, w, dy
  // rounded; y before the FP32 bias, dx and the weight gradient before it is added are bf16
  // values; the bias gradient is summed from the FP32 dy).
  // layout: the channel blocks of x (and dx) and of y (and dy).
  virtual std::unique_ptr<ConvOp> make_conv(const Conv2dShape& shape, int64_t batch, bool bf16 = false,
                                            const ActivationLayout& layout = {}) = 0;
  virtual std::unique_ptr<MaxPoolOp> make_max_pool(int64_t batch, int64_t channels, int64_t height, int64_t width,
                                                   int64_t kernel, int64_t stride,
                                                   const ActivationLayout& layout = {}) = 0;
  // The channel block of the activations this backend's convolutions run fastest on: 16 or 8 on
  // a CPU whose oneDNN kernels are blocked (AVX-512, AVX2), 1 (plain NCHW) elsewhere. The executor
  // keeps convolutional activations in it from layer to layer (LayerHints::blocked_activations).
  virtual int64_t channel_block() const { return 1; }
};

// The CPU's operations on host memory, as the CPU path runs them, for a model plugin that drives
// layers itself on the host and for tests; uniform() draws for step `step` (the step of the latest
// call that named one). One set per thread: plans hold oneDNN state not shared between threads.
MGT_API Ops& host_ops(int64_t step);
MGT_API Ops& host_ops();

}  // namespace mgt
