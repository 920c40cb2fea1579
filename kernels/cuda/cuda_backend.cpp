#include "kernels/cuda/cuda_backend.hpp"

#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <thread>

#include "kernels/cuda/check.hpp"
#include "kernels/cuda/cudnn_ops.hpp"
#include "kernels/cuda/device_buffer.hpp"
#include "kernels/cuda/element_update.hpp"
#include "kernels/cuda/elementwise.hpp"
#include "kernels/cuda/gemm.hpp"
#include "kernels/cuda/layer_ops.hpp"
#include "kernels/cuda/pointwise.hpp"
#include "kernels/cuda/sequence_ops.hpp"
#include "kernels/elementwise.hpp"
#include "mgtrain/error.hpp"

namespace mgt::cuda {

namespace {

// cuBLAS gets a fixed workspace, so that no call allocates while a step is being recorded.
constexpr size_t kBlasWorkspaceBytes = 32u << 20;

class CudaConv final : public kernels::ConvOp {
 public:
  CudaConv(CudnnHandle& cudnn, const kernels::Conv2dShape& shape, int64_t batch) : plan_(cudnn, shape, batch) {}
  void forward(const float* x, const float* w, const float* bias, float* y) override { plan_.forward(x, w, bias, y); }
  void backward_data(const float* dy, const float* w, float* dx) override { plan_.backward_data(dy, w, dx); }
  void backward_weights(const float* x, const float* dy, float* dw, float* dbias, bool accumulate) override {
    plan_.backward_weights(x, dy, dw, dbias, accumulate);
  }

 private:
  ConvPlan plan_;
};

// A bf16 convolution (Backend::make_conv): FP32 tensors converted at its edges to the bf16 tensors
// of a bf16 plan, into buffers of its own. x is converted again for the weight gradient, so each
// call stands alone. Where cuDNN offers no deterministic bf16 algorithm for the shape, the layer
// computes what the CPU backend's emulation computes instead: the FP32 convolution (no tensor
// cores) of the operands rounded to bf16, its results rounded to bf16. Same values up to the order
// of the sums, without the speed; a warning says so.
class CudaConvBf16 final : public kernels::ConvOp {
 public:
  CudaConvBf16(CudnnHandle& cudnn, const kernels::Conv2dShape& s, int64_t batch)
      : stream_(cudnn.stream()),
        batch_(batch),
        channels_(s.out_channels),
        plane_(s.out_height() * s.out_width()),
        n_in_(static_cast<size_t>(batch * s.in_channels * s.height * s.width)),
        n_out_(static_cast<size_t>(batch * channels_ * plane_)),
        n_w_(static_cast<size_t>(s.out_channels * s.in_channels * s.kernel * s.kernel)) {
    try {
      plan_ = std::make_unique<ConvPlan>(cudnn, s, batch, /*bf16=*/true);
      // cuDNN may still refuse a chosen algorithm when it is called (CUDNN_STATUS_NOT_SUPPORTED for
      // some bf16 shapes): each direction runs once here, on this layer's own buffers (the results
      // are not used), so that a refusal falls back now rather than ending the first step.
      plan_->forward_bf16(in_.data(), w_.data(), out_.data());
      plan_->backward_data_bf16(out_.data(), w_.data(), in_.data());
      plan_->backward_filter_bf16(in_.data(), out_.data(), dw_.data());
      synchronize(stream_);
    } catch (const OutOfMemoryError&) {
      throw;
    } catch (const CudaError& e) {
      std::fprintf(stderr, "mgtrain: warning: %s; this layer computes in FP32 on bf16-rounded operands instead\n",
                   e.what());
      plan_.reset();
      fallback_ = std::make_unique<ConvPlan>(cudnn, s, batch, /*bf16=*/false);
      in32_ = DeviceBuffer<float>(n_in_);
      out32_ = DeviceBuffer<float>(n_out_);
      w32_ = DeviceBuffer<float>(n_w_);
      dw32_ = DeviceBuffer<float>(n_w_);
    }
  }
  void forward(const float* x, const float* w, const float* bias, float* y) override {
    if (fallback_) {
      round_to_bf16(x, in32_.data(), n_in_, stream_);
      round_to_bf16(w, w32_.data(), n_w_, stream_);
      fallback_->forward(in32_.data(), w32_.data(), nullptr, y);
      to_bf16(y, out_.data(), n_out_, stream_);
      from_bf16_add_channel_bias(out_.data(), bias, y, batch_, channels_, plane_, stream_);
      return;
    }
    to_bf16(x, in_.data(), n_in_, stream_);
    to_bf16(w, w_.data(), n_w_, stream_);
    plan_->forward_bf16(in_.data(), w_.data(), out_.data());
    from_bf16_add_channel_bias(out_.data(), bias, y, batch_, channels_, plane_, stream_);
  }
  void backward_data(const float* dy, const float* w, float* dx) override {
    if (fallback_) {
      round_to_bf16(dy, out32_.data(), n_out_, stream_);
      round_to_bf16(w, w32_.data(), n_w_, stream_);
      fallback_->backward_data(out32_.data(), w32_.data(), dx);
      round_to_bf16(dx, dx, n_in_, stream_);
      return;
    }
    to_bf16(dy, out_.data(), n_out_, stream_);
    to_bf16(w, w_.data(), n_w_, stream_);
    plan_->backward_data_bf16(out_.data(), w_.data(), in_.data());  // dx in bf16
    from_bf16(in_.data(), dx, n_in_, /*accumulate=*/false, stream_);
  }
  void backward_weights(const float* x, const float* dy, float* dw, float* dbias, bool accumulate) override {
    if (fallback_) {
      round_to_bf16(x, in32_.data(), n_in_, stream_);
      round_to_bf16(dy, out32_.data(), n_out_, stream_);
      fallback_->backward_weights(in32_.data(), out32_.data(), dw32_.data(), nullptr, /*accumulate=*/false);
      to_bf16(dw32_.data(), dw_.data(), n_w_, stream_);
    } else {
      to_bf16(x, in_.data(), n_in_, stream_);
      to_bf16(dy, out_.data(), n_out_, stream_);
      plan_->backward_filter_bf16(in_.data(), out_.data(), dw_.data());
    }
    from_bf16(dw_.data(), dw, n_w_, accumulate, stream_);
    if (dbias) channel_sums(dy, dbias, batch_, channels_, plane_, accumulate, stream_);
  }

