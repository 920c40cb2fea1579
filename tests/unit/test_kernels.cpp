// CPU kernels against naive references: oneDNN sgemm for every transpose combination and
// non-square sizes, and oneDNN convolution (forward, backward data, backward weights) against a
// direct convolution with padding and stride.
#include <gtest/gtest.h>
#include <sched.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <ostream>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "kernels/backend.hpp"
#include "kernels/cpu/bf16.hpp"
#include "kernels/cpu/cache_lines.hpp"
#include "kernels/cpu/conv2d.hpp"
#include "kernels/cpu/gemm.hpp"
#include "kernels/cpu/pointwise.hpp"
#include "kernels/cpu/pool.hpp"
#include "kernels/cpu/softmax.hpp"
#include "kernels/cpu/tree_outer_products.hpp"
#include "kernels/elementwise.hpp"
#include "mgtrain/error.hpp"
#include "oneapi/dnnl/dnnl.h"

namespace {

std::vector<float> random_vector(size_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(gen);
  return v;
}

// C = alpha * op(A) op(B) + beta * C, row-major, in double.
void naive_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
                const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double acc = 0.0;
      for (int64_t p = 0; p < k; ++p) {
        const float av = ta ? a[p * lda + i] : a[i * lda + p];
        const float bv = tb ? b[j * ldb + p] : b[p * ldb + j];
        acc += static_cast<double>(av) * bv;
      }
      c[i * ldc + j] = static_cast<float>(alpha * acc + beta * c[i * ldc + j]);
    }
}

struct GemmCase {
  bool ta, tb;
  int64_t m, n, k;
};
void PrintTo(const GemmCase& c, std::ostream* os) {
  *os << (c.ta ? 'T' : 'N') << (c.tb ? 'T' : 'N') << ' ' << c.m << 'x' << c.n << 'x' << c.k;
}

class KernelGemm : public ::testing::TestWithParam<GemmCase> {};

TEST_P(KernelGemm, MatchesNaiveTripleLoop) {
  const auto [ta, tb, m, n, k] = GetParam();
  // Leading dimensions larger than the logical width, to catch lda/ldb/ldc mix-ups.
  const int64_t lda = (ta ? m : k) + 3, ldb = (tb ? k : n) + 2, ldc = n + 5;
  const auto a = random_vector(static_cast<size_t>((ta ? k : m) * lda), 1);
  const auto b = random_vector(static_cast<size_t>((tb ? n : k) * ldb), 2);
  auto c = random_vector(static_cast<size_t>(m * ldc), 3);
  auto expected = c;
  const float alpha = 0.75f, beta = 0.5f;
  mgt::kernels::sgemm(ta, tb, m, n, k, alpha, a.data(), lda, b.data(), ldb, beta, c.data(), ldc);
  naive_gemm(ta, tb, m, n, k, alpha, a.data(), lda, b.data(), ldb, beta, expected.data(), ldc);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j)
      ASSERT_NEAR(c[i * ldc + j], expected[i * ldc + j], 1e-4f * (1.0f + std::sqrt(float(k))))
          << "at (" << i << ", " << j << ")";
  // Padding between rows is untouched.
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = n; j < ldc; ++j) ASSERT_EQ(c[i * ldc + j], expected[i * ldc + j]);
}

INSTANTIATE_TEST_SUITE_P(AllTransposes, KernelGemm,
                         ::testing::Values(GemmCase{false, false, 7, 13, 5}, GemmCase{false, true, 7, 13, 5},
                                           GemmCase{true, false, 7, 13, 5}, GemmCase{true, true, 7, 13, 5},
                                           GemmCase{false, false, 64, 33, 129}, GemmCase{false, true, 128, 10, 784},
                                           GemmCase{true, false, 100, 784, 32}, GemmCase{true, true, 1, 17, 3}),
                         [](const ::testing::TestParamInfo<GemmCase>& info) {
                           const GemmCase& c = info.param;
                           return std::string(c.ta ? "T" : "N") + (c.tb ? "T" : "N") + "_" + std::to_string(c.m) + "x" +
                                  std::to_string(c.n) + "x" + std::to_string(c.k);
                         });

TEST(KernelGemm, BetaZeroIgnoresGarbageInC) {
  const int64_t m = 4, n = 6, k = 3;
  const auto a = random_vector(m * k, 4), b = random_vector(k * n, 5);
  std::vector<float> c(m * n, std::nanf("")), expected(m * n, 0.0f);
  mgt::kernels::sgemm(false, false, m, n, k, 1.0f, a.data(), k, b.data(), n, 0.0f, c.data(), n);
  naive_gemm(false, false, m, n, k, 1.0f, a.data(), k, b.data(), n, 0.0f, expected.data(), n);
  for (int64_t i = 0; i < m * n; ++i) ASSERT_NEAR(c[i], expected[i], 1e-5f);
}

TEST(KernelThreads, SetCpuThreads) {
  mgt::kernels::set_cpu_threads(1);
  EXPECT_EQ(mgt::kernels::cpu_threads(), 1);
  EXPECT_ANY_THROW(mgt::kernels::set_cpu_threads(0));
}

TEST(KernelThreads, UsableCoresAreThoseOfTheAffinityMask) {
  cpu_set_t set;
  CPU_ZERO(&set);
  ASSERT_EQ(sched_getaffinity(0, sizeof set, &set), 0);
  EXPECT_EQ(mgt::kernels::usable_cpu_cores(), CPU_COUNT(&set));
  EXPECT_GE(mgt::kernels::usable_cpu_cores(), 1);
}

// ---------------------------------------------------------------------------------------------

struct ConvCase {
  int64_t batch, ic, oc, h, w, k, stride, pad;
};
void PrintTo(const ConvCase& c, std::ostream* os) {
  *os << "batch " << c.batch << " ic " << c.ic << " oc " << c.oc << " " << c.h << "x" << c.w << " k " << c.k
      << " stride " << c.stride << " pad " << c.pad;
}

void naive_conv_forward(const ConvCase& c, const float* x, const float* wt, const float* bias, float* y) {
  const int64_t oh = (c.h + 2 * c.pad - c.k) / c.stride + 1;
  const int64_t ow = (c.w + 2 * c.pad - c.k) / c.stride + 1;
  for (int64_t b = 0; b < c.batch; ++b)
    for (int64_t o = 0; o < c.oc; ++o)
      for (int64_t i = 0; i < oh; ++i)
        for (int64_t j = 0; j < ow; ++j) {
          double acc = bias ? bias[o] : 0.0;
          for (int64_t ci = 0; ci < c.ic; ++ci)
            for (int64_t ki = 0; ki < c.k; ++ki)
              for (int64_t kj = 0; kj < c.k; ++kj) {
                const int64_t yi = i * c.stride - c.pad + ki, xj = j * c.stride - c.pad + kj;
                if (yi < 0 || yi >= c.h || xj < 0 || xj >= c.w) continue;
                acc += double(x[((b * c.ic + ci) * c.h + yi) * c.w + xj]) * wt[((o * c.ic + ci) * c.k + ki) * c.k + kj];
              }
          y[((b * c.oc + o) * oh + i) * ow + j] = static_cast<float>(acc);
        }
}

