#include <string>

#include "kernels/cpu/softmax.hpp"
#include "mgtrain/error.hpp"
#include "mgtrain/layers.hpp"

namespace mgt {

namespace {

void check_logits(const Tensor& logits) {
  MGT_CHECK(logits.rank() == 2 && logits.dim(1) > 0, Error,
            "softmax cross-entropy expects logits [B, classes], got " + shape_string(logits.shape()));
}

}  // namespace

double softmax_cross_entropy(const Tensor& logits, const int32_t* labels, Tensor& grad_logits, float grad_scale) {
  check_logits(logits);
  const int64_t rows = logits.dim(0), classes = logits.dim(1);
  // Checked up front so a bad label leaves no half-written gradient behind.
  kernels::check_labels(labels, rows, classes);
  if (grad_logits.shape() != logits.shape()) grad_logits.resize(logits.shape());
  return kernels::softmax_cross_entropy(logits.data(), labels, grad_logits.data(), rows, classes, grad_scale);
}

int64_t count_correct(const Tensor& logits, const int32_t* labels) {
  check_logits(logits);
  return kernels::count_correct(logits.data(), labels, logits.dim(0), logits.dim(1));
}

}  // namespace mgt
