#pragma once
// The scalars of one optimizer update, worked out on the host exactly as the built-in plugins
// (plugins/optimizers/sgd and adam) work them out, and read by the update kernels from the
// backend's memory: one captured CUDA graph then serves every step whatever the learning rate.
// Only floats, so the host can stage them in a pinned block and copy them in.
#include <cstdint>

namespace mgt::kernels {

struct SgdHyper {
  double lr = 0.01;
  double momentum = 0.0;      // 0: plain SGD, momentum_buf unused (may be null)
  double weight_decay = 0.0;  // L2: g += weight_decay * p
  bool nesterov = false;
  int64_t steps_done = 0;     // updates before this one; on the first the buffer becomes g
};

struct AdamWHyper {
  double lr = 0.001;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;  // decoupled: p *= 1 - lr * weight_decay
  int64_t step = 1;           // this update's number, from 1 (bias corrections)
};

// Which of the plugin's four SGD loops applies; fixed for a run.
enum class SgdKind { plain, weight_decay, momentum, nesterov };

struct SgdScalars {
  float lr, wd, mu, keep;  // keep = 0 on the first update (the buffer becomes g), else momentum
};
struct AdamWScalars {
  float decay, b1, b2, one_minus_b1, one_minus_b2, step_size, inv_sqrt_bc2, eps;
};

// Throws for Nesterov without momentum.
SgdKind sgd_kind(const SgdHyper& h);
SgdScalars sgd_scalars(const SgdHyper& h);
// Throws for a step number below 1.
AdamWScalars adamw_scalars(const AdamWHyper& h);

}  // namespace mgt::kernels