// The adjoints of the direct convolution, written as the same loop nest scattering backwards.
void naive_conv_backward(const ConvCase& c, const float* x, const float* wt, const float* dy, float* dx, float* dw,
                         float* db) {
  const int64_t oh = (c.h + 2 * c.pad - c.k) / c.stride + 1;
  const int64_t ow = (c.w + 2 * c.pad - c.k) / c.stride + 1;
  std::fill(dx, dx + c.batch * c.ic * c.h * c.w, 0.0f);
  std::fill(dw, dw + c.oc * c.ic * c.k * c.k, 0.0f);
  std::fill(db, db + c.oc, 0.0f);
  for (int64_t b = 0; b < c.batch; ++b)
    for (int64_t o = 0; o < c.oc; ++o)
      for (int64_t i = 0; i < oh; ++i)
        for (int64_t j = 0; j < ow; ++j) {
          const float g = dy[((b * c.oc + o) * oh + i) * ow + j];
          db[o] += g;
          for (int64_t ci = 0; ci < c.ic; ++ci)
            for (int64_t ki = 0; ki < c.k; ++ki)
              for (int64_t kj = 0; kj < c.k; ++kj) {
                const int64_t yi = i * c.stride - c.pad + ki, xj = j * c.stride - c.pad + kj;
                if (yi < 0 || yi >= c.h || xj < 0 || xj >= c.w) continue;
                const int64_t xi = ((b * c.ic + ci) * c.h + yi) * c.w + xj;
                const int64_t wi = ((o * c.ic + ci) * c.k + ki) * c.k + kj;
                dx[xi] += g * wt[wi];
                dw[wi] += g * x[xi];
              }
        }
}

class KernelConv : public ::testing::TestWithParam<ConvCase> {};

mgt::kernels::Conv2dShape to_shape(const ConvCase& c) {
  mgt::kernels::Conv2dShape s;
  s.in_channels = c.ic;
  s.out_channels = c.oc;
  s.kernel = c.k;
  s.stride = c.stride;
  s.padding = c.pad;
  s.height = c.h;
  s.width = c.w;
  return s;
}

TEST_P(KernelConv, ForwardMatchesDirectConvolution) {
  const ConvCase c = GetParam();
  const auto s = to_shape(c);
  const int64_t ny = c.batch * c.oc * s.out_height() * s.out_width();
  const auto x = random_vector(c.batch * c.ic * c.h * c.w, 10);
  const auto wt = random_vector(c.oc * c.ic * c.k * c.k, 11);
  const auto bias = random_vector(c.oc, 12);
  std::vector<float> y(ny, -99.0f), expected(ny);
  mgt::kernels::Conv2d conv;
  conv.forward(s, c.batch, x.data(), wt.data(), bias.data(), y.data());
  naive_conv_forward(c, x.data(), wt.data(), bias.data(), expected.data());
  for (int64_t i = 0; i < ny; ++i) ASSERT_NEAR(y[i], expected[i], 1e-4f) << "output " << i;

  // A second call with other inputs reuses the cached primitives and still gives the right answer.
  const auto x2 = random_vector(x.size(), 13);
  conv.forward(s, c.batch, x2.data(), wt.data(), bias.data(), y.data());
  naive_conv_forward(c, x2.data(), wt.data(), bias.data(), expected.data());
  for (int64_t i = 0; i < ny; ++i) ASSERT_NEAR(y[i], expected[i], 1e-4f) << "output " << i;
}

TEST_P(KernelConv, BackwardMatchesDirectAdjoint) {
  const ConvCase c = GetParam();
  const auto s = to_shape(c);
  const int64_t nx = c.batch * c.ic * c.h * c.w, nw = c.oc * c.ic * c.k * c.k;
  const int64_t ny = c.batch * c.oc * s.out_height() * s.out_width();
  const auto x = random_vector(nx, 20), wt = random_vector(nw, 21), dy = random_vector(ny, 22);
  std::vector<float> dx(nx, -99.0f), ex(nx), ew(nw), eb(c.oc);
  // Gradients accumulate into what is already there.
  std::vector<float> dw(nw, 0.5f), db(c.oc, -0.25f);
  mgt::kernels::Conv2d conv;
  conv.backward_data(s, c.batch, dy.data(), wt.data(), dx.data());
  conv.backward_weights(s, c.batch, x.data(), dy.data(), dw.data(), db.data());
  naive_conv_backward(c, x.data(), wt.data(), dy.data(), ex.data(), ew.data(), eb.data());
  for (int64_t i = 0; i < nx; ++i) ASSERT_NEAR(dx[i], ex[i], 1e-4f) << "dx " << i;
  for (int64_t i = 0; i < nw; ++i) ASSERT_NEAR(dw[i], ew[i] + 0.5f, 1e-3f) << "dw " << i;
  for (int64_t i = 0; i < c.oc; ++i) ASSERT_NEAR(db[i], eb[i] - 0.25f, 1e-3f) << "db " << i;
}

INSTANTIATE_TEST_SUITE_P(Shapes, KernelConv,
                         ::testing::Values(ConvCase{2, 3, 4, 7, 6, 3, 1, 1}, ConvCase{3, 2, 5, 9, 8, 3, 2, 1},
                                           ConvCase{1, 1, 8, 28, 28, 5, 1, 2}, ConvCase{2, 4, 3, 6, 6, 2, 2, 0},
                                           ConvCase{2, 16, 32, 12, 12, 3, 1, 0}),
                         [](const ::testing::TestParamInfo<ConvCase>& info) {
                           const ConvCase& c = info.param;
                           return "b" + std::to_string(c.batch) + "_ic" + std::to_string(c.ic) + "_oc" +
                                  std::to_string(c.oc) + "_" + std::to_string(c.h) + "x" + std::to_string(c.w) + "_k" +
                                  std::to_string(c.k) + "_s" + std::to_string(c.stride) + "_p" + std::to_string(c.pad);
                         });

TEST(KernelConv, BatchSizeChangeRecreatesPrimitives) {
  const ConvCase big{4, 2, 3, 5, 5, 3, 1, 1}, small{1, 2, 3, 5, 5, 3, 1, 1};
  const auto s = to_shape(big);
  const auto x = random_vector(4 * 2 * 25, 30), wt = random_vector(3 * 2 * 9, 31);
  mgt::kernels::Conv2d conv;
  std::vector<float> y(4 * 3 * 25), expected(4 * 3 * 25);
  for (const ConvCase& c : {big, small, big}) {
    conv.forward(s, c.batch, x.data(), wt.data(), nullptr, y.data());
    naive_conv_forward(c, x.data(), wt.data(), nullptr, expected.data());
    for (int64_t i = 0; i < c.batch * 3 * 25; ++i) ASSERT_NEAR(y[i], expected[i], 1e-4f);
  }
}

