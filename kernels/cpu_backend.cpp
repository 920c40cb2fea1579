// The CPU backend of the dispatch interface: the kernels of kernels/cpu run at once in host
// memory. Every CPU rank's training step (core/src/device/compiled_step.hpp) runs on it, in place;
// test builds also run the GPU's form of the step on it, which is how that program is tested on
// machines without a GPU.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <vector>

#include "kernels/backend.hpp"
#include "kernels/cpu/attention.hpp"
#include "kernels/cpu/bf16.hpp"
#include "kernels/cpu/cache_lines.hpp"
#include "kernels/cpu/conv2d.hpp"
#include "kernels/cpu/gemm.hpp"
#include "kernels/cpu/pointwise.hpp"
#include "kernels/cpu/pool.hpp"
#include "kernels/cpu/sequence.hpp"
#include "kernels/cpu/softmax.hpp"
#include "kernels/elementwise.hpp"
#include "mgtrain/error.hpp"

namespace mgt::kernels {

namespace {

class CpuConv final : public ConvOp {
 public:
  CpuConv(const Conv2dShape& shape, int64_t batch, int64_t input_block, int64_t output_block)
      : shape_(shape), batch_(batch), conv_(input_block, output_block) {}
  void forward(const float* x, const float* w, const float* bias, float* y) override {
    conv_.forward(shape_, batch_, x, w, bias, y);
  }
  void backward_data(const float* dy, const float* w, float* dx) override {
    conv_.backward_data(shape_, batch_, dy, w, dx);
  }
  void backward_weights(const float* x, const float* dy, float* dw, float* dbias, bool accumulate) override {
    conv_.backward_weights(shape_, batch_, x, dy, dw, dbias, accumulate);
  }

 private:
  Conv2dShape shape_;
  int64_t batch_;
  Conv2d conv_;
};

// A bf16 convolution (Backend::make_conv) emulated in FP32: operands rounded to bf16 (their
// products are exact in FP32), results rounded to bf16 where the GPU's are bf16 tensors. What the
// GPU computes, up to the order of the sums.
class CpuConvBf16 final : public ConvOp {
 public:
  CpuConvBf16(const Conv2dShape& shape, int64_t batch)
      : shape_(shape),
        batch_(batch),
        in_(size(batch * shape.in_channels * shape.height * shape.width)),
        out_(size(batch * shape.out_channels * shape.out_height() * shape.out_width())),
        w_(size(shape.out_channels * shape.in_channels * shape.kernel * shape.kernel)),
        dw_(w_.size()) {}
  void forward(const float* x, const float* w, const float* bias, float* y) override {
    round_to_bf16(x, in_.data(), in_.size());
    round_to_bf16(w, w_.data(), w_.size());
    conv_.forward(shape_, batch_, in_.data(), w_.data(), nullptr, y);
    round_to_bf16(y, y, out_.size());
    if (!bias) return;
    const int64_t plane = shape_.out_height() * shape_.out_width();
    for (int64_t b = 0; b < batch_; ++b)
      for (int64_t c = 0; c < shape_.out_channels; ++c) {
        float* row = y + (b * shape_.out_channels + c) * plane;
        for (int64_t p = 0; p < plane; ++p) row[p] += bias[c];
      }
  }
  void backward_data(const float* dy, const float* w, float* dx) override {
    round_to_bf16(dy, out_.data(), out_.size());
    round_to_bf16(w, w_.data(), w_.size());
    conv_.backward_data(shape_, batch_, out_.data(), w_.data(), dx);
    round_to_bf16(dx, dx, in_.size());
  }
  void backward_weights(const float* x, const float* dy, float* dw, float* dbias, bool accumulate) override {
    round_to_bf16(x, in_.data(), in_.size());
    round_to_bf16(dy, out_.data(), out_.size());
    conv_.backward_weights(shape_, batch_, in_.data(), out_.data(), dw_.data(), nullptr, /*accumulate=*/false);
    for (size_t i = 0; i < dw_.size(); ++i) dw[i] = (accumulate ? dw[i] : 0.0f) + from_bf16(to_bf16(dw_[i]));
    if (!dbias) return;
    const int64_t plane = shape_.out_height() * shape_.out_width();
    for (int64_t c = 0; c < shape_.out_channels; ++c) {
      float sum = 0.0f;
      for (int64_t b = 0; b < batch_; ++b) {
        const float* row = dy + (b * shape_.out_channels + c) * plane;
        for (int64_t p = 0; p < plane; ++p) sum += row[p];
      }
      dbias[c] = (accumulate ? dbias[c] : 0.0f) + sum;
    }
  }

