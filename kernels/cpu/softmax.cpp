#include "kernels/cpu/softmax.hpp"

#include <cmath>
#include <string>

#include "mgtrain/error.hpp"

namespace mgt::kernels {

void check_labels(const int32_t* labels, int64_t rows, int64_t classes) {
  for (int64_t r = 0; r < rows; ++r)
    MGT_CHECK((labels[r] >= 0 && labels[r] < classes) || labels[r] == kIgnoredLabel, DataError,
              "label out of range in row " + std::to_string(r) + " of the batch: label " + std::to_string(labels[r]) +
                  ", expected 0 <= label < " + std::to_string(classes) + " (the number of classes)");
}

double softmax_cross_entropy(const float* __restrict logits, const int32_t* __restrict labels, float* __restrict grad,
                             int64_t rows, int64_t classes, float grad_scale, float label_smoothing) {
  const SmoothedTarget target = smoothed_target(grad_scale, label_smoothing, classes);
  double total = 0.0;
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = logits + r * classes;
    float* g = grad + r * classes;
    if (labels[r] == kIgnoredLabel) {
      for (int64_t c = 0; c < classes; ++c) g[c] = 0.0f;
      continue;
    }
    float mx = x[0];
    for (int64_t c = 1; c < classes; ++c) mx = x[c] > mx ? x[c] : mx;
    float sum = 0.0f;
    for (int64_t c = 0; c < classes; ++c) {
      g[c] = std::exp(x[c] - mx);
      sum += g[c];
    }
    const int32_t label = labels[r];
    // loss = log(sum exp(x - max)) - (x[label] - max), in double to keep the sum exact enough.
    if (label_smoothing == 0.0f) {
      total += std::log(static_cast<double>(sum)) - static_cast<double>(x[label] - mx);
    } else {
      // -sum_c target_c log p_c = log(sum) - (1 - e)(x[label] - max) - e / classes * sum_c (x_c - max)
      double shifted = 0.0;
      for (int64_t c = 0; c < classes; ++c) shifted += static_cast<double>(x[c] - mx);
      const double e = label_smoothing;
      total += std::log(static_cast<double>(sum)) - (1.0 - e) * static_cast<double>(x[label] - mx) -
               e / static_cast<double>(classes) * shifted;
    }
    const float scale = grad_scale / sum;
    for (int64_t c = 0; c < classes; ++c) g[c] = g[c] * scale - target.every_class;
    g[label] -= target.label;
  }
  return total;
}

int64_t count_correct(const float* logits, const int32_t* labels, int64_t rows, int64_t classes) {
  int64_t correct = 0;
  for (int64_t r = 0; r < rows; ++r) {
    if (labels[r] == kIgnoredLabel) continue;
    const float* x = logits + r * classes;
    int64_t best = 0;
    for (int64_t c = 1; c < classes; ++c)
      if (x[c] > x[best]) best = c;
    correct += best == labels[r];
  }
  return correct;
}

}  // namespace mgt::kernels
