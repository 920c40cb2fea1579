// cuDNN convolution and max pooling plans against the CPU kernels (kernels::Conv2d on oneDNN,
// kernels::max_pool2d_*) on random inputs: forward with and without bias, backward to the data,
// backward to the weights overwriting and accumulating, and runs repeated bit for bit. Skipped
// without a device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "gpu_test.hpp"
#include "kernels/backend.hpp"
#include "kernels/cpu/conv2d.hpp"
#include "kernels/cpu/pool.hpp"
#include "kernels/cuda/cuda_backend.hpp"
#include "kernels/cuda/cudnn_ops.hpp"
#include "kernels/cuda/device_buffer.hpp"
#include "mgtrain/error.hpp"

namespace {

using mgt::cuda::DeviceBuffer;
using mgt::kernels::Conv2dShape;
using mgt::test::expect_close;
using mgt::test::random_floats;

// Both sides add the same products in different orders, and cuDNN may transform them (FFT,
// Winograd), in FP32: norm-wise agreement to 1e-4. A wrong layout, padding or stride is off by
// the order of the values themselves.
constexpr double kConvRtol = 1e-4;

class GpuCudnnOps : public mgt::test::GpuTest {};

struct ConvCase {
  Conv2dShape shape;
  int64_t batch;
};

std::string conv_name(const ConvCase& c) {
  const auto& s = c.shape;
  return "conv b" + std::to_string(c.batch) + " " + std::to_string(s.in_channels) + "x" + std::to_string(s.height) +
         "x" + std::to_string(s.width) + "->" + std::to_string(s.out_channels) + " k" + std::to_string(s.kernel) +
         " s" + std::to_string(s.stride) + " p" + std::to_string(s.padding);
}

std::vector<ConvCase> conv_cases() {
  auto shape = [](int64_t ic, int64_t oc, int64_t k, int64_t stride, int64_t pad, int64_t h, int64_t w) {
    Conv2dShape s;
    s.in_channels = ic;
    s.out_channels = oc;
    s.kernel = k;
    s.stride = stride;
    s.padding = pad;
    s.height = h;
    s.width = w;
    return s;
  };
  return {
      {shape(1, 8, 5, 1, 2, 28, 28), 4},   // an MNIST first layer, "same" padding
      {shape(8, 16, 3, 1, 1, 14, 14), 3},  // 3x3 "same": the shape Winograd and FFT target
      {shape(3, 6, 3, 2, 1, 17, 17), 2},   // strided, odd input
      {shape(4, 5, 3, 1, 0, 9, 11), 5},    // no padding, not square
      {shape(6, 4, 1, 1, 0, 7, 7), 3},     // 1x1
      {shape(2, 3, 4, 3, 2, 10, 13), 2},   // even kernel, stride larger than padding
  };
}

TEST_F(GpuCudnnOps, ConvolutionMatchesCpu) {
  mgt::cuda::CudnnHandle cudnn;
  mgt::kernels::Conv2d cpu;
  unsigned seed = 10;
  for (const ConvCase& c : conv_cases()) {
    const auto& s = c.shape;
    const std::string what = conv_name(c);
    const int64_t nx = c.batch * s.in_channels * s.height * s.width;
    const int64_t ny = c.batch * s.out_channels * s.out_height() * s.out_width();
    const int64_t nw = s.out_channels * s.in_channels * s.kernel * s.kernel;
    const auto x = random_floats(nx, ++seed);
    const auto w = random_floats(nw, ++seed);
    const auto bias = random_floats(s.out_channels, ++seed);
    const auto dy = random_floats(ny, ++seed);
    const auto dw0 = random_floats(nw, ++seed);
    const auto db0 = random_floats(s.out_channels, ++seed);

    mgt::cuda::ConvPlan plan(cudnn, s, c.batch);
    std::printf("  %s: workspace %zu bytes, algorithms %s\n", what.c_str(), plan.workspace_bytes(),
                plan.algorithms().c_str());
    DeviceBuffer<float> d_x(x), d_w(w), d_bias(bias), d_dy(dy), d_y(ny), d_dx(nx), d_dw(nw), d_db(s.out_channels);

    // Forward, with and without bias.
    std::vector<float> y(ny);
    cpu.forward(s, c.batch, x.data(), w.data(), bias.data(), y.data());
    plan.forward(d_x.data(), d_w.data(), d_bias.data(), d_y.data());
    mgt::cuda::synchronize();
    expect_close(d_y.to_host(), y, kConvRtol, what + " forward");
    cpu.forward(s, c.batch, x.data(), w.data(), nullptr, y.data());
    plan.forward(d_x.data(), d_w.data(), nullptr, d_y.data());
    mgt::cuda::synchronize();
    expect_close(d_y.to_host(), y, kConvRtol, what + " forward without bias");

    // Backward to the data overwrites whatever dx held.
    std::vector<float> dx(nx);
    cpu.backward_data(s, c.batch, dy.data(), w.data(), dx.data());
    d_dx.upload(random_floats(nx, 999).data(), nx);
    plan.backward_data(d_dy.data(), d_w.data(), d_dx.data());
    mgt::cuda::synchronize();
    expect_close(d_dx.to_host(), dx, kConvRtol, what + " backward data");

    // Backward to the weights: overwriting (over NaN, which beta = 0 must not read), then
    // accumulating onto values already there.
    std::vector<float> dw(nw), db(s.out_channels);
    cpu.backward_weights(s, c.batch, x.data(), dy.data(), dw.data(), db.data(), false);
    d_dw.upload(std::vector<float>(nw, std::numeric_limits<float>::quiet_NaN()).data(), nw);
    d_db.upload(std::vector<float>(s.out_channels, std::numeric_limits<float>::quiet_NaN()).data(), s.out_channels);
    plan.backward_weights(d_x.data(), d_dy.data(), d_dw.data(), d_db.data(), false);
    mgt::cuda::synchronize();
    expect_close(d_dw.to_host(), dw, kConvRtol, what + " weight gradient");
    expect_close(d_db.to_host(), db, kConvRtol, what + " bias gradient");

    std::vector<float> dw_acc = dw0, db_acc = db0;
    cpu.backward_weights(s, c.batch, x.data(), dy.data(), dw_acc.data(), db_acc.data(), true);
    d_dw.upload(dw0.data(), nw);
    d_db.upload(db0.data(), s.out_channels);
    plan.backward_weights(d_x.data(), d_dy.data(), d_dw.data(), d_db.data(), true);
    mgt::cuda::synchronize();
    expect_close(d_dw.to_host(), dw_acc, kConvRtol, what + " weight gradient, accumulated");
    expect_close(d_db.to_host(), db_acc, kConvRtol, what + " bias gradient, accumulated");

    // Without a bias gradient the weights' still comes out.
    d_dw.upload(dw0.data(), nw);
    plan.backward_weights(d_x.data(), d_dy.data(), d_dw.data(), nullptr, false);
    mgt::cuda::synchronize();
    expect_close(d_dw.to_host(), dw, kConvRtol, what + " weight gradient without bias");
  }
}

TEST_F(GpuCudnnOps, ConvolutionRepeatsBitForBit) {
  // Two plans for the same shape pick the same algorithms and give identical results; a
  // non-deterministic backward algorithm (atomics) would differ between the runs.
  mgt::cuda::CudnnHandle cudnn;
  Conv2dShape s;
  s.in_channels = 16;
  s.out_channels = 32;
  s.kernel = 3;
  s.stride = 1;
  s.padding = 1;
  s.height = s.width = 16;
  const int64_t batch = 32;
  const int64_t nx = batch * s.in_channels * s.height * s.width;
  const int64_t ny = batch * s.out_channels * s.out_height() * s.out_width();
  const int64_t nw = s.out_channels * s.in_channels * s.kernel * s.kernel;
  DeviceBuffer<float> d_x(random_floats(nx, 21)), d_w(random_floats(nw, 22)), d_b(random_floats(s.out_channels, 23)),
      d_dy(random_floats(ny, 24));
  std::vector<std::vector<float>> results[2];
  for (auto& r : results) {
    mgt::cuda::ConvPlan plan(cudnn, s, batch);
    DeviceBuffer<float> d_y(ny), d_dx(nx), d_dw(nw), d_db(s.out_channels);
    plan.forward(d_x.data(), d_w.data(), d_b.data(), d_y.data());
    plan.backward_data(d_dy.data(), d_w.data(), d_dx.data());
    plan.backward_weights(d_x.data(), d_dy.data(), d_dw.data(), d_db.data(), false);
    mgt::cuda::synchronize();
    r = {d_y.to_host(), d_dx.to_host(), d_dw.to_host(), d_db.to_host()};
  }
  const char* names[] = {"forward", "backward data", "weight gradient", "bias gradient"};
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(results[0][i], results[1][i]) << names[i];
}

// The bf16 convolution of the GPU backend (cuDNN's bf16 tensors, tensor cores) against the CPU
// backend's emulation (FP32 convolution of the rounded operands, results rounded): the same up to
// the order of the FP32 sums, which may move a result across a bf16 rounding boundary (2^-8).
TEST_F(GpuCudnnOps, Bf16ConvolutionMatchesTheCpuEmulation) {
  auto gpu = mgt::cuda::make_cuda_backend(0);
  auto cpu = mgt::kernels::make_cpu_backend();
  unsigned seed = 40;
  for (const ConvCase& c : conv_cases()) {
    const auto& s = c.shape;
    const std::string what = "bf16 " + conv_name(c);
    const auto nx = static_cast<size_t>(c.batch * s.in_channels * s.height * s.width);
    const auto ny = static_cast<size_t>(c.batch * s.out_channels * s.out_height() * s.out_width());
    const auto nw = static_cast<size_t>(s.out_channels * s.in_channels * s.kernel * s.kernel);
    const auto nb = static_cast<size_t>(s.out_channels);
    const auto x = random_floats(nx, ++seed), w = random_floats(nw, ++seed), bias = random_floats(nb, ++seed);
    const auto dy = random_floats(ny, ++seed), dw0 = random_floats(nw, ++seed), db0 = random_floats(nb, ++seed);

    std::vector<float> y(ny), dx(nx), dw = dw0, db = db0;
    auto cpu_conv = cpu->make_conv(s, c.batch, /*bf16=*/true);
    cpu_conv->forward(x.data(), w.data(), bias.data(), y.data());
    cpu_conv->backward_data(dy.data(), w.data(), dx.data());
    cpu_conv->backward_weights(x.data(), dy.data(), dw.data(), db.data());

    auto gpu_conv = gpu->make_conv(s, c.batch, /*bf16=*/true);
    DeviceBuffer<float> d_x(x), d_w(w), d_bias(bias), d_dy(dy), d_y(ny), d_dx(nx), d_dw(dw0), d_db(db0);
    // Those uploads ran on the legacy stream, which the backend's compute stream does not wait for.
    mgt::cuda::synchronize();
    gpu_conv->forward(d_x.data(), d_w.data(), d_bias.data(), d_y.data());
    gpu_conv->backward_data(d_dy.data(), d_w.data(), d_dx.data());
    gpu_conv->backward_weights(d_x.data(), d_dy.data(), d_dw.data(), d_db.data());
    std::vector<float> g_y(ny), g_dx(nx), g_dw(nw), g_db(nb);
    gpu->download(g_y.data(), d_y.data(), ny * sizeof(float));
    gpu->download(g_dx.data(), d_dx.data(), nx * sizeof(float));
    gpu->download(g_dw.data(), d_dw.data(), nw * sizeof(float));
    gpu->download(g_db.data(), d_db.data(), nb * sizeof(float));
    expect_close(g_y, y, 1e-2, what + " forward");
    expect_close(g_dx, dx, 1e-2, what + " backward to the data");
    expect_close(g_dw, dw, 1e-2, what + " weight gradient, accumulated");
    expect_close(g_db, db, kConvRtol, what + " bias gradient, accumulated (FP32)");
    // Not the FP32 convolution: bf16 rounding shows.
    std::vector<float> fp32_y(ny);
    mgt::kernels::Conv2d().forward(s, c.batch, x.data(), w.data(), bias.data(), fp32_y.data());
    EXPECT_NE(g_y, fp32_y) << what;
  }
}

TEST_F(GpuCudnnOps, ConvolutionRefusesAKernelLargerThanTheInput) {
  mgt::cuda::CudnnHandle cudnn;
  Conv2dShape s;
  s.in_channels = 1;
  s.out_channels = 1;
  s.kernel = 5;
  s.height = 4;
  s.width = 8;
  try {
    mgt::cuda::ConvPlan plan(cudnn, s, 1);
    ADD_FAILURE() << "expected mgt::Error";
  } catch (const mgt::Error& e) {
    EXPECT_NE(std::string(e.what()).find("smaller than the kernel"), std::string::npos) << e.what();
  }
}

// Distinct values in random order: no window has a tie, whose gradient the CPU gives to the first
// maximum and cuDNN need not.
std::vector<float> distinct_floats(size_t n, unsigned seed) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<float>(i) / static_cast<float>(n) - 0.5f;
  std::shuffle(v.begin(), v.end(), std::mt19937(seed));
  return v;
}