 private:
  Stream stream_;
  int64_t batch_, channels_, plane_;
  size_t n_in_, n_out_, n_w_;
  std::unique_ptr<ConvPlan> plan_, fallback_;  // exactly one of them
  // bf16: x (or dx), y (or dy), w, the weight gradient; the fallback uses y and the gradient.
  DeviceBuffer<uint16_t> in_ = DeviceBuffer<uint16_t>(n_in_), out_ = DeviceBuffer<uint16_t>(n_out_),
                         w_ = DeviceBuffer<uint16_t>(n_w_), dw_ = DeviceBuffer<uint16_t>(n_w_);
  DeviceBuffer<float> in32_, out32_, w32_, dw32_;  // the fallback's rounded operands, FP32
};

class CudaMaxPool final : public kernels::MaxPoolOp {
 public:
  CudaMaxPool(CudnnHandle& cudnn, int64_t batch, int64_t channels, int64_t height, int64_t width, int64_t kernel,
              int64_t stride)
      : plan_(cudnn, batch, channels, height, width, kernel, stride) {}
  void forward(const float* x, float* y) override { plan_.forward(x, y); }
  void backward(const float* x, const float* y, const float* dy, float* dx) override { plan_.backward(x, y, dy, dx); }

 private:
  MaxPoolPlan plan_;
};

class Graph final : public kernels::RecordedStep {
 public:
  Graph(cudaGraphExec_t exec, cudaStream_t stream) : exec_(exec), stream_(stream) {}
  ~Graph() override { cudaGraphExecDestroy(exec_); }
  void replay() override { MGT_CUDA_CHECK(cudaGraphLaunch(exec_, stream_)); }