 private:
  static size_t size(int64_t n) { return static_cast<size_t>(n); }
  Conv2dShape shape_;
  int64_t batch_;
  Conv2d conv_;
  std::vector<float> in_, out_, w_, dw_;  // bf16 values of x (or dx), y (or dy), w and the weight gradient
};

class CpuMaxPool final : public MaxPoolOp {
 public:
  // planes: batch * channels; the blocks: x's and y's (Ops::make_max_pool).
  CpuMaxPool(int64_t planes, int64_t h, int64_t w, int64_t kernel, int64_t stride, int64_t input_block,
             int64_t output_block)
      : input_block_(input_block),
        output_block_(output_block),
        block_(std::max(input_block, output_block)),
        planes_(planes),
        h_(h),
        w_(w),
        kernel_(kernel),
        stride_(stride),
        argmax_(static_cast<size_t>(planes * ((h - kernel) / stride + 1) * ((w - kernel) / stride + 1))) {}
  void forward(const float* x, float* y) override {
    if (block_ > 1)
      return max_pool2d_forward_blocked(x, y, argmax_.data(), planes_ / block_, h_, w_, kernel_, stride_, input_block_,
                                        output_block_);
    max_pool2d_forward(x, y, argmax_.data(), planes_, h_, w_, kernel_, stride_);
  }
  void backward(const float*, const float*, const float* dy, float* dx) override {
    if (block_ > 1)
      return max_pool2d_backward_blocked(dy, argmax_.data(), dx, planes_ / block_, h_, w_, kernel_, stride_,
                                         input_block_, output_block_);
    max_pool2d_backward(dy, argmax_.data(), dx, planes_, h_, w_, kernel_, stride_);
  }

 private:
  int64_t input_block_, output_block_, block_, planes_, h_, w_, kernel_, stride_;
  std::vector<int32_t> argmax_;
};

// The plugin's own loop, on host memory.
class CpuUpdate final : public UpdateOp {
 public:
  explicit CpuUpdate(const ElementwiseUpdate& update) : update_(update) {}
  void run(float* params, const float* grads, float* const* state, const void* scalars, size_t n,
           const uint8_t* decayed, const int32_t* skip) override {
    if (skip && *skip) return;
    update_.run(params, grads, state, scalars, n, decayed);
  }

 private:
  const ElementwiseUpdate& update_;
};

// The plugin's loop on parameters other cores read next (a node's shared parameters), a block at a
// time: the lines two blocks ahead are evicted from every cache (cache_lines.hpp), so that the
// stores find no copy on another core to wait for. The plugin's loop on the same memory: the same
// bits as CpuUpdate.
class EvictingCpuUpdate final : public UpdateOp {
 public:
  explicit EvictingCpuUpdate(const ElementwiseUpdate& update) : update_(update) {}
  void run(float* params, const float* grads, float* const* state, const void* scalars, size_t n,
           const uint8_t* decayed, const int32_t* skip) override {
    if (skip && *skip) return;
    // 4 KB blocks, each evicted two blocks ahead of its update: the evictions then have the time
    // of a block's update to complete (the fastest pair measured: docs/benchmarks.md).
    constexpr size_t kBlock = 1024, kAhead = 2;
    float* block_state[kMaxUpdateStates] = {};
    const int states = update_.states();
    evict_lines(params, std::min(kAhead * kBlock, n) * sizeof(float));
    for (size_t at = 0; at < n; at += kBlock) {
      const size_t len = std::min(kBlock, n - at);
      const size_t ahead = at + kAhead * kBlock;
      if (ahead < n) evict_lines(params + ahead, std::min(kBlock, n - ahead) * sizeof(float));
      for (int k = 0; k < states; ++k) block_state[k] = state[k] + at;
      update_.run(params + at, grads + at, block_state, scalars, len, decayed ? decayed + at : nullptr);
    }
  }

 private:
  const ElementwiseUpdate& update_;
};

int64_t activation_channel_block() {
  const char* env = std::getenv("MGTRAIN_CPU_BLOCKED_ACTIVATIONS");
  if (env && std::string(env) == "0") return 1;
  return preferred_channel_block();
}

class CpuBackend final : public Backend {
 public:
  std::string describe() const override { return "cpu"; }

