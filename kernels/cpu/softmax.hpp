#pragma once
// Softmax cross-entropy and arg-max accuracy over [rows, classes] logits.
#include <cstdint>

namespace mgt::kernels {

// Returns the sum of per-row losses; grad = (softmax - onehot) * grad_scale. Labels must be
// valid (the caller checks them).
double softmax_cross_entropy(const float* logits, const int32_t* labels, float* grad, int64_t rows,
                             int64_t classes, float grad_scale);
int64_t count_correct(const float* logits, const int32_t* labels, int64_t rows, int64_t classes);

}  // namespace mgt::kernels
