#pragma once
// Softmax cross-entropy and arg-max accuracy over [rows, classes] logits.
#include <cstdint>

namespace mgt::kernels {

// Returns the sum of per-row losses; grad = (softmax - onehot) * grad_scale. Labels must be
// valid (the caller checks them).
// Throws DataError naming the first row whose label is outside [0, classes): checked before any
// gradient is written, by the CPU path and by the compiled step (whose kernels cannot raise one).
void check_labels(const int32_t* labels, int64_t rows, int64_t classes);

double softmax_cross_entropy(const float* logits, const int32_t* labels, float* grad, int64_t rows, int64_t classes,
                             float grad_scale);
int64_t count_correct(const float* logits, const int32_t* labels, int64_t rows, int64_t classes);

}  // namespace mgt::kernels
