#include <cmath>
#include <string>

#include "kernels/cuda/check.hpp"
#include "kernels/cuda/optimizers.hpp"
#include "mgtrain/error.hpp"

namespace mgt::cuda {

namespace {

constexpr int kThreads = 256;

// The plugin's four loops; which one runs is decided once per step on the host, as there.
enum class SgdMode { plain, weight_decay, momentum, nesterov };

// The _rn intrinsics keep each operation rounded on its own, as the plugin's loop is on the
// CPU; nvcc would otherwise fuse a * b + c into one FMA and round differently.
template <SgdMode kMode>
__global__ void sgd_kernel(float* __restrict__ p, const float* __restrict__ g,
                           float* __restrict__ buf, int64_t n, float lr, float wd, float mu,
                           float keep) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    if constexpr (kMode == SgdMode::plain) {
      p[i] = __fsub_rn(p[i], __fmul_rn(lr, g[i]));
    } else if constexpr (kMode == SgdMode::weight_decay) {
      p[i] = __fsub_rn(p[i], __fmul_rn(lr, __fadd_rn(g[i], __fmul_rn(wd, p[i]))));
    } else {
      const float gi = __fadd_rn(g[i], __fmul_rn(wd, p[i]));
      const float b = __fadd_rn(__fmul_rn(keep, buf[i]), gi);
      buf[i] = b;
      if constexpr (kMode == SgdMode::nesterov)
        p[i] = __fsub_rn(p[i], __fmul_rn(lr, __fadd_rn(gi, __fmul_rn(mu, b))));
      else
        p[i] = __fsub_rn(p[i], __fmul_rn(lr, b));
    }
  }
}

__global__ void adamw_kernel(float* __restrict__ p, const float* __restrict__ g,
                             float* __restrict__ m, float* __restrict__ v, int64_t n, float decay,
                             float b1, float b2, float one_minus_b1, float one_minus_b2,
                             float step_size, float inv_sqrt_bc2, float eps) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float gi = g[i];
    const float mi = __fadd_rn(__fmul_rn(b1, m[i]), __fmul_rn(one_minus_b1, gi));
    const float vi = __fadd_rn(__fmul_rn(b2, v[i]), __fmul_rn(__fmul_rn(one_minus_b2, gi), gi));
    m[i] = mi;
    v[i] = vi;
    const float denom = __fadd_rn(__fmul_rn(__fsqrt_rn(vi), inv_sqrt_bc2), eps);
    p[i] = __fsub_rn(__fmul_rn(p[i], decay), __fdiv_rn(__fmul_rn(step_size, mi), denom));
  }
}

template <SgdMode kMode>
void launch_sgd(float* p, const float* g, float* buf, int64_t n, float lr, float wd, float mu,
                float keep, Stream stream) {
  sgd_kernel<kMode><<<detail::grid_blocks(n, kThreads), kThreads, 0, stream>>>(p, g, buf, n, lr, wd,
                                                                                 mu, keep);
  MGT_CUDA_CHECK_LAUNCH("sgd_step");
}

}  // namespace

void sgd_step(float* params, const float* grads, float* momentum_buf, size_t n, const SgdHyper& h,
              Stream stream) {
  MGT_CHECK(!(h.nesterov && h.momentum <= 0.0), Error,
            "sgd: Nesterov momentum requires momentum > 0, got " + std::to_string(h.momentum));
  const auto lr = static_cast<float>(h.lr);
  const auto wd = static_cast<float>(h.weight_decay);
  const auto mu = static_cast<float>(h.momentum);
  MGT_CHECK(mu == 0.0f || momentum_buf != nullptr || n == 0, Error,
            "sgd: momentum " + std::to_string(h.momentum) + " needs a momentum buffer");
  if (n == 0) return;
  const auto count = static_cast<int64_t>(n);
  // As the plugin: the buffer starts as a copy of the first gradient (no dampening of step 1).
  const float keep = h.steps_done == 0 ? 0.0f : mu;
  if (mu == 0.0f) {
    if (wd == 0.0f)
      launch_sgd<SgdMode::plain>(params, grads, momentum_buf, count, lr, wd, mu, keep, stream);
    else
      launch_sgd<SgdMode::weight_decay>(params, grads, momentum_buf, count, lr, wd, mu, keep, stream);
  } else if (h.nesterov) {
    launch_sgd<SgdMode::nesterov>(params, grads, momentum_buf, count, lr, wd, mu, keep, stream);
  } else {
    launch_sgd<SgdMode::momentum>(params, grads, momentum_buf, count, lr, wd, mu, keep, stream);
  }
}

void adamw_step(float* params, const float* grads, float* exp_avg, float* exp_avg_sq, size_t n,
                const AdamWHyper& h, Stream stream) {
  MGT_CHECK(h.step >= 1, Error, "adamw: step numbers start at 1, got " + std::to_string(h.step));
  if (n == 0) return;
  // The plugin's scalars, in double where it works in double.
  const double t = static_cast<double>(h.step);
  const double bc1 = 1.0 - std::pow(h.beta1, t);
  const double bc2 = 1.0 - std::pow(h.beta2, t);
  const auto decay = static_cast<float>(1.0 - h.lr * h.weight_decay);
  const auto b1 = static_cast<float>(h.beta1);
  const auto b2 = static_cast<float>(h.beta2);
  const auto one_minus_b1 = static_cast<float>(1.0 - h.beta1);
  const auto one_minus_b2 = static_cast<float>(1.0 - h.beta2);
  const auto step_size = static_cast<float>(h.lr / bc1);
  const auto inv_sqrt_bc2 = static_cast<float>(1.0 / std::sqrt(bc2));
  const auto eps = static_cast<float>(h.eps);
  const auto count = static_cast<int64_t>(n);
  adamw_kernel<<<detail::grid_blocks(count, kThreads), kThreads, 0, stream>>>(
      params, grads, exp_avg, exp_avg_sq, count, decay, b1, b2, one_minus_b1, one_minus_b2,
      step_size, inv_sqrt_bc2, eps);
  MGT_CUDA_CHECK_LAUNCH("adamw_step");
}

}  // namespace mgt::cuda
