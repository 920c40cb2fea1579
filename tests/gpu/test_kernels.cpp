// GPU kernels against the CPU kernels (kernels/cpu) on random inputs: ReLU forward and backward,
// softmax cross-entropy (loss and gradient), cuBLAS sgemm in every transpose combination, and
// bf16 rounding and GEMM.
// Skipped without a device.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "gpu_test.hpp"
#include "kernels/cpu/bf16.hpp"
#include "kernels/cpu/gemm.hpp"
#include "kernels/cpu/pointwise.hpp"
#include "kernels/cpu/softmax.hpp"
#include "kernels/cuda/device_buffer.hpp"
#include "kernels/cuda/gemm.hpp"
#include "kernels/cuda/layer_ops.hpp"
#include "kernels/cuda/pointwise.hpp"
#include "kernels/cuda/softmax.hpp"
#include "mgtrain/error.hpp"

namespace {

using mgt::cuda::DeviceBuffer;
using mgt::test::expect_close;
using mgt::test::random_floats;

class GpuKernels : public mgt::test::GpuTest {};

TEST_F(GpuKernels, DeviceBufferRoundTrip) {
  const auto host = random_floats(1000, 1);
  DeviceBuffer<float> a(host);
  DeviceBuffer<float> b(std::move(a));
  EXPECT_EQ(a.data(), nullptr);
  EXPECT_EQ(b.to_host(), host);
  b.fill_zero();
  EXPECT_EQ(b.to_host(), std::vector<float>(1000, 0.0f));
}

// A device allocation that cannot fit is OutOfMemoryError (the GPU path may then halve the
// micro-batch), naming the size and the device's memory; the next allocation still works.
TEST_F(GpuKernels, AllocationBeyondTheDeviceIsOutOfMemory) {
  const size_t too_much = size_t{1} << 50;  // 1 PiB
  try {
    DeviceBuffer<char> huge(too_much);
    ADD_FAILURE() << "a 1 PiB allocation succeeded";
  } catch (const mgt::OutOfMemoryError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("cudaMalloc of 1073741824.0 MB failed with"), std::string::npos) << what;
    EXPECT_NE(what.find("MB free of"), std::string::npos) << what;
  }
  DeviceBuffer<float> fine(1024);
  fine.fill_zero();
  EXPECT_EQ(fine.to_host(), std::vector<float>(1024, 0.0f));
}

TEST_F(GpuKernels, ReluMatchesCpu) {
  // Sizes around the block size and the grid cap (65535 blocks of 256), with exact zeros.
  for (const int64_t n : {int64_t{1}, int64_t{255}, int64_t{1000}, int64_t{65535} * 256 + 7}) {
    auto x = random_floats(n, 2);
    for (int64_t i = 0; i < n; i += 17) x[i] = 0.0f;
    const auto dy = random_floats(n, 3);
    std::vector<float> y(n), dx(n);
    mgt::kernels::relu_forward(x.data(), y.data(), n);
    mgt::kernels::relu_backward(y.data(), dy.data(), dx.data(), n);

    DeviceBuffer<float> d_x(x), d_dy(dy), d_y(n), d_dx(n);
    mgt::cuda::relu_forward(d_x.data(), d_y.data(), n);
    mgt::cuda::relu_backward(d_y.data(), d_dy.data(), d_dx.data(), n);
    mgt::cuda::synchronize();
    // Selection only: the results must be identical.
    EXPECT_EQ(d_y.to_host(), y) << "relu forward, n = " << n;
    EXPECT_EQ(d_dx.to_host(), dx) << "relu backward, n = " << n;
  }
}