 private:
  cudaGraphExec_t exec_;
  cudaStream_t stream_;
};

// The optimizer's element update, compiled for this GPU from the plugin's source.
class CudaUpdate final : public kernels::UpdateOp {
 public:
  CudaUpdate(const ElementwiseUpdate& update, int device, cudaStream_t stream)
      : kernel_(update, device), stream_(stream) {}
  void run(float* params, const float* grads, float* const* state, const void* scalars, size_t n,
           const uint8_t* decayed, const int32_t* skip) override {
    kernel_.run(params, grads, state, scalars, n, decayed, skip, stream_);
  }

 private:
  ElementUpdateKernel kernel_;
  cudaStream_t stream_;
};

class CudaBackend final : public kernels::Backend {
 public:
  explicit CudaBackend(int device) : device_(device) {
    set_device(device);
    name_ = "GPU " + std::to_string(device) + " (" + device_properties(device).name + ")";
    MGT_CUDA_CHECK(cudaStreamCreateWithFlags(&compute_, cudaStreamNonBlocking));
    MGT_CUDA_CHECK(cudaStreamCreateWithFlags(&copy_, cudaStreamNonBlocking));
    for (int slot = 0; slot < 2; ++slot) {
      MGT_CUDA_CHECK(cudaEventCreateWithFlags(&staged_[slot], cudaEventDisableTiming));
      MGT_CUDA_CHECK(cudaEventCreateWithFlags(&done_[slot], cudaEventDisableTiming));
    }
    blas_ = std::make_unique<BlasHandle>();
    blas_->set_stream(compute_);
    blas_workspace_ = device_malloc(kBlasWorkspaceBytes);
    MGT_CUBLAS_CHECK(cublasSetWorkspace(blas_->get(), blas_workspace_, kBlasWorkspaceBytes));
    cudnn_ = std::make_unique<CudnnHandle>();
    cudnn_->set_stream(compute_);
  }

  ~CudaBackend() override {
    cudaStreamSynchronize(compute_);
    cudaStreamSynchronize(copy_);
    cudnn_.reset();
    blas_.reset();
    device_free(blas_workspace_);
    for (int slot = 0; slot < 2; ++slot) {
      cudaEventDestroy(staged_[slot]);
      cudaEventDestroy(done_[slot]);
    }
    cudaStreamDestroy(copy_);
    cudaStreamDestroy(compute_);
  }

  std::string describe() const override { return name_; }
  cudaStream_t compute() const { return compute_; }

  void* allocate(size_t bytes) override { return device_malloc(bytes); }
  void release(void* ptr) noexcept override { device_free(ptr); }
  void* allocate_host(size_t bytes) override {
    if (bytes == 0) return nullptr;
    void* ptr = nullptr;
    MGT_CUDA_CHECK(cudaMallocHost(&ptr, bytes));
    return ptr;
  }
  void release_host(void* ptr) noexcept override {
    if (ptr) cudaFreeHost(ptr);
  }
  void upload(void* dst, const void* host, size_t bytes) override {
    if (bytes == 0) return;
    MGT_CUDA_CHECK(cudaMemcpyAsync(dst, host, bytes, cudaMemcpyHostToDevice, compute_));
    MGT_CUDA_CHECK(cudaStreamSynchronize(compute_));
  }
  void download(void* host, const void* src, size_t bytes) override {
    if (bytes == 0) return;
    MGT_CUDA_CHECK(cudaMemcpyAsync(host, src, bytes, cudaMemcpyDeviceToHost, compute_));
    MGT_CUDA_CHECK(cudaStreamSynchronize(compute_));
  }
  void copy_from_pinned(void* dst, const void* pinned, size_t bytes) override {
    if (bytes) MGT_CUDA_CHECK(cudaMemcpyAsync(dst, pinned, bytes, cudaMemcpyHostToDevice, compute_));
  }
  void copy_to_pinned(void* pinned, const void* src, size_t bytes) override {
    if (bytes) MGT_CUDA_CHECK(cudaMemcpyAsync(pinned, src, bytes, cudaMemcpyDeviceToHost, compute_));
  }
  void copy(void* dst, const void* src, size_t bytes) override {
    if (bytes && dst != src) MGT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, compute_));
  }
  void zero(void* dst, size_t bytes) override {
    if (bytes) MGT_CUDA_CHECK(cudaMemsetAsync(dst, 0, bytes, compute_));
  }

