#pragma once
// Softmax cross-entropy and arg-max accuracy over [rows, classes] logits.
#include <cstdint>

namespace mgt::kernels {

// A label that asks for no loss: the row adds nothing to the loss or the accuracy, and its
// gradient is zero (a masked language model's unmasked positions).
constexpr int32_t kIgnoredLabel = -1;

// Throws DataError naming the first row whose label is outside [0, classes) and not
// kIgnoredLabel: checked before any
// gradient is written, by the CPU path and by the compiled step (whose kernels cannot raise one).
void check_labels(const int32_t* labels, int64_t rows, int64_t classes);

// Returns the sum of per-row losses; grad = (softmax - target) * grad_scale. Labels must be valid
// (the caller checks them). The target is the one-hot label, or with label_smoothing e in [0, 1)
// (1 - e) * onehot + e / classes, as PyTorch's CrossEntropyLoss(label_smoothing = e): the row's
// loss is then (1 - e) * -log p[label] + e * mean over the classes of -log p. e = 0 gives the
// plain loss bit for bit.
double softmax_cross_entropy(const float* logits, const int32_t* labels, float* grad, int64_t rows, int64_t classes,
                             float grad_scale, float label_smoothing = 0.0f);

// The per-class and per-label parts of the smoothed target's gradient, scaled: every class gets
// grad_scale * e / classes taken off, the label grad_scale * (1 - e) more. Shared with the GPU
// kernel, so both round them alike (e = 0 gives 0 and grad_scale exactly).
struct SmoothedTarget {
  float every_class;
  float label;
};
inline SmoothedTarget smoothed_target(float grad_scale, float label_smoothing, int64_t classes) {
  return {grad_scale * label_smoothing / static_cast<float>(classes), grad_scale * (1.0f - label_smoothing)};
}
int64_t count_correct(const float* logits, const int32_t* labels, int64_t rows, int64_t classes);

}  // namespace mgt::kernels
