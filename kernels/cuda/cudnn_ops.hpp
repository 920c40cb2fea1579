#pragma once
// Convolution and max pooling on the GPU through cuDNN, NCHW float32, with the semantics of
// kernels/cpu/conv2d.hpp and pool.hpp. A plan is made once per layer and batch size (descriptors,
// algorithms, workspace); running it allocates nothing and only enqueues work on the handle's
// stream, so a CUDA graph can capture it. Algorithms are deterministic and compute in plain FP32
// (bf16 plans: bfloat16 tensors, FP32 accumulation on tensor cores).
#include <cstddef>
#include <cstdint>
#include <string>

#include "kernels/cpu/conv2d.hpp"
#include "kernels/cuda/runtime.hpp"

struct cudnnContext;
struct cudnnTensorStruct;
struct cudnnFilterStruct;
struct cudnnConvolutionStruct;
struct cudnnPoolingStruct;

namespace mgt::cuda {

// A cuDNN handle on the device current at construction, bound to a stream that every plan made
// with it runs on.
class CudnnHandle {
 public:
  CudnnHandle();
  ~CudnnHandle();
  CudnnHandle(const CudnnHandle&) = delete;
  CudnnHandle& operator=(const CudnnHandle&) = delete;

  void set_stream(Stream stream);
  Stream stream() const { return stream_; }
  cudnnContext* get() const { return handle_; }

 private:
  cudnnContext* handle_ = nullptr;
  Stream stream_ = nullptr;
};

// One convolution's descriptors, algorithms and workspace for a fixed batch size (square kernel,
// symmetric padding, stride). Each direction takes the fastest algorithm cuDNN's heuristics rank
// that is deterministic, runs without TF32 and needs at most 64 MiB of workspace: the choice
// depends only on the shape, the GPU model and the cuDNN version, never on timings, so every run
// uses the same kernels and repeats bit for bit. A bf16 plan takes bfloat16 tensors and may use
// tensor cores (FP32 accumulation).
class ConvPlan {
 public:
  // bf16: x, w and y are bfloat16 tensors, accumulated in FP32 on tensor cores (the *_bf16
  // calls); otherwise float32 without tensor cores (the others).
  ConvPlan(CudnnHandle& cudnn, const kernels::Conv2dShape& shape, int64_t batch, bool bf16 = false);
  ~ConvPlan();
  ConvPlan(const ConvPlan&) = delete;
  ConvPlan& operator=(const ConvPlan&) = delete;

  // y[B, OC, OH, OW] = conv(x[B, IC, H, W], w[OC, IC, K, K]) + bias[OC] (bias may be null).
  void forward(const float* x, const float* w, const float* bias, float* y);
  // dx = conv^T(dy, w), overwriting dx.
  void backward_data(const float* dy, const float* w, float* dx);
  // dw (+)= dW(x, dy), dbias (+)= sum of dy over batch and space (dbias may be null);
  // accumulate = false overwrites them.
  void backward_weights(const float* x, const float* dy, float* dw, float* dbias, bool accumulate);

  // A bf16 plan's directions over bfloat16 tensors (bits as uint16_t), each output overwritten;
  // no bias (the caller adds it, and sums its gradient, in FP32).
  void forward_bf16(const uint16_t* x, const uint16_t* w, uint16_t* y);
  void backward_data_bf16(const uint16_t* dy, const uint16_t* w, uint16_t* dx);
  void backward_filter_bf16(const uint16_t* x, const uint16_t* dy, uint16_t* dw);

  size_t workspace_bytes() const { return workspace_bytes_; }
  // "forward 1, backward-data 1, backward-filter 1": cuDNN's algorithm numbers, for test logs.
  std::string algorithms() const;
  const kernels::Conv2dShape& shape() const { return shape_; }
  int64_t batch() const { return batch_; }

 private:
  void release() noexcept;
  void run_forward(const void* x, const void* w, void* y);
  void run_backward_data(const void* dy, const void* w, void* dx);
  void run_backward_filter(const void* x, const void* dy, void* dw, float beta);

  CudnnHandle* cudnn_;
  kernels::Conv2dShape shape_;
  int64_t batch_;
  bool bf16_;
  cudnnTensorStruct* x_desc_ = nullptr;
  cudnnTensorStruct* y_desc_ = nullptr;
  cudnnTensorStruct* bias_desc_ = nullptr;
  cudnnFilterStruct* w_desc_ = nullptr;
  cudnnConvolutionStruct* conv_desc_ = nullptr;
  // cuDNN's algorithm enums, kept as int so this header needs no cuDNN header.
  int fwd_algo_ = 0, bwd_data_algo_ = 0, bwd_filter_algo_ = 0;
  int fwd_math_ = 0, bwd_data_math_ = 0, bwd_filter_math_ = 0;  // cudnnMathType_t of each choice
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
};

// Max pooling without padding through cuDNN's deterministic max-pooling mode (plain
// CUDNN_POOLING_MAX adds gradients with atomics in its backward pass). NaN propagates, so a
// non-finite activation reaches the loss and the step's check instead of vanishing.
class MaxPoolPlan {
 public:
  MaxPoolPlan(CudnnHandle& cudnn, int64_t batch, int64_t channels, int64_t height, int64_t width, int64_t kernel,
              int64_t stride);
  ~MaxPoolPlan();
  MaxPoolPlan(const MaxPoolPlan&) = delete;
  MaxPoolPlan& operator=(const MaxPoolPlan&) = delete;

  // y[B, C, OH, OW], OH = (H - K) / S + 1 and likewise OW.
  void forward(const float* x, float* y);
  // dx from x, y and dy, overwriting dx (overlapping windows add their gradients).
  void backward(const float* x, const float* y, const float* dy, float* dx);

  int64_t out_height() const { return out_height_; }
  int64_t out_width() const { return out_width_; }

 private:
  void release() noexcept;

  CudnnHandle* cudnn_;
  int64_t out_height_ = 0, out_width_ = 0;
  cudnnTensorStruct* x_desc_ = nullptr;
  cudnnTensorStruct* y_desc_ = nullptr;
  cudnnPoolingStruct* pool_desc_ = nullptr;
};

}  // namespace mgt::cuda