TEST_F(GpuCudnnOps, MaxPoolMatchesCpu) {
  mgt::cuda::CudnnHandle cudnn;
  struct PoolCase {
    int64_t batch, channels, height, width, kernel, stride;
  };
  for (const PoolCase c : {PoolCase{4, 3, 28, 28, 2, 2}, PoolCase{2, 5, 15, 17, 2, 2}, PoolCase{3, 2, 13, 13, 3, 2},
                           PoolCase{2, 4, 9, 10, 3, 3}, PoolCase{1, 1, 5, 5, 5, 1}, PoolCase{2, 3, 8, 8, 2, 1}}) {
    const std::string what = "max pool b" + std::to_string(c.batch) + " " + std::to_string(c.channels) + "x" +
                             std::to_string(c.height) + "x" + std::to_string(c.width) + " k" +
                             std::to_string(c.kernel) + " s" + std::to_string(c.stride);
    const int64_t planes = c.batch * c.channels;
    const int64_t oh = (c.height - c.kernel) / c.stride + 1, ow = (c.width - c.kernel) / c.stride + 1;
    const int64_t nx = planes * c.height * c.width, ny = planes * oh * ow;
    const auto x = distinct_floats(nx, 41);
    const auto dy = random_floats(ny, 42);
    std::vector<float> y(ny), dx(nx);
    std::vector<int32_t> argmax(ny);
    mgt::kernels::max_pool2d_forward(x.data(), y.data(), argmax.data(), planes, c.height, c.width, c.kernel, c.stride);
    mgt::kernels::max_pool2d_backward(dy.data(), argmax.data(), dx.data(), planes, c.height, c.width, c.kernel,
                                      c.stride);

    mgt::cuda::MaxPoolPlan plan(cudnn, c.batch, c.channels, c.height, c.width, c.kernel, c.stride);
    EXPECT_EQ(plan.out_height(), oh) << what;
    EXPECT_EQ(plan.out_width(), ow) << what;
    DeviceBuffer<float> d_x(x), d_y(ny), d_dy(dy), d_dx(random_floats(nx, 43));
    plan.forward(d_x.data(), d_y.data());
    plan.backward(d_x.data(), d_y.data(), d_dy.data(), d_dx.data());
    mgt::cuda::synchronize();
    // Selection: the maxima are the same values. The gradient adds the same values, in another
    // order where windows overlap.
    EXPECT_EQ(d_y.to_host(), y) << what << " forward";
    if (c.kernel == c.stride) {
      EXPECT_EQ(d_dx.to_host(), dx) << what << " backward";
    } else {
      expect_close(d_dx.to_host(), dx, 1e-6, what + " backward");
    }
  }
}

TEST_F(GpuCudnnOps, MaxPoolRefusesAKernelLargerThanTheInput) {
  mgt::cuda::CudnnHandle cudnn;
  EXPECT_THROW(mgt::cuda::MaxPoolPlan(cudnn, 1, 1, 3, 8, 4, 1), mgt::Error);
  EXPECT_THROW(mgt::cuda::MaxPoolPlan(cudnn, 1, 1, 8, 8, 2, 0), mgt::Error);
}

}  // namespace