// A training-like sequence with enough channels for oneDNN's blocked layouts, where the blocked
// copies of x and dy are shared between passes: every step (new data in the same buffers) must
// still match the reference, and a backward over another input must not reuse forward's copy.
TEST(KernelConv, TrainingSequenceReusesNothingStale) {
  const ConvCase c{4, 16, 32, 8, 8, 3, 1, 1};
  const auto s = to_shape(c);
  const int64_t nx = c.batch * c.ic * c.h * c.w, nw = c.oc * c.ic * c.k * c.k;
  const int64_t ny = c.batch * c.oc * c.h * c.w;
  std::vector<float> x(nx), dy(ny), y(ny), dx(nx), dw(nw), db(c.oc), ey(ny), ex(nx), ew(nw), eb(c.oc);
  const auto wt = random_vector(nw, 40), bias = random_vector(c.oc, 41);
  mgt::kernels::Conv2d conv;
  for (unsigned step = 0; step < 3; ++step) {
    x = random_vector(nx, 50 + step);
    dy = random_vector(ny, 60 + step);
    std::fill(dw.begin(), dw.end(), 0.0f);
    std::fill(db.begin(), db.end(), 0.0f);
    conv.forward(s, c.batch, x.data(), wt.data(), bias.data(), y.data());
    conv.backward_weights(s, c.batch, x.data(), dy.data(), dw.data(), db.data());
    conv.backward_data(s, c.batch, dy.data(), wt.data(), dx.data());
    naive_conv_forward(c, x.data(), wt.data(), bias.data(), ey.data());
    naive_conv_backward(c, x.data(), wt.data(), dy.data(), ex.data(), ew.data(), eb.data());
    for (int64_t i = 0; i < ny; ++i) ASSERT_NEAR(y[i], ey[i], 1e-3f) << "step " << step;
    for (int64_t i = 0; i < nx; ++i) ASSERT_NEAR(dx[i], ex[i], 1e-3f) << "step " << step;
    for (int64_t i = 0; i < nw; ++i) ASSERT_NEAR(dw[i], ew[i], 1e-3f) << "step " << step;
    for (int64_t i = 0; i < c.oc; ++i) ASSERT_NEAR(db[i], eb[i], 1e-3f) << "step " << step;
  }
  // Backward over a different input than the last forward, and with another dy.
  const auto x2 = random_vector(nx, 70), dy2 = random_vector(ny, 71);
  std::fill(dw.begin(), dw.end(), 0.0f);
  std::fill(db.begin(), db.end(), 0.0f);
  conv.backward_data(s, c.batch, dy2.data(), wt.data(), dx.data());
  conv.backward_weights(s, c.batch, x2.data(), dy2.data(), dw.data(), db.data());
  naive_conv_backward(c, x2.data(), wt.data(), dy2.data(), ex.data(), ew.data(), eb.data());
  for (int64_t i = 0; i < nx; ++i) ASSERT_NEAR(dx[i], ex[i], 1e-3f);
  for (int64_t i = 0; i < nw; ++i) ASSERT_NEAR(dw[i], ew[i], 1e-3f);
}

// Convolutions share the blocked copies of y, dy and dx and their scratchpads (one workspace per
// thread). A layer's blocked dy is reused between its two backward passes only when no other
// convolution ran in between: here another one does, with another dy of the same layout.
TEST(KernelConv, InterleavedLayersReuseNoOtherLayersBlockedCopy) {
  const ConvCase c{4, 16, 32, 8, 8, 3, 1, 1};
  const auto s = to_shape(c);
  const int64_t nx = c.batch * c.ic * c.h * c.w, nw = c.oc * c.ic * c.k * c.k;
  const int64_t ny = c.batch * c.oc * c.h * c.w;
  const auto wt = random_vector(nw, 80), bias = random_vector(c.oc, 81);
  const auto xa = random_vector(nx, 82), xb = random_vector(nx, 83);
  const auto dya = random_vector(ny, 84), dyb = random_vector(ny, 85);
  mgt::kernels::Conv2d a, b;
  std::vector<float> y(ny), dw(nw), db(c.oc), dxa(nx), dxb(nx), ex(nx), ew(nw), eb(c.oc);
  a.forward(s, c.batch, xa.data(), wt.data(), bias.data(), y.data());
  b.forward(s, c.batch, xb.data(), wt.data(), bias.data(), y.data());
  b.backward_weights(s, c.batch, xb.data(), dyb.data(), dw.data(), db.data(), false);
  a.backward_weights(s, c.batch, xa.data(), dya.data(), dw.data(), db.data(), false);
  b.backward_data(s, c.batch, dyb.data(), wt.data(), dxb.data());
  a.backward_data(s, c.batch, dya.data(), wt.data(), dxa.data());
  naive_conv_backward(c, xa.data(), wt.data(), dya.data(), ex.data(), ew.data(), eb.data());
  for (int64_t i = 0; i < nx; ++i) ASSERT_NEAR(dxa[i], ex[i], 1e-3f) << "first layer's dx " << i;
  naive_conv_backward(c, xb.data(), wt.data(), dyb.data(), ex.data(), ew.data(), eb.data());
  for (int64_t i = 0; i < nx; ++i) ASSERT_NEAR(dxb[i], ex[i], 1e-3f) << "second layer's dx " << i;
}

// ---------------------------------------------------------------------------------------------

TEST(KernelPool, MaxPoolPicksWindowMaximum) {
  // One 4x4 plane, 2x2 windows.
  const std::vector<float> x = {1,  5,  2, 0,  //
                                3,  4,  9, 8,  //
                                -1, -2, 0, 0,  //
                                -3, -4, 7, 6};
  std::vector<float> y(4);
  std::vector<int32_t> arg(4);
  mgt::kernels::max_pool2d_forward(x.data(), y.data(), arg.data(), 1, 4, 4, 2, 2);
  EXPECT_EQ(y, (std::vector<float>{5, 9, -1, 7}));
  EXPECT_EQ(arg, (std::vector<int32_t>{1, 6, 8, 14}));
  // General path (3x3 window, stride 1) agrees with a brute-force maximum.
  std::vector<float> y3(4);
  std::vector<int32_t> a3(4);
  mgt::kernels::max_pool2d_forward(x.data(), y3.data(), a3.data(), 1, 4, 4, 3, 1);
  EXPECT_EQ(y3, (std::vector<float>{9, 9, 9, 9}));
}

TEST(KernelSoftmax, LossOfUniformLogitsIsLogClasses) {
  const std::vector<float> logits(3 * 4, 2.0f);
  const std::vector<int32_t> labels = {0, 1, 3};
  std::vector<float> grad(12);
  const double loss = mgt::kernels::softmax_cross_entropy(logits.data(), labels.data(), grad.data(), 3, 4, 1.0f);
  EXPECT_NEAR(loss, 3 * std::log(4.0), 1e-6);
  EXPECT_NEAR(grad[0], 0.25f - 1.0f, 1e-6f);
  EXPECT_NEAR(grad[1], 0.25f, 1e-6f);
}

