#pragma once
// Max pooling over NCHW, no padding, recording each output's arg-max for the backward pass.
#include <cstdint>

namespace mgt::kernels {

// planes = batch * channels. argmax[o] is the index within the input plane of output o's max.
void max_pool2d_forward(const float* x, float* y, int32_t* argmax, int64_t planes, int64_t h, int64_t w, int64_t kernel,
                        int64_t stride);
// dx = 0, then dx[argmax] += dy (overlapping windows accumulate).
void max_pool2d_backward(const float* dy, const int32_t* argmax, float* dx, int64_t planes, int64_t h, int64_t w,
                         int64_t kernel, int64_t stride);

}  // namespace mgt::kernels