  void* allocate(size_t bytes) override { return aligned(bytes); }
  void release(void* ptr) noexcept override { std::free(ptr); }
  void* allocate_host(size_t bytes) override { return aligned(bytes); }
  void release_host(void* ptr) noexcept override { std::free(ptr); }
  void upload(void* dst, const void* host, size_t bytes) override { copy(dst, host, bytes); }
  void download(void* host, const void* src, size_t bytes) override { copy(host, src, bytes); }
  void copy_from_pinned(void* dst, const void* pinned, size_t bytes) override { copy(dst, pinned, bytes); }
  void copy_to_pinned(void* pinned, const void* src, size_t bytes) override { copy(pinned, src, bytes); }
  void copy(void* dst, const void* src, size_t bytes) override {
    if (bytes != 0 && dst != src) std::memmove(dst, src, bytes);
  }
  void zero(void* dst, size_t bytes) override {
    if (bytes != 0) std::memset(dst, 0, bytes);
  }
  void stage(int, void* dst, const void* pinned, size_t bytes) override { copy(dst, pinned, bytes); }
  void wait_staged(int) override {}
  void after_staged(int) override {}
  void mark_done(int) override {}
  void wait_done(int, double, int64_t, const std::function<void()>&) override {}

  void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
            const float* b, int64_t ldb, float beta, float* c, int64_t ldc) override {
    sgemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  }
  void gemm_bf16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const uint16_t* a,
                 int64_t lda, const uint16_t* b, int64_t ldb, float beta, float* c, int64_t ldc) override {
    kernels::gemm_bf16(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  }
  void to_bf16(const float* x, uint16_t* y, size_t n) override { kernels::to_bf16(x, y, n); }
  void broadcast_rows(const float* bias, float* y, int64_t rows, int64_t cols) override {
    kernels::broadcast_rows(bias, y, rows, cols);
  }
  void add_column_sums(const float* x, float* acc, int64_t rows, int64_t cols) override {
    kernels::add_column_sums(x, acc, rows, cols);
  }
  void relu_forward(const float* x, float* y, int64_t n) override { kernels::relu_forward(x, y, n); }
  void relu_backward(const float* y, const float* dy, float* dx, int64_t n) override {
    kernels::relu_backward(y, dy, dx, n);
  }
  void multiply(const float* x, const float* s, float* y, int64_t n) override { kernels::multiply(x, s, y, n); }
  void unary(UnaryOp op, const float* x, float* y, int64_t n) override { kernels::unary(op, x, y, n); }
  void binary(BinaryOp op, const float* a, const float* b, float* y, int64_t n) override {
    kernels::binary(op, a, b, y, n);
  }
  void affine(const float* x, float* y, int64_t n, float scale, float shift) override {
    kernels::affine(x, y, n, scale, shift);
  }
  void channel_sums(const float* a, const float* b, const float* center, const ChannelTensors& t, float* sum_a,
                    float* sum_ab) override {
    kernels::channel_sums(a, b, center, t.batch, t.channels, t.plane, sum_a, sum_ab, t.block, t.relu_mask);
  }
  void channel_affine(const float* a, const float* scale_a, const float* b, const float* scale_b, const float* shift,
                      float* y, const ChannelTensors& t) override {
    kernels::channel_affine(a, scale_a, b, scale_b, shift, y, t.batch, t.channels, t.plane, t.block, t.relu_mask,
                            t.relu);
  }
  bool channel_ops_fuse_relu() const override { return true; }
  void uniform(float* y, size_t n, uint64_t key, uint64_t first_index) override {
    kernels::philox_fill_uniform(y, n, key, static_cast<uint64_t>(*step_), first_index);
  }
  void dropout_scales(float* u, int64_t n, float p) override { kernels::dropout_scales(u, n, p); }
  void embedding_forward(const float* ids, const float* table, const float* position, float* y, int64_t rows,
                         int64_t positions, int64_t dim) override {
    kernels::embedding_forward(ids, table, position, y, rows, positions, dim);
  }
  void embedding_backward(const float* ids, const float* dy, float* dtable, int64_t rows, int64_t dim) override {
    kernels::embedding_backward(ids, dy, dtable, rows, dim);
  }
  void layer_norm_forward(const float* x, const float* gamma, const float* beta, float* y, int64_t rows, int64_t dim,
                          float eps) override {
    kernels::layer_norm_forward(x, gamma, beta, y, rows, dim, eps);
  }
  void layer_norm_backward(const float* x, const float* gamma, const float* dy, float* dx, float* dgamma, float* dbeta,
                           int64_t rows, int64_t dim, float eps, bool accumulate) override {
    kernels::layer_norm_backward(x, gamma, dy, dx, dgamma, dbeta, rows, dim, eps, accumulate);
  }
  void softmax_rows(const float* x, float* y, int64_t rows, int64_t cols, float scale, bool causal) override {
    kernels::softmax_rows(x, y, rows, cols, scale, causal);
  }
  void softmax_rows_backward(const float* y, const float* dy, float* dx, int64_t rows, int64_t cols,
                             float scale) override {
    kernels::softmax_rows_backward(y, dy, dx, rows, cols, scale);
  }
  size_t attention_workspace(const AttentionShape& shape) const override { return kernels::attention_workspace(shape); }
  void attention_forward(const AttentionShape& shape, const float* q, const float* k, const float* v, float* out,
                         float* row_lse, void* workspace) override {
    kernels::attention_forward(shape, q, k, v, out, row_lse, workspace);
  }
  void attention_backward(const AttentionShape& shape, const float* q, const float* k, const float* v, const float* out,
                          const float* dout, const float* row_lse, float* dq, float* dk, float* dv,
                          void* workspace) override {
    kernels::attention_backward(shape, q, k, v, out, dout, row_lse, dq, dk, dv, workspace);
  }
  void gelu_forward(const float* x, float* y, int64_t n) override { kernels::gelu_forward(x, y, n); }
  void gelu_backward(const float* x, const float* dy, float* dx, int64_t n) override {
    kernels::gelu_backward(x, dy, dx, n);
  }
  void read_step_from(const int64_t* step) override { step_ = step ? step : &no_step_; }
  bool gemm_rows_independent(int64_t shard_rows, int64_t shards, int64_t n, int64_t k) const override {
    return sgemm_rows_independent(shard_rows, shards, n, k);
  }
  std::unique_ptr<ConvOp> make_conv(const Conv2dShape& shape, int64_t batch, bool bf16,
                                    const ActivationLayout& layout) override {
    const int64_t input_block = layout.input_block, output_block = layout.output_block;
    if (bf16) {
      MGT_CHECK(input_block == 1 && output_block == 1, Error, "a bf16 convolution takes NCHW activations only");
      return std::make_unique<CpuConvBf16>(shape, batch);
    }
    return std::make_unique<CpuConv>(shape, batch, input_block, output_block);
  }
  std::unique_ptr<MaxPoolOp> make_max_pool(int64_t batch, int64_t channels, int64_t height, int64_t width,
                                           int64_t kernel, int64_t stride, const ActivationLayout& layout) override {
    const int64_t input_block = layout.input_block, output_block = layout.output_block;
    const int64_t block = std::max(input_block, output_block);
    MGT_CHECK(channels % block == 0 && (input_block == 1 || input_block == block) &&
                  (output_block == 1 || output_block == block),
              Error,
              "max_pool2d: channel blocks " + std::to_string(input_block) + " to " + std::to_string(output_block) +
                  " over " + std::to_string(channels) + " channels");
    return std::make_unique<CpuMaxPool>(batch * channels, height, width, kernel, stride, input_block, output_block);
  }
  // What oneDNN's convolutions want on this CPU, unless MGTRAIN_CPU_BLOCKED_ACTIVATIONS=0 keeps
  // every activation NCHW (to compare the two).
  int64_t channel_block() const override { return channel_block_; }
  void softmax_xent(const float* logits, const int32_t* labels, float* grad, double*, int64_t rows, int64_t classes,
                    float grad_scale, float label_smoothing, double* loss_sum, int64_t* correct) override {
    *loss_sum += softmax_cross_entropy(logits, labels, grad, rows, classes, grad_scale, label_smoothing);
    *correct += count_correct(logits, labels, rows, classes);
  }
  void flag_nonfinite(const float* x, size_t n, int32_t* flag) override {
    if (!all_finite(x, n)) *flag = 1;
  }
  void clip_global_norm(float* x, size_t n, float max_norm, double* norm) override {
    kernels::clip_global_norm(x, n, max_norm, norm);
  }

  std::unique_ptr<UpdateOp> make_update(const ElementwiseUpdate& update, bool shared) override {
    if (shared) return std::make_unique<EvictingCpuUpdate>(update);
    return std::make_unique<CpuUpdate>(update);
  }

 private:
  const int64_t no_step_ = 0;
  const int64_t* step_ = &no_step_;
  const int64_t channel_block_ = activation_channel_block();
  static void* aligned(size_t bytes) {
    if (bytes == 0) return nullptr;
    void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (!p) throw std::bad_alloc();
    return p;
  }
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend() { return std::make_unique<CpuBackend>(); }

}  // namespace mgt::kernels