// Label smoothing e = 0.1 over logits [1, 2, 3], label 0. By hand: log(e^1 + e^2 + e^3) =
// 3.4076059644, so -log p = [2.4076060, 1.4076060, 0.4076060]; PyTorch's
// CrossEntropyLoss(label_smoothing = e) is (1 - e) * 2.4076060 + e * mean(-log p) = 2.3076060;
// the gradient softmax - target with target [0.9 + 0.1/3, 0.1/3, 0.1/3] is
// [0.0900306 - 0.9333333, 0.2447285 - 0.0333333, 0.6652410 - 0.0333333].
TEST(KernelSoftmax, LabelSmoothingMatchesPyTorchsFormula) {
  const std::vector<float> logits = {1.0f, 2.0f, 3.0f};
  const std::vector<int32_t> labels = {0};
  const float e = 0.1f;
  std::vector<float> grad(3);
  const double loss = mgt::kernels::softmax_cross_entropy(logits.data(), labels.data(), grad.data(), 1, 3, 1.0f, e);
  EXPECT_NEAR(loss, 2.3076060, 1e-6);
  // The same from PyTorch's formula, computed here from the log-probabilities.
  const double lse = std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0));
  const double nll[3] = {lse - 1.0, lse - 2.0, lse - 3.0};
  const double ed = static_cast<double>(e);
  EXPECT_NEAR(loss, (1.0 - ed) * nll[0] + ed * (nll[0] + nll[1] + nll[2]) / 3.0, 1e-6);
  EXPECT_NEAR(grad[0], 0.0900306f - 0.9333333f, 1e-6f);
  EXPECT_NEAR(grad[1], 0.2447285f - 0.0333333f, 1e-6f);
  EXPECT_NEAR(grad[2], 0.6652410f - 0.0333333f, 1e-6f);
  // The gradient still sums to 0 over the classes, and grad_scale scales it.
  EXPECT_NEAR(grad[0] + grad[1] + grad[2], 0.0f, 1e-6f);
  std::vector<float> half(3);
  mgt::kernels::softmax_cross_entropy(logits.data(), labels.data(), half.data(), 1, 3, 0.5f, e);
  for (int c = 0; c < 3; ++c) EXPECT_NEAR(half[c], 0.5f * grad[c], 1e-7f);
  // Through the backend the step uses: the same loss added to the total, the same gradient.
  auto backend = mgt::kernels::make_cpu_backend();
  std::vector<float> step_grad(3);
  double loss_sum = 1.0;
  int64_t correct = 0;
  backend->softmax_xent(logits.data(), labels.data(), step_grad.data(), nullptr, 1, 3, 1.0f, e, &loss_sum, &correct);
  EXPECT_EQ(loss_sum, 1.0 + loss);
  EXPECT_EQ(step_grad, grad);
  EXPECT_EQ(correct, 0);
  // e = 0 is the plain loss: -log p[label].
  EXPECT_NEAR(mgt::kernels::softmax_cross_entropy(logits.data(), labels.data(), grad.data(), 1, 3, 1.0f, 0.0f), nll[0],
              1e-6);
}

// Batch norm's channel sums in double over 16 lanes (element i of a plane to lane i % 16, the
// lanes added at the end): 2^60 and -2^60 in one lane cancel there, and the ones in the other
// lanes all count. One chain over the plane in order would lose the ones added to 2^60.
TEST(KernelPointwise, ChannelSumsAddEachLaneApart) {
  const int64_t batch = 2, channels = 3, plane = 49;  // 3 whole groups of 16 and one more
  std::vector<float> a(batch * channels * plane, 1.0f), b(a.size()), center = {0.5f, -2.0f, 4.0f};
  a[plane + 0] = 0x1p60f;    // sample 0, channel 1: lane 0 ...
  a[plane + 16] = -0x1p60f;  // ... and lane 0 again
  for (size_t i = 0; i < b.size(); ++i) b[i] = center[(i / plane) % channels] + 1.0f;  // b - center = 1
  std::vector<float> sums(channels), products(channels), only(channels);
  mgt::kernels::channel_sums(a.data(), b.data(), center.data(), batch, channels, plane, sums.data(), products.data());
  mgt::kernels::channel_sums(a.data(), nullptr, nullptr, batch, channels, plane, only.data(), nullptr);
  const auto all = static_cast<float>(batch * plane);
  EXPECT_EQ(sums, (std::vector<float>{all, all - 2.0f, all}));
  EXPECT_EQ(products, sums);
  EXPECT_EQ(only, sums);
}

// [batch, channels, plane] NCHW as channel-blocked [batch, channels / block, plane, block].
std::vector<float> to_blocked(const std::vector<float>& x, int64_t batch, int64_t channels, int64_t plane,
                              int64_t block) {
  std::vector<float> y(x.size());
  for (int64_t n = 0; n < batch; ++n)
    for (int64_t c = 0; c < channels; ++c)
      for (int64_t p = 0; p < plane; ++p)
        y[static_cast<size_t>(((n * channels + c / block * block) * plane + p * block) + c % block)] =
            x[static_cast<size_t>((n * channels + c) * plane + p)];
  return y;
}

// Batch norm over channel-blocked activations: the per-channel sums agree with the NCHW ones to
// the rounding of their double sums (another order), the affine map is per element the same
// expression, so the same bits; a block that does not divide the channels is refused.
TEST(KernelPointwise, ChannelOpsOnBlockedActivationsMatchNchw) {
  const int64_t batch = 3, channels = 32, plane = 37;
  const auto n = static_cast<size_t>(batch * channels * plane);
  const auto a = random_vector(n, 70), b = random_vector(n, 71), center = random_vector(channels, 72);
  const auto scale_a = random_vector(channels, 73), scale_b = random_vector(channels, 74),
             shift = random_vector(channels, 75);
  std::vector<float> sums(channels), products(channels), y(n);
  mgt::kernels::channel_sums(a.data(), b.data(), center.data(), batch, channels, plane, sums.data(), products.data());
  mgt::kernels::channel_affine(a.data(), scale_a.data(), b.data(), scale_b.data(), shift.data(), y.data(), batch,
                               channels, plane);
  for (int64_t block : {8, 16}) {
    SCOPED_TRACE("block " + std::to_string(block));
    const auto ab = to_blocked(a, batch, channels, plane, block), bb = to_blocked(b, batch, channels, plane, block);
    std::vector<float> bsums(channels), bproducts(channels), only(channels), by(n);
    mgt::kernels::channel_sums(ab.data(), bb.data(), center.data(), batch, channels, plane, bsums.data(),
                               bproducts.data(), block);
    mgt::kernels::channel_sums(ab.data(), nullptr, nullptr, batch, channels, plane, only.data(), nullptr, block);
    for (int64_t c = 0; c < channels; ++c) {
      EXPECT_NEAR(bsums[c], sums[c], 1e-5f * (1.0f + std::abs(sums[c]))) << c;
      EXPECT_NEAR(bproducts[c], products[c], 1e-5f * (1.0f + std::abs(products[c]))) << c;
      EXPECT_EQ(only[c], bsums[c]) << c;
    }
    mgt::kernels::channel_affine(ab.data(), scale_a.data(), bb.data(), scale_b.data(), shift.data(), by.data(), batch,
                                 channels, plane, block);
    EXPECT_EQ(by, to_blocked(y, batch, channels, plane, block));
  }
  EXPECT_THROW(mgt::kernels::channel_sums(a.data(), nullptr, nullptr, batch, 24, plane, sums.data(), nullptr, 16),
               mgt::Error);
}

