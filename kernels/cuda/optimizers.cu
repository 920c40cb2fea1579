#include <cmath>
#include <string>
#include <type_traits>

#include "kernels/cuda/check.hpp"
#include "kernels/cuda/optimizers.hpp"
#include "mgtrain/error.hpp"

namespace mgt::cuda {

namespace {

constexpr int kThreads = 256;

// The per-element math, shared by the kernels that take their scalars as arguments and those that
// read them from device memory, so both round alike. The _rn intrinsics keep each operation
// rounded on its own, as the plugin's loop is on the CPU; nvcc would otherwise fuse a * b + c
// into one FMA and round differently.
template <SgdKind kKind>
__device__ __forceinline__ void sgd_update(float* __restrict__ p, const float* __restrict__ g,
                                           float* __restrict__ buf, int64_t n, SgdScalars s) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    if constexpr (kKind == SgdKind::plain) {
      p[i] = __fsub_rn(p[i], __fmul_rn(s.lr, g[i]));
    } else if constexpr (kKind == SgdKind::weight_decay) {
      p[i] = __fsub_rn(p[i], __fmul_rn(s.lr, __fadd_rn(g[i], __fmul_rn(s.wd, p[i]))));
    } else {
      const float gi = __fadd_rn(g[i], __fmul_rn(s.wd, p[i]));
      const float b = __fadd_rn(__fmul_rn(s.keep, buf[i]), gi);
      buf[i] = b;
      if constexpr (kKind == SgdKind::nesterov)
        p[i] = __fsub_rn(p[i], __fmul_rn(s.lr, __fadd_rn(gi, __fmul_rn(s.mu, b))));
      else
        p[i] = __fsub_rn(p[i], __fmul_rn(s.lr, b));
    }
  }
}

__device__ __forceinline__ void adamw_update(float* __restrict__ p, const float* __restrict__ g,
                                             float* __restrict__ m, float* __restrict__ v,
                                             int64_t n, AdamWScalars s) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float gi = g[i];
    const float mi = __fadd_rn(__fmul_rn(s.b1, m[i]), __fmul_rn(s.one_minus_b1, gi));
    const float vi = __fadd_rn(__fmul_rn(s.b2, v[i]), __fmul_rn(__fmul_rn(s.one_minus_b2, gi), gi));
    m[i] = mi;
    v[i] = vi;
    const float denom = __fadd_rn(__fmul_rn(__fsqrt_rn(vi), s.inv_sqrt_bc2), s.eps);
    p[i] = __fsub_rn(__fmul_rn(p[i], s.decay), __fdiv_rn(__fmul_rn(s.step_size, mi), denom));
  }
}

template <SgdKind kKind>
__global__ void sgd_kernel(float* __restrict__ p, const float* __restrict__ g,
                           float* __restrict__ buf, int64_t n, SgdScalars s) {
  sgd_update<kKind>(p, g, buf, n, s);
}

template <SgdKind kKind>
__global__ void sgd_device_kernel(float* __restrict__ p, const float* __restrict__ g,
                                  float* __restrict__ buf, int64_t n,
                                  const SgdScalars* __restrict__ s,
                                  const int32_t* __restrict__ skip) {
  if (skip && *skip != 0) return;
  sgd_update<kKind>(p, g, buf, n, *s);
}

__global__ void adamw_kernel(float* __restrict__ p, const float* __restrict__ g,
                             float* __restrict__ m, float* __restrict__ v, int64_t n,
                             AdamWScalars s) {
  adamw_update(p, g, m, v, n, s);
}

__global__ void adamw_device_kernel(float* __restrict__ p, const float* __restrict__ g,
                                    float* __restrict__ m, float* __restrict__ v, int64_t n,
                                    const AdamWScalars* __restrict__ s,
                                    const int32_t* __restrict__ skip) {
  if (skip && *skip != 0) return;
  adamw_update(p, g, m, v, n, *s);
}

// Calls launch(std::integral_constant<SgdKind, kind>{}), turning the run-time kind into the
// kernel's template argument.
template <typename Launch>
void dispatch_sgd(SgdKind kind, Launch&& launch) {
  switch (kind) {
    case SgdKind::plain:
      launch(std::integral_constant<SgdKind, SgdKind::plain>{});
      break;
    case SgdKind::weight_decay:
      launch(std::integral_constant<SgdKind, SgdKind::weight_decay>{});
      break;
    case SgdKind::momentum:
      launch(std::integral_constant<SgdKind, SgdKind::momentum>{});
      break;
    case SgdKind::nesterov:
      launch(std::integral_constant<SgdKind, SgdKind::nesterov>{});
      break;
  }
}

bool uses_buffer(SgdKind kind) { return kind == SgdKind::momentum || kind == SgdKind::nesterov; }

}  // namespace

void sgd_step(float* params, const float* grads, float* momentum_buf, size_t n, const SgdHyper& h,
              Stream stream) {
  const SgdKind kind = sgd_kind(h);
  MGT_CHECK(!uses_buffer(kind) || momentum_buf != nullptr || n == 0, Error,
            "sgd: momentum " + std::to_string(h.momentum) + " needs a momentum buffer");
  if (n == 0) return;
  const auto count = static_cast<int64_t>(n);
  const SgdScalars s = sgd_scalars(h);
  dispatch_sgd(kind, [&](auto k) {
    sgd_kernel<decltype(k)::value><<<detail::grid_blocks(count, kThreads), kThreads, 0, stream>>>(
        params, grads, momentum_buf, count, s);
  });
  MGT_CUDA_CHECK_LAUNCH("sgd_step");
}

void sgd_step_device(float* params, const float* grads, float* momentum_buf, size_t n,
                     SgdKind kind, const SgdScalars* scalars, const int32_t* skip, Stream stream) {
  MGT_CHECK(!uses_buffer(kind) || momentum_buf != nullptr || n == 0, Error,
            "sgd: an update with momentum needs a momentum buffer");
  MGT_CHECK(scalars != nullptr || n == 0, Error, "sgd: the update's scalars are missing");
  if (n == 0) return;
  const auto count = static_cast<int64_t>(n);
  dispatch_sgd(kind, [&](auto k) {
    sgd_device_kernel<decltype(k)::value>
        <<<detail::grid_blocks(count, kThreads), kThreads, 0, stream>>>(params, grads, momentum_buf,
                                                                        count, scalars, skip);
  });
  MGT_CUDA_CHECK_LAUNCH("sgd_step_device");
}

void adamw_step(float* params, const float* grads, float* exp_avg, float* exp_avg_sq, size_t n,
                const AdamWHyper& h, Stream stream) {
  const AdamWScalars s = adamw_scalars(h);
  if (n == 0) return;
  const auto count = static_cast<int64_t>(n);
  adamw_kernel<<<detail::grid_blocks(count, kThreads), kThreads, 0, stream>>>(
      params, grads, exp_avg, exp_avg_sq, count, s);
  MGT_CUDA_CHECK_LAUNCH("adamw_step");
}

void adamw_step_device(float* params, const float* grads, float* exp_avg, float* exp_avg_sq,
                       size_t n, const AdamWScalars* scalars, const int32_t* skip, Stream stream) {
  MGT_CHECK(scalars != nullptr || n == 0, Error, "adamw: the update's scalars are missing");
  if (n == 0) return;
  const auto count = static_cast<int64_t>(n);
  adamw_device_kernel<<<detail::grid_blocks(count, kThreads), kThreads, 0, stream>>>(
      params, grads, exp_avg, exp_avg_sq, count, scalars, skip);
  MGT_CUDA_CHECK_LAUNCH("adamw_step_device");
}

}  // namespace mgt::cuda