  void stage(int slot, void* dst, const void* host, size_t bytes) override {
    if (bytes) MGT_CUDA_CHECK(cudaMemcpyAsync(dst, host, bytes, cudaMemcpyHostToDevice, copy_));
    MGT_CUDA_CHECK(cudaEventRecord(staged_[slot], copy_));
  }
  void wait_staged(int slot) override { MGT_CUDA_CHECK(cudaEventSynchronize(staged_[slot])); }
  void after_staged(int slot) override { MGT_CUDA_CHECK(cudaStreamWaitEvent(compute_, staged_[slot], 0)); }
  void mark_done(int slot) override { MGT_CUDA_CHECK(cudaEventRecord(done_[slot], compute_)); }
  // Polls rather than blocks: a peer that died leaves NCCL waiting forever, and the deadline turns
  // that into an error naming the step.
  void wait_done(int slot, double timeout_s, int64_t step, const std::function<void()>& check_peers) override {
    const auto start = std::chrono::steady_clock::now();
    double checked = 0.0;
    for (;;) {
      const cudaError_t status = cudaEventQuery(done_[slot]);
      if (status == cudaSuccess) return;
      if (status != cudaErrorNotReady) MGT_CUDA_CHECK(status);
      cudaGetLastError();  // "not ready" is no error: leave nothing for the next launch check
      const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (check_peers && waited - checked >= 0.001) {
        checked = waited;
        check_peers();
      }
      if (waited > timeout_s) {
        char text[160];
        std::snprintf(text, sizeof text, " did not finish within %.0f s (comm.timeout_s): a rank is stuck or gone",
                      timeout_s);
        throw CommError("step " + std::to_string(step) + " on " + name_ + text);
      }
      // A step of a small model takes about 100 us on the GPU, and with one step in flight the
      // next is launched only once this returns: sleeping here, even for 5 us, costs the timer
      // slack (about 50 us) of GPU time per step. So spin for the first milliseconds, as
      // cudaEventSynchronize does.
      if (waited < 0.005)
        std::this_thread::yield();
      else
        std::this_thread::sleep_for(std::chrono::microseconds(waited < 1.0 ? 50 : 1000));
    }
  }

