#pragma once
// NCHW 2-D convolution (square kernel, symmetric padding) through oneDNN primitives. The
// primitives, their memory objects and a user scratchpad are created on the first call for a
// batch size and reused, so a training step creates and allocates nothing after the first.
#include <cstdint>
#include <memory>

namespace mgt::kernels {

struct Conv2dShape {
  int64_t in_channels = 0, out_channels = 0, kernel = 1, stride = 1, padding = 0;
  int64_t height = 0, width = 0;  // input spatial size
  int64_t out_height() const { return (height + 2 * padding - kernel) / stride + 1; }
  int64_t out_width() const { return (width + 2 * padding - kernel) / stride + 1; }
  bool operator==(const Conv2dShape&) const = default;
};

class Conv2d {
 public:
  Conv2d();
  ~Conv2d();
  Conv2d(const Conv2d&) = delete;
  Conv2d& operator=(const Conv2d&) = delete;

  // y[B, OC, OH, OW] = conv(x[B, IC, H, W], w[OC, IC, K, K]) + bias[OC] (bias may be null).
  void forward(const Conv2dShape& s, int64_t batch, const float* x, const float* w,
               const float* bias, float* y);
  // dx = conv^T(dy, w); overwrites dx.
  void backward_data(const Conv2dShape& s, int64_t batch, const float* dy, const float* w,
                     float* dx);
  // dw += dW(x, dy), dbias += sum of dy over batch and space (dbias may be null); with
  // accumulate = false they are written instead.
  void backward_weights(const Conv2dShape& s, int64_t batch, const float* x, const float* dy,
                        float* dw, float* dbias, bool accumulate = true);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace mgt::kernels
