#include <vector>

#include "kernels/cuda/softmax.hpp"
#include "kernels/cuda/softmax_rows.cuh"

namespace mgt::cuda {

void softmax_cross_entropy(const float* logits, const int32_t* labels, float* grad, double* row_loss, int64_t rows,
                           int64_t classes, float grad_scale, Stream stream, float label_smoothing) {
  detail::launch_softmax_xent(logits, labels, grad, row_loss, rows, classes, grad_scale, nullptr, stream,
                              label_smoothing);
}

double sum_row_losses(const double* row_loss, int64_t rows, Stream stream) {
  if (rows <= 0) return 0.0;
  synchronize(stream);
  // Reused across calls, so a training step does not allocate once the batch size is known.
  thread_local std::vector<double> host;
  host.resize(static_cast<size_t>(rows));
  copy_to_host(host.data(), row_loss, host.size() * sizeof(double));
  double total = 0.0;
  for (const double loss : host) total += loss;
  return total;
}

}  // namespace mgt::cuda