  void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
            const float* b, int64_t ldb, float beta, float* c, int64_t ldc) override {
    sgemm(*blas_, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  }
  void gemm_bf16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const uint16_t* a,
                 int64_t lda, const uint16_t* b, int64_t ldb, float beta, float* c, int64_t ldc) override {
    cuda::gemm_bf16(*blas_, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  }
  void to_bf16(const float* x, uint16_t* y, size_t n) override { cuda::to_bf16(x, y, n, compute_); }
  void gemm_batched(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                    int64_t lda, int64_t stride_a, const float* b, int64_t ldb, int64_t stride_b, float beta, float* c,
                    int64_t ldc, int64_t stride_c, int64_t batch) override {
    sgemm_strided_batched(*blas_, trans_a, trans_b, m, n, k, alpha, a, lda, stride_a, b, ldb, stride_b, beta, c, ldc,
                          stride_c, batch);
  }
  void embedding_forward(const float* ids, const float* table, const float* position, float* y, int64_t rows,
                         int64_t positions, int64_t dim) override {
    cuda::embedding_forward(ids, table, position, y, rows, positions, dim, compute_);
  }
  void embedding_backward(const float* ids, const float* dy, float* dtable, int64_t rows, int64_t dim) override {
    cuda::embedding_backward(ids, dy, dtable, rows, dim, compute_);
  }
  void layer_norm_forward(const float* x, const float* gamma, const float* beta, float* y, int64_t rows, int64_t dim,
                          float eps) override {
    cuda::layer_norm_forward(x, gamma, beta, y, rows, dim, eps, compute_);
  }
  void layer_norm_backward(const float* x, const float* gamma, const float* dy, float* dx, float* dgamma, float* dbeta,
                           int64_t rows, int64_t dim, float eps, bool accumulate) override {
    cuda::layer_norm_backward(x, gamma, dy, dx, dgamma, dbeta, rows, dim, eps, accumulate, compute_);
  }
  void softmax_rows(const float* x, float* y, int64_t rows, int64_t cols, float scale, bool causal) override {
    cuda::softmax_rows(x, y, rows, cols, scale, causal, compute_);
  }
  void softmax_rows_backward(const float* y, const float* dy, float* dx, int64_t rows, int64_t cols,
                             float scale) override {
    cuda::softmax_rows_backward(y, dy, dx, rows, cols, scale, compute_);
  }
  // Attention per sample: the scores of its heads by cuBLAS into the workspace, the row kernels,
  // then the products with V (and in backward the gradients' products) by cuBLAS again. The
  // workspace holds one sample's [heads, tokens, tokens] scores and, for backward, their gradients.
  size_t attention_workspace(const AttentionShape& s) const override {
    return 2 * static_cast<size_t>(s.heads * s.tokens * s.tokens) * sizeof(float);
  }
  void attention_forward(const AttentionShape& s, const float* q, const float* k, const float* v, float* out,
                         float* row_lse, void* workspace) override {
    const int64_t t = s.tokens, hd = s.head_dim, square = t * t;
    auto* scores = static_cast<float*>(workspace);
    for (int64_t b = 0; b < s.batch; ++b) {
      const int64_t in = b * t * s.ld;
      sgemm_strided_batched(*blas_, false, true, t, t, hd, 1.0f, q + in, s.ld, hd, k + in, s.ld, hd, 0.0f, scores, t,
                            square, s.heads);
      cuda::attention_softmax(scores, scores, row_lse + b * s.heads * t, s.heads * t, t, s.scale, s.causal, compute_);
      sgemm_strided_batched(*blas_, false, false, t, hd, t, 1.0f, scores, t, square, v + in, s.ld, hd, 0.0f,
                            out + b * t * s.ld_out, s.ld_out, hd, s.heads);
    }
  }
  void attention_backward(const AttentionShape& s, const float* q, const float* k, const float* v, const float* out,
                          const float* dout, const float* row_lse, float* dq, float* dk, float* dv,
                          void* workspace) override {
    const int64_t t = s.tokens, hd = s.head_dim, square = t * t;
    auto* probs = static_cast<float*>(workspace);
    float* dscores = probs + s.heads * square;
    for (int64_t b = 0; b < s.batch; ++b) {
      const int64_t in = b * t * s.ld, o = b * t * s.ld_out;
      sgemm_strided_batched(*blas_, false, true, t, t, hd, 1.0f, q + in, s.ld, hd, k + in, s.ld, hd, 0.0f, probs, t,
                            square, s.heads);
      cuda::attention_probabilities(probs, row_lse + b * s.heads * t, s.heads * t, t, s.scale, s.causal, compute_);
      // dV = P^T dO; dP = dO V^T, then dS; dQ = dS K; dK = dS^T Q.
      sgemm_strided_batched(*blas_, true, false, t, hd, t, 1.0f, probs, t, square, dout + o, s.ld_out, hd, 0.0f,
                            dv + in, s.ld, hd, s.heads);
      sgemm_strided_batched(*blas_, false, true, t, t, hd, 1.0f, dout + o, s.ld_out, hd, v + in, s.ld, hd, 0.0f,
                            dscores, t, square, s.heads);
      cuda::attention_score_gradients(probs, dscores, out + o, dout + o, s.ld_out, hd, s.heads * t, t, s.scale,
                                      compute_);
      sgemm_strided_batched(*blas_, false, false, t, hd, t, 1.0f, dscores, t, square, k + in, s.ld, hd, 0.0f, dq + in,
                            s.ld, hd, s.heads);
      sgemm_strided_batched(*blas_, true, false, t, hd, t, 1.0f, dscores, t, square, q + in, s.ld, hd, 0.0f, dk + in,
                            s.ld, hd, s.heads);
    }
  }
  void gelu_forward(const float* x, float* y, int64_t n) override { cuda::gelu_forward(x, y, n, compute_); }
  void gelu_backward(const float* x, const float* dy, float* dx, int64_t n) override {
    cuda::gelu_backward(x, dy, dx, n, compute_);
  }

  void broadcast_rows(const float* bias, float* y, int64_t rows, int64_t cols) override {
    cuda::broadcast_rows(bias, y, rows, cols, compute_);
  }
  void add_column_sums(const float* x, float* acc, int64_t rows, int64_t cols) override {
    column_sums(x, acc, rows, cols, /*accumulate=*/true, compute_);
  }
  void relu_forward(const float* x, float* y, int64_t n) override { cuda::relu_forward(x, y, n, compute_); }
  void relu_backward(const float* y, const float* dy, float* dx, int64_t n) override {
    cuda::relu_backward(y, dy, dx, n, compute_);
  }
  void multiply(const float* x, const float* s, float* y, int64_t n) override { cuda::multiply(x, s, y, n, compute_); }
  void unary(UnaryOp op, const float* x, float* y, int64_t n) override { cuda::unary(op, x, y, n, compute_); }
  void binary(BinaryOp op, const float* a, const float* b, float* y, int64_t n) override {
    cuda::binary(op, a, b, y, n, compute_);
  }
  // The GPU's activations are NCHW (channel_block() is 1): a block of 1 is all it is asked for.
  void channel_sums(const float* a, const float* b, const float* center, const ChannelTensors& t, float* sum_a,
                    float* sum_ab) override {
    nchw_only(t.block, "channel_sums");
    unfused(t.relu_mask == nullptr, "channel_sums");
    cuda::channel_sum_products(a, b, center, t.batch, t.channels, t.plane, sum_a, sum_ab, compute_);
  }
  void channel_affine(const float* a, const float* scale_a, const float* b, const float* scale_b, const float* shift,
                      float* y, const ChannelTensors& t) override {
    nchw_only(t.block, "channel_affine");
    unfused(t.relu_mask == nullptr && !t.relu, "channel_affine");
    cuda::channel_affine(a, scale_a, b, scale_b, shift, y, t.batch, t.channels, t.plane, compute_);
  }
  void affine(const float* x, float* y, int64_t n, float scale, float shift) override {
    cuda::affine(x, y, n, scale, shift, compute_);
  }
  void uniform(float* y, size_t n, uint64_t key, uint64_t first_index) override {
    MGT_CHECK(step_ != nullptr, Error, "CUDA backend: uniform() before read_step_from()");
    cuda::uniform(y, static_cast<int64_t>(n), key, step_, first_index, compute_);
  }
  void dropout_scales(float* u, int64_t n, float p) override { cuda::dropout_scales(u, n, p, compute_); }
  void read_step_from(const int64_t* step) override { step_ = step; }
  // No ReLU fused into the per-channel operations here (channel_ops_fuse_relu() is false).
  static void unfused(bool plain, const char* op) {
    MGT_CHECK(plain, Error, std::string("CUDA backend: ") + op + " with a fused ReLU, which this backend does not run");
  }
  static void nchw_only(int64_t block, const char* op) {
    MGT_CHECK(block == 1, Error,
              std::string("CUDA backend: ") + op + " on activations in a channel block of " + std::to_string(block) +
                  "; this backend's are NCHW");
  }
  std::unique_ptr<kernels::ConvOp> make_conv(const kernels::Conv2dShape& shape, int64_t batch, bool bf16,
                                             const ActivationLayout& layout) override {
    nchw_only(layout.input_block * layout.output_block, "make_conv");
    if (bf16) return std::make_unique<CudaConvBf16>(*cudnn_, shape, batch);
    return std::make_unique<CudaConv>(*cudnn_, shape, batch);
  }
  std::unique_ptr<kernels::MaxPoolOp> make_max_pool(int64_t batch, int64_t channels, int64_t height, int64_t width,
                                                    int64_t kernel, int64_t stride,
                                                    const ActivationLayout& layout) override {
    nchw_only(layout.input_block * layout.output_block, "make_max_pool");
    return std::make_unique<CudaMaxPool>(*cudnn_, batch, channels, height, width, kernel, stride);
  }
  void softmax_xent(const float* logits, const int32_t* labels, float* grad, double* row_loss, int64_t rows,
                    int64_t classes, float grad_scale, float label_smoothing, double* loss_sum,
                    int64_t* correct) override {
    softmax_xent_accumulate(logits, labels, grad, row_loss, rows, classes, grad_scale, loss_sum, correct, compute_,
                            label_smoothing);
  }
  void flag_nonfinite(const float* x, size_t n, int32_t* flag) override { cuda::flag_nonfinite(x, n, flag, compute_); }
  void clip_global_norm(float* x, size_t n, float max_norm, double* norm) override {
    // The chunks' partial sums: sized by the first (eager, unrecorded) step, the gradient's size
    // staying the same after it; freeing a smaller one waits for the device.
    const size_t chunks = (n + kernels::kNormChunk - 1) / kernels::kNormChunk;
    if (norm_partials_.size() < chunks) norm_partials_ = DeviceBuffer<double>(chunks);
    cuda::clip_global_norm(x, n, max_norm, norm, norm_partials_.data(), compute_);
  }
  std::unique_ptr<kernels::UpdateOp> make_update(const ElementwiseUpdate& update, bool) override {
    return std::make_unique<CudaUpdate>(update, device_, compute_);
  }

  bool can_record() const override { return true; }
  void begin_recording() override {
    MGT_CUDA_CHECK(cudaStreamBeginCapture(compute_, cudaStreamCaptureModeThreadLocal));
  }
  // Every call recorded was checked as it was made; what a failed one left behind (the capture
  // invalidated, the runtime's last error) is cleared here, so that the step can still run
  // without a graph: the first launch check after a failed recording must not see it.
  std::unique_ptr<kernels::RecordedStep> end_recording() override {
    cudaGraph_t graph = nullptr;
    const cudaError_t ended = cudaStreamEndCapture(compute_, &graph);
    cudaGetLastError();
    if (ended != cudaSuccess || !graph) {
      if (graph) cudaGraphDestroy(graph);
      const cudaError_t why = ended != cudaSuccess ? ended : cudaErrorStreamCaptureInvalidated;
      detail::raise_error("CUDA", "cudaStreamEndCapture", __FILE__, __LINE__, cudaGetErrorName(why),
                          cudaGetErrorString(why));
    }
    cudaGraphExec_t exec = nullptr;
    const cudaError_t status = cudaGraphInstantiate(&exec, graph, 0);
    cudaGraphDestroy(graph);
    cudaGetLastError();
    MGT_CUDA_CHECK(status);
    return std::make_unique<Graph>(exec, compute_);
  }

 private:
  int device_;
  std::string name_;
  cudaStream_t compute_ = nullptr, copy_ = nullptr;
  cudaEvent_t staged_[2] = {}, done_[2] = {};
  std::unique_ptr<BlasHandle> blas_;
  void* blas_workspace_ = nullptr;
  std::unique_ptr<CudnnHandle> cudnn_;
  const int64_t* step_ = nullptr;       // device memory: the step uniform() draws for
  DeviceBuffer<double> norm_partials_;  // clip_global_norm's scratch
};

}  // namespace

std::unique_ptr<kernels::Backend> make_cuda_backend(int device) { return std::make_unique<CudaBackend>(device); }

Stream compute_stream(kernels::Backend& backend) {
  auto* cuda = dynamic_cast<CudaBackend*>(&backend);
  MGT_CHECK(cuda != nullptr, Error, "compute_stream: not a CUDA backend");
  return cuda->compute();
}

}  // namespace mgt::cuda
