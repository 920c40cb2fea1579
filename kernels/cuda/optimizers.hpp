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

// The hyperparameters and per-update scalars are the backend interface's (kernels/update_scalars.hpp),
// worked out on the host as the plugins work them out.
using kernels::AdamWHyper;
using kernels::AdamWScalars;
using kernels::SgdHyper;
using kernels::SgdKind;
using kernels::SgdScalars;
using kernels::adamw_scalars;
using kernels::sgd_kind;
using kernels::sgd_scalars;

// params -= lr * update, with the momentum buffer updated in place.
void sgd_step(float* params, const float* grads, float* momentum_buf, size_t n, const SgdHyper& h,
              Stream stream = nullptr);

// AdamW update of params with the first and second moment buffers updated in place.
void adamw_step(float* params, const float* grads, float* exp_avg, float* exp_avg_sq, size_t n,
                const AdamWHyper& h, Stream stream = nullptr);

// The updates above with their scalars in device memory. Each does nothing when skip is not null
// and *skip != 0 (a non-finite gradient this step), so the step can be skipped inside a graph.
void sgd_step_device(float* params, const float* grads, float* momentum_buf, size_t n,
                     SgdKind kind, const SgdScalars* scalars, const int32_t* skip,
                     Stream stream = nullptr);
void adamw_step_device(float* params, const float* grads, float* exp_avg, float* exp_avg_sq,
                       size_t n, const AdamWScalars* scalars, const int32_t* skip,
                       Stream stream = nullptr);

}  // namespace mgt::cuda
