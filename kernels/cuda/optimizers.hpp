#pragma once
// Optimizer updates over flat parameter buffers in device memory, with exactly the semantics of
// the built-in plugins (plugins/optimizers/sgd and adam, PyTorch's SGD and AdamW): the same
// float32 operations in the same order, each rounded on its own (no fused multiply-add), and the
// scalars worked out in double on the host as the plugins do.
#include <cstddef>
#include <cstdint>

#include "kernels/cuda/runtime.hpp"
#include "kernels/update_scalars.hpp"

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

// The per-update scalars, worked out on the host exactly as the plugins do, read by the kernels
// from device memory: one captured CUDA graph then serves every step whatever the learning rate.
// Only floats, so the host can keep them in a pinned block and copy them in before each replay.
// The backend interface's own types (kernels/update_scalars.hpp), so its scalars pass straight in.
using SgdScalars = kernels::SgdScalars;      // lr, wd, mu, keep (0 on the first update, else mu)
using AdamWScalars = kernels::AdamWScalars;  // decay, b1, b2, 1 - b1, 1 - b2, step size, ...
SgdScalars sgd_scalars(const SgdHyper& h);
// Throws for a step number below 1.
AdamWScalars adamw_scalars(const AdamWHyper& h);

// Which of the plugin's four loops an SGD update runs (plain, weight_decay, momentum, nesterov);
// fixed for a run, so it is chosen when a graph is captured. Throws for Nesterov without momentum.
using SgdKind = kernels::SgdKind;
SgdKind sgd_kind(const SgdHyper& h);

// The updates above with their scalars in device memory. Each does nothing when skip is not null
// and *skip != 0 (a non-finite gradient this step), so the step can be skipped inside a graph.
void sgd_step_device(float* params, const float* grads, float* momentum_buf, size_t n,
                     SgdKind kind, const SgdScalars* scalars, const int32_t* skip,
                     Stream stream = nullptr);
void adamw_step_device(float* params, const float* grads, float* exp_avg, float* exp_avg_sq,
                       size_t n, const AdamWScalars* scalars, const int32_t* skip,
                       Stream stream = nullptr);

}  // namespace mgt::cuda