// Batch norm's squared deviations sum x (x - mean) with b = a: that path loads each element once,
// and gives the bits of the same sums over a copy of a, in every layout.
TEST(KernelPointwise, ChannelSumsOfATensorWithItselfMatchAcrossACopy) {
  const int64_t batch = 3, channels = 32, plane = 37;
  const auto a = random_vector(static_cast<size_t>(batch * channels * plane), 76), center = random_vector(channels, 77);
  const std::vector<float> copy = a;
  for (int64_t block : {1, 8, 16}) {
    SCOPED_TRACE("block " + std::to_string(block));
    std::vector<float> sums(channels), products(channels), copy_sums(channels), copy_products(channels);
    mgt::kernels::channel_sums(a.data(), a.data(), center.data(), batch, channels, plane, sums.data(), products.data(),
                               block);
    mgt::kernels::channel_sums(a.data(), copy.data(), center.data(), batch, channels, plane, copy_sums.data(),
                               copy_products.data(), block);
    EXPECT_EQ(sums, copy_sums);
    EXPECT_EQ(products, copy_products);
  }
}

// Max pooling over channel-blocked activations picks what the NCHW kernel picks, first maximum of
// a tie included, and sends the gradient to the same elements: the same bits in the other layout.
// Windows that tile the plane exactly (8x6 by 2x2) write dx without clearing it first, so dx
// starts as garbage.
TEST(KernelPool, MaxPoolOnBlockedActivationsMatchesNchw) {
  const int64_t batch = 2, channels = 16;
  for (auto [h, w, kernel, stride] : {std::array<int64_t, 4>{9, 7, 2, 2}, {8, 6, 2, 2}, {9, 7, 3, 2}, {9, 7, 3, 1}}) {
    SCOPED_TRACE(std::to_string(h) + "x" + std::to_string(w) + " kernel " + std::to_string(kernel) + " stride " +
                 std::to_string(stride));
    const int64_t oh = (h - kernel) / stride + 1, ow = (w - kernel) / stride + 1;
    auto x = random_vector(static_cast<size_t>(batch * channels * h * w), 80);
    for (size_t i = 0; i < x.size(); i += 5) x[i] = 0.25f;  // ties
    const auto dy = random_vector(static_cast<size_t>(batch * channels * oh * ow), 81);
    std::vector<float> y(dy.size()), dx(x.size());
    std::vector<int32_t> arg(dy.size());
    mgt::kernels::max_pool2d_forward(x.data(), y.data(), arg.data(), batch * channels, h, w, kernel, stride);
    mgt::kernels::max_pool2d_backward(dy.data(), arg.data(), dx.data(), batch * channels, h, w, kernel, stride);
    // Blocked to blocked, and each side NCHW with the other blocked.
    for (auto [in_block, out_block] : {std::pair<int64_t, int64_t>{8, 8}, {16, 16}, {16, 1}, {1, 16}, {8, 1}}) {
      SCOPED_TRACE("blocks " + std::to_string(in_block) + " -> " + std::to_string(out_block));
      const auto xb = to_blocked(x, batch, channels, h * w, in_block);
      const auto dyb = to_blocked(dy, batch, channels, oh * ow, out_block);
      std::vector<float> yb(y.size()), dxb(dx.size(), 7.0f);
      std::vector<int32_t> argb(arg.size());
      const int64_t groups = batch * channels / std::max(in_block, out_block);
      mgt::kernels::max_pool2d_forward_blocked(xb.data(), yb.data(), argb.data(), groups, h, w, kernel, stride,
                                               in_block, out_block);
      mgt::kernels::max_pool2d_backward_blocked(dyb.data(), argb.data(), dxb.data(), groups, h, w, kernel, stride,
                                                in_block, out_block);
      EXPECT_EQ(yb, to_blocked(y, batch, channels, oh * ow, out_block));
      EXPECT_EQ(dxb, to_blocked(dx, batch, channels, h * w, in_block));
    }
  }
}

// Element-wise binary ops, also written over one of their operands (ops.hpp allows y == a or b).
TEST(KernelPointwise, BinaryOpsInPlaceMatchOutOfPlace) {
  const auto a = random_vector(1001, 90), b = random_vector(1001, 91);
  for (auto op : {mgt::BinaryOp::add, mgt::BinaryOp::subtract, mgt::BinaryOp::multiply, mgt::BinaryOp::divide,
                  mgt::BinaryOp::maximum, mgt::BinaryOp::minimum}) {
    std::vector<float> y(a.size()), over_a = a, over_b = b;
    mgt::kernels::binary(op, a.data(), b.data(), y.data(), static_cast<int64_t>(y.size()));
    mgt::kernels::binary(op, over_a.data(), b.data(), over_a.data(), static_cast<int64_t>(y.size()));
    mgt::kernels::binary(op, a.data(), over_b.data(), over_b.data(), static_cast<int64_t>(y.size()));
    for (size_t i = 0; i < y.size(); ++i) ASSERT_EQ(y[i], mgt::kernels::apply_binary(op, a[i], b[i])) << i;
    EXPECT_EQ(over_a, y);
    EXPECT_EQ(over_b, y);
  }
}