TEST_F(GpuKernels, SoftmaxCrossEntropyMatchesCpu) {
  struct Shape {
    int64_t rows, classes;
  };
  for (const Shape s : {Shape{1, 1}, Shape{7, 10}, Shape{128, 10}, Shape{33, 1000}, Shape{5, 4097}}) {
    const auto logits = random_floats(s.rows * s.classes, 4, -8.0f, 8.0f);
    std::vector<int32_t> labels(s.rows);
    for (int64_t r = 0; r < s.rows; ++r) labels[r] = static_cast<int32_t>((r * 7919) % s.classes);
    const float grad_scale = 1.0f / static_cast<float>(s.rows);
    std::vector<float> grad(logits.size());
    const double loss =
        mgt::kernels::softmax_cross_entropy(logits.data(), labels.data(), grad.data(), s.rows, s.classes, grad_scale);

    DeviceBuffer<float> d_logits(logits), d_grad(logits.size());
    DeviceBuffer<int32_t> d_labels(labels);
    DeviceBuffer<double> d_row_loss(s.rows);
    mgt::cuda::softmax_cross_entropy(d_logits.data(), d_labels.data(), d_grad.data(), d_row_loss.data(), s.rows,
                                     s.classes, grad_scale);
    const double gpu_loss = mgt::cuda::sum_row_losses(d_row_loss.data(), s.rows);
    const std::string what = std::to_string(s.rows) + "x" + std::to_string(s.classes);
    EXPECT_NEAR(gpu_loss, loss, 1e-5 * std::max(1.0, std::fabs(loss))) << what << " loss";
    expect_close(d_grad.to_host(), grad, 1e-5, what + " gradient");
  }
}

TEST_F(GpuKernels, SoftmaxCrossEntropyBadLabelGivesNaNNotACrash) {
  const int64_t rows = 2, classes = 3;
  DeviceBuffer<float> d_logits(random_floats(rows * classes, 5)), d_grad(rows * classes);
  DeviceBuffer<int32_t> d_labels(std::vector<int32_t>{1, 3});
  DeviceBuffer<double> d_row_loss(rows);
  mgt::cuda::softmax_cross_entropy(d_logits.data(), d_labels.data(), d_grad.data(), d_row_loss.data(), rows, classes,
                                   1.0f);
  const auto row_loss = d_row_loss.to_host();
  EXPECT_TRUE(std::isfinite(row_loss[0]));
  EXPECT_TRUE(std::isnan(row_loss[1]));
}

TEST_F(GpuKernels, SgemmMatchesCpuInEveryLayout) {
  mgt::cuda::BlasHandle blas;
  struct Case {
    int64_t m, n, k;
  };
  for (const Case c : {Case{1, 1, 1}, Case{64, 10, 784}, Case{128, 256, 33}, Case{37, 300, 129}}) {
    for (const bool ta : {false, true}) {
      for (const bool tb : {false, true}) {
        // Padded leading dimensions catch a row/column mix-up that square, tight ones hide.
        const int64_t lda = (ta ? c.m : c.k) + 3, ldb = (tb ? c.k : c.n) + 5, ldc = c.n + 2;
        const auto a = random_floats((ta ? c.k : c.m) * lda, 6);
        const auto b = random_floats((tb ? c.n : c.k) * ldb, 7);
        auto expected = random_floats(c.m * ldc, 8);
        DeviceBuffer<float> d_a(a), d_b(b), d_c(expected);
        const float alpha = 0.75f, beta = -0.5f;
        mgt::kernels::sgemm(ta, tb, c.m, c.n, c.k, alpha, a.data(), lda, b.data(), ldb, beta, expected.data(), ldc);
        mgt::cuda::sgemm(blas, ta, tb, c.m, c.n, c.k, alpha, d_a.data(), lda, d_b.data(), ldb, beta, d_c.data(), ldc);
        expect_close(d_c.to_host(), expected, 1e-4,
                     "sgemm " + std::string(ta ? "T" : "N") + (tb ? "T" : "N") + " m=" + std::to_string(c.m) +
                         " n=" + std::to_string(c.n) + " k=" + std::to_string(c.k));
      }
    }
  }
}

