#pragma once
// Max pooling over NCHW or channel-blocked activations, no padding, recording each output's arg-max for the backward
// pass.
#include <cstdint>

namespace mgt::kernels {

// planes = batch * channels. argmax[o] is the index within the input plane of output o's max.
void max_pool2d_forward(const float* x, float* y, int32_t* argmax, int64_t planes, int64_t h, int64_t w, int64_t kernel,
                        int64_t stride);
// dx = 0, then dx[argmax] += dy (overlapping windows accumulate).
void max_pool2d_backward(const float* dy, const int32_t* argmax, float* dx, int64_t planes, int64_t h, int64_t w,
                         int64_t kernel, int64_t stride);

// The same over channel-blocked tensors, groups = batch * channels / block (block 8 or 16): x in
// blocks of input_block channels, y of output_block, each the block or 1 (NCHW), not both 1; dy
// and dx as y and x. argmax [groups, oh * ow, block] holds positions within the plane.
void max_pool2d_forward_blocked(const float* x, float* y, int32_t* argmax, int64_t groups, int64_t h, int64_t w,
                                int64_t kernel, int64_t stride, int64_t input_block, int64_t output_block);
void max_pool2d_backward_blocked(const float* dy, const int32_t* argmax, float* dx, int64_t groups, int64_t h,
                                 int64_t w, int64_t kernel, int64_t stride, int64_t input_block, int64_t output_block);

}  // namespace mgt::kernels
