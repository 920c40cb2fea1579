#include "kernels/cpu/pool.hpp"

#include <cstring>

#include "kernels/cpu/pointwise.hpp"

namespace mgt::kernels {

MGT_TARGET_CLONES void max_pool2d_forward(const float* __restrict x, float* __restrict y, int32_t* __restrict argmax,
                        int64_t planes, int64_t h, int64_t w, int64_t kernel, int64_t stride) {
  const int64_t oh = (h - kernel) / stride + 1, ow = (w - kernel) / stride + 1;
  for (int64_t p = 0; p < planes; ++p) {
    const float* xp = x + p * h * w;
    float* yp = y + p * oh * ow;
    int32_t* ap = argmax + p * oh * ow;
    if (kernel == 2 && stride == 2) {
      // The common case, branch-free so it vectorizes; ties keep the first in scan order.
      for (int64_t i = 0; i < oh; ++i) {
        const float* r0 = xp + (2 * i) * w;
        const float* r1 = r0 + w;
        const auto base = static_cast<int32_t>(2 * i * w);
        const auto wi = static_cast<int32_t>(w);
        float* yr = yp + i * ow;
        int32_t* ar = ap + i * ow;
        for (int64_t j = 0; j < ow; ++j) {
          const float a = r0[2 * j], b = r0[2 * j + 1], c = r1[2 * j], d = r1[2 * j + 1];
          const float m01 = b > a ? b : a;
          const int32_t i01 = b > a ? 1 : 0;
          const float m23 = d > c ? d : c;
          const int32_t i23 = d > c ? wi + 1 : wi;
          const bool lower = m23 > m01;
          yr[j] = lower ? m23 : m01;
          ar[j] = base + static_cast<int32_t>(2 * j) + (lower ? i23 : i01);
        }
      }
      continue;
    }
    for (int64_t i = 0; i < oh; ++i) {
      for (int64_t j = 0; j < ow; ++j) {
        int64_t at = i * stride * w + j * stride;
        float best = xp[at];
        for (int64_t ki = 0; ki < kernel; ++ki) {
          const int64_t row = (i * stride + ki) * w + j * stride;
          for (int64_t kj = 0; kj < kernel; ++kj) {
            if (xp[row + kj] > best) {
              best = xp[row + kj];
              at = row + kj;
            }
          }
        }
        yp[i * ow + j] = best;
        ap[i * ow + j] = static_cast<int32_t>(at);
      }
    }
  }
}

void max_pool2d_backward(const float* __restrict dy, const int32_t* __restrict argmax,
                         float* __restrict dx, int64_t planes, int64_t h, int64_t w,
                         int64_t kernel, int64_t stride) {
  const int64_t oh = (h - kernel) / stride + 1, ow = (w - kernel) / stride + 1;
  std::memset(dx, 0, sizeof(float) * planes * h * w);
  for (int64_t p = 0; p < planes; ++p) {
    float* dxp = dx + p * h * w;
    const float* dyp = dy + p * oh * ow;
    const int32_t* ap = argmax + p * oh * ow;
    for (int64_t o = 0; o < oh * ow; ++o) dxp[ap[o]] += dyp[o];
  }
}

}  // namespace mgt::kernels
