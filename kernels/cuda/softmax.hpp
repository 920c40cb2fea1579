#pragma once
// Softmax cross-entropy over [rows, classes] logits in device memory, with the semantics of
// kernels/cpu/softmax.hpp: grad = (softmax - target) * grad_scale, the target one-hot or
// smoothed by label_smoothing,, and per row the loss
// log(sum exp(x - max)) - (x[label] - max), kept in double.
#include <cstdint>

#include "kernels/cuda/runtime.hpp"

namespace mgt::cuda {

// Writes grad [rows, classes] and row_loss [rows] (device arrays; labels on the device too).
// Labels must be valid, as on the CPU (the caller checks them on the host); a row whose label is
// not gets a NaN loss and an unshifted gradient rather than a read out of bounds.
void softmax_cross_entropy(const float* logits, const int32_t* labels, float* grad, double* row_loss, int64_t rows,
                           int64_t classes, float grad_scale, Stream stream = nullptr, float label_smoothing = 0.0f);

// The sum of row_loss in row order, on the host, as the CPU kernel sums it; waits for `stream`.
double sum_row_losses(const double* row_loss, int64_t rows, Stream stream = nullptr);

}  // namespace mgt::cuda
