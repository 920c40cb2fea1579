#include "kernels/cpu/pool.hpp"

#include <cstring>
#include <string>

#include "kernels/cpu/pointwise.hpp"
#include "mgtrain/error.hpp"

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
        const auto owi = static_cast<int32_t>(ow);
        float* yr = yp + i * ow;
        int32_t* ar = ap + i * ow;
        // int32 counter and this if-shape are what g++ if-converts and vectorizes.
        for (int32_t j = 0; j < owi; ++j) {
          const float a = r0[2 * j], b = r0[2 * j + 1], c = r1[2 * j], d = r1[2 * j + 1];
          float m01 = a;
          int32_t i01 = 0;
          if (b > a) {
            m01 = b;
            i01 = 1;
          }
          float m23 = c;
          int32_t i23 = wi;
          if (d > c) {
            m23 = d;
            i23 = wi + 1;
          }
          float m = m01;
          int32_t off = i01;
          if (m23 > m01) {
            m = m23;
            off = i23;
          }
          yr[j] = m;
          ar[j] = base + 2 * j + off;
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

void max_pool2d_backward(const float* __restrict dy, const int32_t* __restrict argmax, float* __restrict dx,
                         int64_t planes, int64_t h, int64_t w, int64_t kernel, int64_t stride) {
  const int64_t oh = (h - kernel) / stride + 1, ow = (w - kernel) / stride + 1;
  if (kernel != stride) {
    // Windows overlap or leave gaps: clear, then accumulate.
    std::memset(dx, 0, sizeof(float) * planes * h * w);
    for (int64_t p = 0; p < planes; ++p) {
      float* dxp = dx + p * h * w;
      const float* dyp = dy + p * oh * ow;
      const int32_t* ap = argmax + p * oh * ow;
      for (int64_t o = 0; o < oh * ow; ++o) dxp[ap[o]] += dyp[o];
    }
    return;
  }
  // Windows tile the plane: each element is written once (zero, or its window's gradient at the
  // arg-max), saving a separate clearing pass over dx.
  const int64_t k = kernel;
  for (int64_t p = 0; p < planes; ++p) {
    float* dxp = dx + p * h * w;
    const float* dyp = dy + p * oh * ow;
    const int32_t* ap = argmax + p * oh * ow;
    for (int64_t i = 0; i < oh; ++i) {
      for (int64_t r = i * k; r < (i + 1) * k; ++r) {
        float* row = dxp + r * w;
        for (int64_t c = 0; c < w; ++c) row[c] = 0.0f;
      }
      for (int64_t j = 0; j < ow; ++j) dxp[ap[i * ow + j]] = dyp[i * ow + j];
    }
    for (int64_t r = oh * k; r < h; ++r)
      for (int64_t c = 0; c < w; ++c) dxp[r * w + c] = 0.0f;
  }
}

namespace {

// A position's `block` channels of a channel-blocked tensor, as one vector, and their arg-max
// positions.
template <int64_t block>
struct Lanes {
  typedef float Values __attribute__((vector_size(4 * block)));
  typedef int32_t Positions __attribute__((vector_size(4 * block)));
  static Values load(const float* p) {
    Values v;
    std::memcpy(&v, p, sizeof(v));
    return v;
  }
  static void store(float* p, Values v) { std::memcpy(p, &v, sizeof(v)); }
  static Positions load(const int32_t* p) {
    Positions v;
    std::memcpy(&v, p, sizeof(v));
    return v;
  }
  static void store(int32_t* p, Positions v) { std::memcpy(p, &v, sizeof(v)); }
};

// One group of `block` channels at a time, all its channels in one vector: each lane scans its
// window in order, keeping the first maximum (as the NCHW loop does); argmax holds the position
// within the plane, [oh * ow, block].
template <int64_t block>
MGT_TARGET_CLONES void blocked_max_pool_forward(const float* __restrict x, float* __restrict y,
                                                int32_t* __restrict argmax, int64_t groups, int64_t h, int64_t w,
                                                int64_t kernel, int64_t stride) {
  using L = Lanes<block>;
  const int64_t oh = (h - kernel) / stride + 1, ow = (w - kernel) / stride + 1;
  for (int64_t g = 0; g < groups; ++g) {
    const float* xg = x + g * h * w * block;
    float* yg = y + g * oh * ow * block;
    int32_t* ag = argmax + g * oh * ow * block;
    for (int64_t i = 0; i < oh; ++i)
      for (int64_t j = 0; j < ow; ++j) {
        const auto first = static_cast<int32_t>(i * stride * w + j * stride);
        typename L::Values best = L::load(xg + first * block);
        typename L::Positions at = first - typename L::Positions{};
        for (int64_t ki = 0; ki < kernel; ++ki)
          for (int64_t kj = 0; kj < kernel; ++kj) {
            const auto pos = static_cast<int32_t>(first + ki * w + kj);
            const typename L::Values v = L::load(xg + pos * block);
            const auto more = v > best;
            best = more ? v : best;
            at = more ? pos - typename L::Positions{} : at;
          }
        L::store(yg + (i * ow + j) * block, best);
        L::store(ag + (i * ow + j) * block, at);
      }
  }
}

// dx from dy at each window's arg-max. Windows that tile the plane (kernel == stride) write each
// element of theirs once, dy where it is the arg-max, else 0, so no clearing pass; overlapping
// windows clear dx and add.
template <int64_t block>
MGT_TARGET_CLONES void blocked_max_pool_backward(const float* __restrict dy, const int32_t* __restrict argmax,
                                                 float* __restrict dx, int64_t groups, int64_t h, int64_t w,
                                                 int64_t kernel, int64_t stride) {
  using L = Lanes<block>;
  const int64_t oh = (h - kernel) / stride + 1, ow = (w - kernel) / stride + 1;
  const bool tiles = kernel == stride;
  if (!tiles || oh * kernel != h || ow * kernel != w) std::memset(dx, 0, sizeof(float) * groups * h * w * block);
  for (int64_t g = 0; g < groups; ++g) {
    float* dxg = dx + g * h * w * block;
    const float* dyg = dy + g * oh * ow * block;
    const int32_t* ag = argmax + g * oh * ow * block;
    if (!tiles) {
      for (int64_t o = 0; o < oh * ow * block; o += block)
        for (int64_t l = 0; l < block; ++l) dxg[ag[o + l] * block + l] += dyg[o + l];
      continue;
    }
    for (int64_t i = 0; i < oh; ++i)
      for (int64_t j = 0; j < ow; ++j) {
        const typename L::Values d = L::load(dyg + (i * ow + j) * block), zero = {};
        const typename L::Positions at = L::load(ag + (i * ow + j) * block);
        for (int64_t ki = 0; ki < kernel; ++ki)
          for (int64_t kj = 0; kj < kernel; ++kj) {
            const auto pos = static_cast<int32_t>((i * kernel + ki) * w + j * kernel + kj);
            L::store(dxg + pos * block, at == pos ? d : zero);
          }
      }
  }
}

}  // namespace

void max_pool2d_forward_blocked(const float* x, float* y, int32_t* argmax, int64_t groups, int64_t h, int64_t w,
                                int64_t kernel, int64_t stride, int64_t block) {
  if (block == 16) return blocked_max_pool_forward<16>(x, y, argmax, groups, h, w, kernel, stride);
  MGT_CHECK(block == 8, Error, "max_pool2d: no kernel for a channel block of " + std::to_string(block));
  blocked_max_pool_forward<8>(x, y, argmax, groups, h, w, kernel, stride);
}

void max_pool2d_backward_blocked(const float* dy, const int32_t* argmax, float* dx, int64_t groups, int64_t h,
                                 int64_t w, int64_t kernel, int64_t stride, int64_t block) {
  if (block == 16) return blocked_max_pool_backward<16>(dy, argmax, dx, groups, h, w, kernel, stride);
  MGT_CHECK(block == 8, Error, "max_pool2d: no kernel for a channel block of " + std::to_string(block));
  blocked_max_pool_backward<8>(dy, argmax, dx, groups, h, w, kernel, stride);
}

}  // namespace mgt::kernels
