#pragma once
// Optimizer updates over flat parameter buffers in device memory, with exactly the semantics of
// the built-in plugins (plugins/optimizers/sgd and adam, PyTorch's SGD and AdamW): the same
// float32 operations in the same order, each rounded on its own (no fused multiply-add), and the
// scalars worked out in double on the host as the plugins do.
#include <cstddef>
#include <cstdint>

#include "kernels/cuda/runtime.hpp"

namespace mgt::cuda {

struct SgdHyper {
  double lr = 0.01;
  double momentum = 0.0;      // 0: plain SGD, momentum_buf unused (may be null)
  double weight_decay = 0.0;  // L2: g += weight_decay * p
  bool nesterov = false;
  int64_t steps_done = 0;     // updates before this one; on the first the buffer becomes g
};

// params -= lr * update, with the momentum buffer updated in place.
void sgd_step(float* params, const float* grads, float* momentum_buf, size_t n, const SgdHyper& h,
              Stream stream = nullptr);

struct AdamWHyper {
  double lr = 0.001;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;  // decoupled: p *= 1 - lr * weight_decay
  int64_t step = 1;           // this update's number, from 1 (bias corrections)
};

// AdamW update of params with the first and second moment buffers updated in place.
void adamw_step(float* params, const float* grads, float* exp_avg, float* exp_avg_sq, size_t n,
                const AdamWHyper& h, Stream stream = nullptr);

}  // namespace mgt::cuda
