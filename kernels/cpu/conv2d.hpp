#pragma once
// 2-D convolution (square kernel, symmetric padding) through oneDNN primitives, its activations
// NCHW or channel-blocked. The
// primitives, their memory objects and a user scratchpad are created on the first call for a
// batch size and reused, so a training step creates and allocates nothing after the first.
#include <cstdint>
#include <memory>

#include "mgtrain/ops.hpp"

namespace mgt::kernels {

using Conv2dShape = mgt::Conv2dShape;

// The channel block (mgtrain/ops.hpp) oneDNN's convolutions want their activations in on this
// CPU: 16 (AVX-512), 8 (AVX2) or 1 (plain NCHW: no blocked kernels).
int64_t preferred_channel_block();

class Conv2d {
 public:
  // input_block, output_block: the layouts of x (and dx) and of y (and dy): 1 (NCHW), 8 or 16.
  explicit Conv2d(int64_t input_block = 1, int64_t output_block = 1);
  ~Conv2d();
  Conv2d(const Conv2d&) = delete;
  Conv2d& operator=(const Conv2d&) = delete;

  // y[B, OC, OH, OW] = conv(x[B, IC, H, W], w[OC, IC, K, K]) + bias[OC] (bias may be null).
  void forward(const Conv2dShape& s, int64_t batch, const float* x, const float* w, const float* bias, float* y);
  // dx = conv^T(dy, w); overwrites dx.
  void backward_data(const Conv2dShape& s, int64_t batch, const float* dy, const float* w, float* dx);
  // dw += dW(x, dy), dbias += sum of dy over batch and space (dbias may be null); with
  // accumulate = false they are written instead.
  void backward_weights(const Conv2dShape& s, int64_t batch, const float* x, const float* dy, float* dw, float* dbias,
                        bool accumulate = true);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace mgt::kernels