// Clipping by global norm on the CPU backend: the norm is reported whether or not it clips; above
// the limit the gradient is scaled to it (max_norm / (norm + 1e-6)); at or under it, or with
// clipping off (0), or for a non-finite gradient, nothing changes.
TEST(KernelClip, ScalesToTheLimitOnlyAboveIt) {
  auto backend = mgt::kernels::make_cpu_backend();
  std::vector<float> g = {3.0f, 4.0f};
  double norm = -1;
  backend->clip_global_norm(g.data(), g.size(), 10.0f, &norm);
  EXPECT_EQ(norm, 5.0);
  EXPECT_EQ(g, (std::vector<float>{3.0f, 4.0f}));
  backend->clip_global_norm(g.data(), g.size(), 0.0f, &norm);
  EXPECT_EQ(norm, 5.0);
  EXPECT_EQ(g, (std::vector<float>{3.0f, 4.0f}));
  backend->clip_global_norm(g.data(), g.size(), 5.0f, &norm);  // at the limit: not clipped
  EXPECT_EQ(g, (std::vector<float>{3.0f, 4.0f}));
  backend->clip_global_norm(g.data(), g.size(), 1.0f, &norm);
  EXPECT_EQ(norm, 5.0);
  const float factor = static_cast<float>(1.0 / (5.0 + 1e-6));
  EXPECT_EQ(g, (std::vector<float>{3.0f * factor, 4.0f * factor}));
  EXPECT_NEAR(g[0], 0.6f, 1e-6f);
  EXPECT_NEAR(g[1], 0.8f, 1e-6f);

  // Over several chunks of the norm's sum: the norm is the plain one to rounding, and after
  // clipping the gradient's norm is the limit.
  auto big = random_vector(5000, 3);
  double reference = 0;
  for (float v : big) reference += static_cast<double>(v) * v;
  reference = std::sqrt(reference);
  backend->clip_global_norm(big.data(), big.size(), 2.0f, &norm);
  EXPECT_NEAR(norm, reference, 1e-9 * reference);
  ASSERT_GT(norm, 2.0);
  double after = 0;
  backend->clip_global_norm(big.data(), big.size(), 0.0f, &after);
  EXPECT_NEAR(after, 2.0, 1e-5);

  // The order the norm is defined by (the GPU kernel's too): per chunk of kNormChunk, element i to
  // lane i % kNormLanes, each lane in order, the lanes in order; then the chunks in order. 3
  // chunks and a tail that ends mid-lane.
  const auto many = random_vector(3 * mgt::kernels::kNormChunk + 77, 4);
  double chunked = 0;
  for (size_t begin = 0; begin < many.size(); begin += mgt::kernels::kNormChunk) {
    double lanes[mgt::kernels::kNormLanes] = {};
    for (size_t i = begin; i < std::min(many.size(), begin + mgt::kernels::kNormChunk); ++i)
      lanes[(i - begin) % mgt::kernels::kNormLanes] += static_cast<double>(many[i]) * static_cast<double>(many[i]);
    double sum = 0;
    for (double lane : lanes) sum += lane;
    chunked += sum;
  }
  EXPECT_EQ(mgt::kernels::global_norm(many.data(), many.size()), std::sqrt(chunked));

  // A NaN gradient: its norm is NaN (the step skips or aborts on it), nothing is scaled.
  std::vector<float> bad = {1e3f, std::nanf("")};
  backend->clip_global_norm(bad.data(), bad.size(), 1.0f, &norm);
  EXPECT_TRUE(std::isnan(norm));
  EXPECT_EQ(bad[0], 1e3f);
}

// The deterministic weight gradient: the vector kernel gives the reference's bits exactly, for
// shapes with row and column tails; two half trees added give the whole tree (how ranks combine
// their subtrees); and the value is the plain sum up to rounding.
struct TreeCase {
  int64_t shards, rows, out, in;
};
void PrintTo(const TreeCase& c, std::ostream* os) {
  *os << c.shards << " shards x " << c.rows << " rows, " << c.out << 'x' << c.in;
}

class KernelTreeOuterProducts : public ::testing::TestWithParam<TreeCase> {};

TEST_P(KernelTreeOuterProducts, BitwiseEqualToReferenceAndSplitsLikeRanks) {
  const TreeCase c = GetParam();
  const auto dy = random_vector(static_cast<size_t>(c.shards * c.rows * c.out), 11);
  const auto x = random_vector(static_cast<size_t>(c.shards * c.rows * c.in), 12);
  const auto n = static_cast<size_t>(c.out * c.in);
  std::vector<float> fast(n, -7.0f), reference(n, 7.0f);
  mgt::kernels::tree_outer_products(dy.data(), x.data(), c.shards, c.rows, c.out, c.in, fast.data());
  mgt::kernels::tree_outer_products_reference(dy.data(), x.data(), c.shards, c.rows, c.out, c.in, reference.data());
  for (size_t k = 0; k < n; ++k) ASSERT_EQ(fast[k], reference[k]) << "output " << k;

  if (c.shards >= 2) {
    const int64_t half = c.shards / 2;
    std::vector<float> left(n), right(n);
    mgt::kernels::tree_outer_products(dy.data(), x.data(), half, c.rows, c.out, c.in, left.data());
    mgt::kernels::tree_outer_products(dy.data() + half * c.rows * c.out, x.data() + half * c.rows * c.in, half, c.rows,
                                      c.out, c.in, right.data());
    for (size_t k = 0; k < n; ++k) ASSERT_EQ(left[k] + right[k], fast[k]) << "output " << k;
  }

  for (int64_t o = 0; o < c.out; ++o)
    for (int64_t i = 0; i < c.in; ++i) {
      double sum = 0;
      for (int64_t r = 0; r < c.shards * c.rows; ++r) sum += static_cast<double>(dy[r * c.out + o]) * x[r * c.in + i];
      ASSERT_NEAR(fast[o * c.in + i], sum, 1e-4 * (1.0 + std::fabs(sum))) << o << ", " << i;
    }
}

// tree_outer_products takes the widest vector form the CPU has; each form on its own (AVX-512,
// AVX2 with FMA) gives the reference's bits, so a rank on either kind of CPU sums alike.
TEST_P(KernelTreeOuterProducts, EveryVectorFormBitwiseEqualToReference) {
  const TreeCase c = GetParam();
  const auto dy = random_vector(static_cast<size_t>(c.shards * c.rows * c.out), 14);
  const auto x = random_vector(static_cast<size_t>(c.shards * c.rows * c.in), 15);
  const auto n = static_cast<size_t>(c.out * c.in);
  std::vector<float> reference(n, 7.0f);
  mgt::kernels::tree_outer_products_reference(dy.data(), x.data(), c.shards, c.rows, c.out, c.in, reference.data());
  using Form = bool (*)(const float*, const float*, int64_t, int64_t, int64_t, int64_t, float*);
  const std::pair<const char*, Form> forms[] = {{"avx512", mgt::kernels::tree_outer_products_avx512},
                                                {"avx2", mgt::kernels::tree_outer_products_avx2}};
  int ran = 0;
  for (const auto& [name, form] : forms) {
    std::vector<float> out(n, -7.0f);
    if (!form(dy.data(), x.data(), c.shards, c.rows, c.out, c.in, out.data())) continue;
    ++ran;
    for (size_t k = 0; k < n; ++k) ASSERT_EQ(out[k], reference[k]) << name << ", output " << k;
  }
  if (ran == 0) GTEST_SKIP() << "this CPU has neither AVX-512 nor AVX2 with FMA";
}

