#include "kernels/cpu/pool.hpp"

#include <algorithm>
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
// positions. Vectors go by reference: passed or returned by value they would change the calling
// convention between the target clones and the default build.
template <int64_t block>
struct Lanes {
  typedef float Values __attribute__((vector_size(4 * block)));
  typedef int32_t Positions __attribute__((vector_size(4 * block)));
  template <typename V, typename T>
  static void load(V& v, const T* p) {
    std::memcpy(&v, p, sizeof(v));
  }
  template <typename V, typename T>
  static void store(T* p, const V& v) {
    std::memcpy(p, &v, sizeof(v));
  }
};

// A group's channels at one position: contiguous in a blocked tensor, a plane apart in an NCHW one
// (the group's first channel at `at`, `plane` floats from one channel to the next).
template <int64_t block, bool plain>
void gather(typename Lanes<block>::Values& v, const float* at, int64_t pos, int64_t plane) {
  if constexpr (!plain) return Lanes<block>::load(v, at + pos * block);
  for (int64_t l = 0; l < block; ++l) v[l] = at[l * plane + pos];
}

template <int64_t block, bool plain>
void scatter(float* at, int64_t pos, int64_t plane, const typename Lanes<block>::Values& v) {
  if constexpr (!plain) return Lanes<block>::store(at + pos * block, v);
  for (int64_t l = 0; l < block; ++l) at[l * plane + pos] = v[l];
}

// One group of `block` channels at a time, all its channels in one vector: each lane scans its
// window in order, keeping the first maximum (as the NCHW loop does); argmax holds the position
// within the plane, [groups, oh * ow, block]. x and y each blocked or NCHW (plain_in, plain_out).
template <int64_t block, bool plain_in, bool plain_out>
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
        typename L::Values best = {}, v = {};
        gather<block, plain_in>(best, xg, first, h * w);
        typename L::Positions at = first - typename L::Positions{};
        for (int64_t ki = 0; ki < kernel; ++ki)
          for (int64_t kj = 0; kj < kernel; ++kj) {
            const auto pos = static_cast<int32_t>(first + ki * w + kj);
            gather<block, plain_in>(v, xg, pos, h * w);
            const auto more = v > best;
            best = more ? v : best;
            at = more ? pos - typename L::Positions{} : at;
          }
        scatter<block, plain_out>(yg, i * ow + j, oh * ow, best);
        L::store(ag + (i * ow + j) * block, at);
      }
  }
}

// dx from dy at each window's arg-max. Windows that tile the plane (kernel == stride) write each
// element of theirs once, dy where it is the arg-max, else 0, so no clearing pass; overlapping
// windows clear dx and add. dy is laid out as the forward's y, dx as its x.
template <int64_t block, bool plain_in, bool plain_out>
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
    for (int64_t o = 0; o < oh * ow; ++o) {
      typename L::Values d = {}, zero = {};
      gather<block, plain_out>(d, dyg, o, oh * ow);
      typename L::Positions at;
      L::load(at, ag + o * block);
      if (!tiles) {
        for (int64_t l = 0; l < block; ++l) dxg[plain_in ? l * h * w + at[l] : at[l] * block + l] += d[l];
        continue;
      }
      const int64_t i = o / ow, j = o % ow;
      for (int64_t ki = 0; ki < kernel; ++ki)
        for (int64_t kj = 0; kj < kernel; ++kj) {
          const auto pos = static_cast<int32_t>((i * kernel + ki) * w + j * kernel + kj);
          const typename L::Values picked = at == pos ? d : zero;
          scatter<block, plain_in>(dxg, pos, h * w, picked);
        }
    }
  }
}

template <int64_t block>
void max_pool_forward_of_block(const float* x, float* y, int32_t* argmax, int64_t groups, int64_t h, int64_t w,
                               int64_t kernel, int64_t stride, bool plain_in, bool plain_out) {
  if (plain_in) return blocked_max_pool_forward<block, true, false>(x, y, argmax, groups, h, w, kernel, stride);
  if (plain_out) return blocked_max_pool_forward<block, false, true>(x, y, argmax, groups, h, w, kernel, stride);
  blocked_max_pool_forward<block, false, false>(x, y, argmax, groups, h, w, kernel, stride);
}

template <int64_t block>
void max_pool_backward_of_block(const float* dy, const int32_t* argmax, float* dx, int64_t groups, int64_t h, int64_t w,
                                int64_t kernel, int64_t stride, bool plain_in, bool plain_out) {
  if (plain_in) return blocked_max_pool_backward<block, true, false>(dy, argmax, dx, groups, h, w, kernel, stride);
  if (plain_out) return blocked_max_pool_backward<block, false, true>(dy, argmax, dx, groups, h, w, kernel, stride);
  blocked_max_pool_backward<block, false, false>(dy, argmax, dx, groups, h, w, kernel, stride);
}

void check_layouts(int64_t input_block, int64_t output_block) {
  const int64_t block = std::max(input_block, output_block);
  MGT_CHECK((block == 8 || block == 16) && (input_block == 1 || input_block == block) &&
                (output_block == 1 || output_block == block) && input_block * output_block != 1,
            Error,
            "max_pool2d: no kernel from a channel block of " + std::to_string(input_block) + " to one of " +
                std::to_string(output_block));
}

}  // namespace

void max_pool2d_forward_blocked(const float* x, float* y, int32_t* argmax, int64_t groups, int64_t h, int64_t w,
                                int64_t kernel, int64_t stride, int64_t input_block, int64_t output_block) {
  check_layouts(input_block, output_block);
  const bool plain_in = input_block == 1, plain_out = output_block == 1;
  if (std::max(input_block, output_block) == 16)
    return max_pool_forward_of_block<16>(x, y, argmax, groups, h, w, kernel, stride, plain_in, plain_out);
  max_pool_forward_of_block<8>(x, y, argmax, groups, h, w, kernel, stride, plain_in, plain_out);
}

void max_pool2d_backward_blocked(const float* dy, const int32_t* argmax, float* dx, int64_t groups, int64_t h,
                                 int64_t w, int64_t kernel, int64_t stride, int64_t input_block, int64_t output_block) {
  check_layouts(input_block, output_block);
  const bool plain_in = input_block == 1, plain_out = output_block == 1;
  if (std::max(input_block, output_block) == 16)
    return max_pool_backward_of_block<16>(dy, argmax, dx, groups, h, w, kernel, stride, plain_in, plain_out);
  max_pool_backward_of_block<8>(dy, argmax, dx, groups, h, w, kernel, stride, plain_in, plain_out);
}

}  // namespace mgt::kernels