// bf16 mixed precision: the GPU's rounding is the CPU's bit for bit, and the tensor-core GEMM of
// bf16 operands is the CPU's exact widening plus an FP32 GEMM, up to the order of the sums.
TEST_F(GpuKernels, Bf16RoundingMatchesCpu) {
  auto x = random_floats(100003, 12, -3.0f, 3.0f);
  x[0] = 0.0f;
  x[1] = -0.0f;
  x[2] = 1e-40f;       // subnormal
  x[3] = 3.4e38f;      // rounds to infinity
  x[4] = 1.00390625f;  // 1 + 2^-8: a tie, to even
  x[5] = 1.01171875f;  // 1 + 3 * 2^-8: a tie, to even (up)
  std::vector<uint16_t> expected(x.size());
  mgt::kernels::to_bf16(x.data(), expected.data(), x.size());
  DeviceBuffer<float> d_x(x);
  DeviceBuffer<uint16_t> d_y(x.size());
  mgt::cuda::to_bf16(d_x.data(), d_y.data(), x.size());
  const auto actual = d_y.to_host();
  size_t differ = 0;
  for (size_t i = 0; i < x.size(); ++i)
    if (actual[i] != expected[i] && ++differ <= 5)
      ADD_FAILURE() << "element " << i << " (" << x[i] << "): GPU 0x" << std::hex << actual[i] << ", CPU 0x"
                    << expected[i] << std::dec;
  EXPECT_EQ(differ, 0u);
  EXPECT_EQ(expected[4], 0x3f80);
  EXPECT_EQ(expected[5], 0x3f82);
}

TEST_F(GpuKernels, Bf16GemmMatchesCpuInEveryLayout) {
  mgt::cuda::BlasHandle blas;
  struct Case {
    int64_t m, n, k;
  };
  for (const Case c : {Case{64, 10, 784}, Case{128, 256, 33}, Case{37, 300, 129}}) {
    for (const bool ta : {false, true}) {
      for (const bool tb : {false, true}) {
        const int64_t lda = (ta ? c.m : c.k) + 3, ldb = (tb ? c.k : c.n) + 5, ldc = c.n + 2;
        std::vector<uint16_t> a((ta ? c.k : c.m) * lda), b((tb ? c.n : c.k) * ldb);
        const auto wide_a = random_floats(a.size(), 16), wide_b = random_floats(b.size(), 17);
        mgt::kernels::to_bf16(wide_a.data(), a.data(), a.size());
        mgt::kernels::to_bf16(wide_b.data(), b.data(), b.size());
        auto expected = random_floats(c.m * ldc, 18);
        DeviceBuffer<uint16_t> d_a(a), d_b(b);
        DeviceBuffer<float> d_c(expected);
        mgt::kernels::gemm_bf16(ta, tb, c.m, c.n, c.k, 1.0f, a.data(), lda, b.data(), ldb, 1.0f, expected.data(), ldc);
        mgt::cuda::gemm_bf16(blas, ta, tb, c.m, c.n, c.k, 1.0f, d_a.data(), lda, d_b.data(), ldb, 1.0f, d_c.data(),
                             ldc);
        expect_close(d_c.to_host(), expected, 1e-5,
                     "gemm_bf16 " + std::string(ta ? "T" : "N") + (tb ? "T" : "N") + " m=" + std::to_string(c.m) +
                         " n=" + std::to_string(c.n) + " k=" + std::to_string(c.k));
      }
    }
  }
}

TEST_F(GpuKernels, SgemmRefusesAShortLeadingDimension) {
  mgt::cuda::BlasHandle blas;
  DeviceBuffer<float> d(64);
  try {
    mgt::cuda::sgemm(blas, false, false, 4, 4, 4, 1.0f, d.data(), 3, d.data(), 4, 0.0f, d.data(), 4);
    ADD_FAILURE() << "expected mgt::Error";
  } catch (const mgt::Error& e) {
    EXPECT_NE(std::string(e.what()).find("lda=3"), std::string::npos) << e.what();
  }
}

}  // namespace