TEST_P(KernelTreeOuterProducts, ColumnSumsBitwiseEqualToPlainTreeAndSplitLikeRanks) {
  const TreeCase c = GetParam();
  const auto dy = random_vector(static_cast<size_t>(c.shards * c.rows * c.out), 13);
  std::vector<float> tree(static_cast<size_t>(c.out), -1.0f);
  mgt::kernels::tree_column_sums(dy.data(), c.shards, c.rows, c.out, tree.data());
  // The balanced tree written out recursively, each leaf summed over its rows from +0.
  std::function<float(int64_t, int64_t, int64_t)> subtree = [&](int64_t first, int64_t count, int64_t col) {
    if (count == 1) {
      float sum = 0.0f;
      for (int64_t r = 0; r < c.rows; ++r) sum += dy[(first * c.rows + r) * c.out + col];
      return sum;
    }
    return subtree(first, count / 2, col) + subtree(first + count / 2, count / 2, col);
  };
  for (int64_t col = 0; col < c.out; ++col) ASSERT_EQ(tree[col], subtree(0, c.shards, col)) << col;
}

INSTANTIATE_TEST_SUITE_P(Shapes, KernelTreeOuterProducts,
                         ::testing::Values(TreeCase{1, 16, 4, 32}, TreeCase{4, 16, 256, 784}, TreeCase{8, 3, 10, 17},
                                           TreeCase{2, 5, 7, 48}, TreeCase{16, 2, 5, 33}, TreeCase{4, 0, 3, 20},
                                           // Passes of many rows, summed in leaves a chunk at a time:
                                           // chunks with a tail, row and column tails of both forms.
                                           TreeCase{4, 300, 19, 70}, TreeCase{2, 700, 9, 50}, TreeCase{1, 1030, 8, 48},
                                           // Wider than a panel of 512 output rows, with a row tail.
                                           TreeCase{2, 300, 530, 20}));

// The check deterministic mode makes before batching micro-shards agrees with comparing the rows
// of one batched forward GEMM with those of per-shard ones, done here directly.
TEST(KernelGemm, RowsIndependentCheckAgreesWithDirectComparison) {
  const int64_t shard_rows = 16, shards = 4, out = 37, in = 785, rows = shard_rows * shards;
  const auto x = random_vector(static_cast<size_t>(rows * in), 21);
  const auto w = random_vector(static_cast<size_t>(out * in), 22);
  std::vector<float> batched(static_cast<size_t>(rows * out), 0.5f), one_by_one(batched);
  mgt::kernels::sgemm(false, true, rows, out, in, 1.0f, x.data(), in, w.data(), in, 1.0f, batched.data(), out);
  for (int64_t s = 0; s < shards; ++s)
    mgt::kernels::sgemm(false, true, shard_rows, out, in, 1.0f, x.data() + s * shard_rows * in, in, w.data(), in, 1.0f,
                        one_by_one.data() + s * shard_rows * out, out);
  const bool same = batched == one_by_one;
  const bool claimed = mgt::kernels::sgemm_rows_independent(shard_rows, shards, out, in);
  // The check also compares the input gradient, so it may only be stricter.
  if (claimed) EXPECT_TRUE(same) << "the check says batching is safe, the direct comparison differs";
  std::printf("oneDNN rows independent for %lld x %lld rows, %lld x %lld: %s\n", static_cast<long long>(shards),
              static_cast<long long>(shard_rows), static_cast<long long>(out), static_cast<long long>(in),
              claimed ? "yes" : "no");
  // Asked again, the answer comes from the cache and does not change.
  EXPECT_EQ(mgt::kernels::sgemm_rows_independent(shard_rows, shards, out, in), claimed);
}

// ctest runs deterministic mode's checks again with oneDNN held to its AVX2 kernels
// (DNNL_MAX_CPU_ISA=AVX2, read once, at the library's first dispatch): on an AVX-512 machine they
// prove something only if the library honours the cap.
TEST(KernelGemm, OneDnnHonoursAnAvx2CapFromTheEnvironment) {
  const char* cap = std::getenv("DNNL_MAX_CPU_ISA");
  if (!cap || std::string(cap) != "AVX2") GTEST_SKIP() << "run without DNNL_MAX_CPU_ISA=AVX2";
  const dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
  EXPECT_EQ(static_cast<int>(isa) & ~static_cast<int>(dnnl_cpu_isa_avx2), 0)
      << "oneDNN runs ISA 0x" << std::hex << static_cast<int>(isa) << " under DNNL_MAX_CPU_ISA=AVX2";
}

// bf16 as the GPU rounds it: to nearest, ties to even; exact values survive; NaN stays NaN.
TEST(Bf16, RoundsToNearestTiesToEven) {
  using mgt::kernels::from_bf16;
  using mgt::kernels::to_bf16;
  EXPECT_EQ(to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(to_bf16(1.00390625f), 0x3f80);    // 1 + 2^-8: halfway, down to even
  EXPECT_EQ(to_bf16(1.01171875f), 0x3f82);    // 1 + 3 * 2^-8: halfway, up to even
  EXPECT_EQ(to_bf16(1.0048828125f), 0x3f81);  // just above halfway: up
  EXPECT_EQ(to_bf16(-2.0f), 0xc000);
  EXPECT_EQ(to_bf16(3.4e38f), 0x7f80);  // past the largest bf16 (3.39e38) and halfway on: infinity
  EXPECT_TRUE(std::isnan(from_bf16(to_bf16(std::nanf("")))));
  for (const float v : {0.0f, -0.0f, 0.5f, -1.5f, 256.0f, 0.09375f}) EXPECT_EQ(from_bf16(to_bf16(v)), v) << v;
}

// The bf16 GEMM is the FP32 GEMM of the widened operands.
TEST(Bf16, GemmIsTheFp32GemmOfTheRoundedOperands) {
  std::mt19937 gen(5);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  const int64_t m = 7, n = 5, k = 9;
  std::vector<float> a(m * k), b(k * n);
  for (auto& v : a) v = dist(gen);
  for (auto& v : b) v = dist(gen);
  std::vector<uint16_t> a16(a.size()), b16(b.size());
  mgt::kernels::to_bf16(a.data(), a16.data(), a.size());
  mgt::kernels::to_bf16(b.data(), b16.data(), b.size());
  std::vector<float> rounded_a(a.size()), rounded_b(b.size());
  for (size_t i = 0; i < a.size(); ++i) rounded_a[i] = mgt::kernels::from_bf16(a16[i]);
  for (size_t i = 0; i < b.size(); ++i) rounded_b[i] = mgt::kernels::from_bf16(b16[i]);
  std::vector<float> expected(m * n, 0.5f), actual(m * n, 0.5f);
  mgt::kernels::sgemm(false, false, m, n, k, 1.0f, rounded_a.data(), k, rounded_b.data(), n, 1.0f, expected.data(), n);
  mgt::kernels::gemm_bf16(false, false, m, n, k, 1.0f, a16.data(), k, b16.data(), n, 1.0f, actual.data(), n);
  EXPECT_EQ(actual, expected);
  // And rounding did something: the unrounded product differs.
  std::vector<float> unrounded(m * n, 0.5f);
  mgt::kernels::sgemm(false, false, m, n, k, 1.0f, a.data(), k, b.data(), n, 1.0f, unrounded.data(), n);
  EXPECT_NE(unrounded, expected);
}

// The CPU backend's bf16 convolution: the FP32 convolution of the rounded operands, its results
// rounded where the GPU's are bf16 tensors (y before the FP32 bias, dx, the weight gradient before
// it is added in FP32), the bias gradient from the FP32 dy; and not the FP32 convolution itself.
TEST(Bf16, ConvolutionIsTheFp32ConvolutionOfRoundedOperandsWithRoundedResults) {
  using mgt::kernels::from_bf16;
  using mgt::kernels::to_bf16;
  mgt::kernels::Conv2dShape s;
  s.in_channels = 3;
  s.out_channels = 4;
  s.kernel = 3;
  s.padding = 1;
  s.height = s.width = 6;
  const int64_t batch = 2, plane = s.out_height() * s.out_width();
  const auto n_in = static_cast<size_t>(batch * s.in_channels * s.height * s.width);
  const auto n_out = static_cast<size_t>(batch * s.out_channels * plane);
  const auto n_w = static_cast<size_t>(s.out_channels * s.in_channels * s.kernel * s.kernel);
  std::mt19937 gen(11);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  const auto draw = [&](size_t n) {
    std::vector<float> v(n);
    for (auto& e : v) e = dist(gen);
    return v;
  };
  const auto rounded = [](std::vector<float> v) {
    mgt::kernels::round_to_bf16(v.data(), v.data(), v.size());
    return v;
  };
  const auto x = draw(n_in), w = draw(n_w), bias = draw(static_cast<size_t>(s.out_channels)), dy = draw(n_out);
  const auto dw0 = draw(n_w), db0 = draw(static_cast<size_t>(s.out_channels));

  auto backend = mgt::kernels::make_cpu_backend();
  auto conv = backend->make_conv(s, batch, /*bf16=*/true);
  mgt::kernels::Conv2d reference;

  std::vector<float> y(n_out), expected_y(n_out);
  conv->forward(x.data(), w.data(), bias.data(), y.data());
  const auto xr = rounded(x), wr = rounded(w), dyr = rounded(dy);
  reference.forward(s, batch, xr.data(), wr.data(), nullptr, expected_y.data());
  expected_y = rounded(expected_y);
  for (size_t i = 0; i < n_out; ++i) expected_y[i] += bias[(i / static_cast<size_t>(plane)) % s.out_channels];
  EXPECT_EQ(y, expected_y);
  std::vector<float> fp32_y(n_out);
  reference.forward(s, batch, x.data(), w.data(), bias.data(), fp32_y.data());
  EXPECT_NE(y, fp32_y) << "bf16 changed nothing";

  std::vector<float> dx(n_in), expected_dx(n_in);
  conv->backward_data(dy.data(), w.data(), dx.data());
  reference.backward_data(s, batch, dyr.data(), wr.data(), expected_dx.data());
  EXPECT_EQ(dx, rounded(expected_dx));

  std::vector<float> dw = dw0, db = db0, step_dw(n_w), expected_db = db0;
  conv->backward_weights(x.data(), dy.data(), dw.data(), db.data());
  reference.backward_weights(s, batch, xr.data(), dyr.data(), step_dw.data(), nullptr, /*accumulate=*/false);
  step_dw = rounded(step_dw);
  for (size_t i = 0; i < n_w; ++i) EXPECT_EQ(dw[i], dw0[i] + step_dw[i]) << "weight gradient " << i;
  for (int64_t c = 0; c < s.out_channels; ++c) {
    float sum = 0.0f;
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t p = 0; p < plane; ++p) sum += dy[static_cast<size_t>((b * s.out_channels + c) * plane + p)];
    EXPECT_EQ(db[c], db0[c] + sum) << "bias gradient " << c;
  }
}

// stream_copy: ordinary stores before the first line boundary and after the last, streamed lines
// between; every start within a line and lengths across none, one and several lines copy exactly
// and write nothing outside. evict_lines leaves the values as they are.
TEST(CacheLines, StreamCopyCopiesExactlyWhereverItStartsAndEnds) {
  std::vector<float> source(100);
  for (size_t i = 0; i < source.size(); ++i) source[i] = static_cast<float>(i) + 0.5f;
  for (size_t offset = 0; offset < 16; ++offset)
    for (size_t n : {0, 1, 5, 15, 16, 17, 31, 33, 64, 70}) {
      alignas(64) float target[128];
      std::fill(std::begin(target), std::end(target), -1.0f);
      mgt::kernels::stream_copy(target + offset, source.data(), n);
      mgt::kernels::stream_fence();
      for (size_t i = 0; i < 128; ++i) {
        const float expected = i >= offset && i < offset + n ? source[i - offset] : -1.0f;
        ASSERT_EQ(target[i], expected) << "offset " << offset << ", " << n << " floats, at " << i;
      }
      mgt::kernels::evict_lines(target, sizeof target);
      for (size_t i = 0; i < n; ++i) ASSERT_EQ(target[offset + i], source[i]) << "after evict_lines";
    }
}

// sum_terms adds each element's terms in order, as a scalar loop does (the shared-memory
// all-reduce's bits), whatever the count, the length (runs of 64 and a tail) and whichever term
// the output is. The magnitudes are spread so that another order would give other bits.
TEST(Pointwise, SumTermsAddsInOrderIntoAnyOfItsTerms) {
  std::mt19937 gen(7);
  std::normal_distribution<float> mantissa;
  std::uniform_int_distribution<int> exponent(-12, 12);
  for (size_t count : {1, 2, 3, 5})
    for (size_t n : {0, 1, 63, 64, 65, 200}) {
      std::vector<std::vector<float>> terms(count, std::vector<float>(n));
      for (auto& term : terms)
        for (float& x : term) x = std::ldexp(mantissa(gen), exponent(gen));
      std::vector<float> expected(n), reversed(n);
      for (size_t i = 0; i < n; ++i) {
        expected[i] = terms[0][i];
        for (size_t t = 1; t < count; ++t) expected[i] += terms[t][i];
        reversed[i] = terms[count - 1][i];
        for (size_t t = count - 1; t-- > 0;) reversed[i] += terms[t][i];
      }
      if (count >= 3 && n >= 64) ASSERT_NE(expected, reversed) << "the data cannot tell the order";
      // Into a buffer of its own, then in place of each term in turn.
      for (size_t into = 0; into <= count; ++into) {
        std::vector<std::vector<float>> copy = terms;
        std::vector<const float*> pointers;
        for (const auto& term : copy) pointers.push_back(term.data());
        std::vector<float> separate(n, -1.0f);
        float* out = into == count ? separate.data() : copy[into].data();
        mgt::kernels::sum_terms(pointers.data(), count, out, n);
        for (size_t i = 0; i < n; ++i)
          ASSERT_EQ(std::memcmp(&out[i], &expected[i], sizeof(float)), 0)
              << count << " terms of " << n << ", out = " << (into == count ? "a buffer" : "a term") << ", at " << i
              << ": " << out[i] << " against " << expected[i];
      }
    }
}

}  // namespace
