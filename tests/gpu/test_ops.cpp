// mgt::Ops on the GPU against the CPU backend: the operations a plugin's own layer is written in
// (element-wise functions, dropout's counter-based uniforms for the step the device reads).
#include <memory>
#include <vector>

#include "gpu_test.hpp"
#include "kernels/backend.hpp"
#include "kernels/cuda/cuda_backend.hpp"
#include "mgtrain/rng.hpp"

namespace mgt::test {
namespace {

using GpuOps = GpuAgainstCpu;

TEST_F(GpuOps, UniformMatchesTheCpuBitForBitAndReadsTheStepOnTheDevice) {
  const size_t n = 1001;
  int64_t host_step = 9;
  auto* step = static_cast<int64_t*>(gpu_->allocate(sizeof(int64_t)));
  gpu_->upload(step, &host_step, sizeof host_step);
  gpu_->read_step_from(step);
  cpu_->read_step_from(&host_step);
  float* y = upload(std::vector<float>(n, -1.0f));
  const uint64_t key = rng::make_key(42, 3);
  for (uint64_t first : {0u, 2u, 4097u}) {
    gpu_->uniform(y, n, key, first);
    std::vector<float> want(n);
    cpu_->uniform(want.data(), n, key, first);
    EXPECT_EQ(download(y, n), want) << "first index " << first;
  }
  host_step = 10;
  gpu_->upload(step, &host_step, sizeof host_step);
  gpu_->uniform(y, n, key, 0);
  std::vector<float> want(n);
  cpu_->uniform(want.data(), n, key, 0);
  EXPECT_EQ(download(y, n), want) << "after the step changed on the device";
  gpu_->dropout_scales(y, static_cast<int64_t>(n), 0.3f);
  cpu_->dropout_scales(want.data(), static_cast<int64_t>(n), 0.3f);
  EXPECT_EQ(download(y, n), want) << "dropout scales";
  gpu_->release(step);
}

TEST_F(GpuOps, ElementWiseOpsMatchTheCpu) {
  const size_t n = 4099;
  const auto x = random_floats(n, 1, -4.0f, 4.0f), b = random_floats(n, 2, 0.5f, 2.0f);
  float* dx = upload(x);
  float* db = upload(b);
  float* dy = upload(std::vector<float>(n));
  std::vector<float> want(n);
  const auto m = static_cast<int64_t>(n);
  for (UnaryOp op : {UnaryOp::relu, UnaryOp::sigmoid, UnaryOp::tanh, UnaryOp::exp, UnaryOp::square, UnaryOp::abs,
                     UnaryOp::erf, UnaryOp::sin, UnaryOp::cos}) {
    gpu_->unary(op, dx, dy, m);
    cpu_->unary(op, x.data(), want.data(), m);
    expect_close(download(dy, n), want, 1e-6, "unary op " + std::to_string(static_cast<int>(op)));
  }
  for (UnaryOp op : {UnaryOp::log, UnaryOp::sqrt, UnaryOp::reciprocal}) {
    gpu_->unary(op, db, dy, m);
    cpu_->unary(op, b.data(), want.data(), m);
    expect_close(download(dy, n), want, 1e-6, "unary op " + std::to_string(static_cast<int>(op)));
  }
  for (BinaryOp op : {BinaryOp::add, BinaryOp::subtract, BinaryOp::multiply, BinaryOp::divide, BinaryOp::maximum,
                      BinaryOp::minimum}) {
    gpu_->binary(op, dx, db, dy, m);
    cpu_->binary(op, x.data(), b.data(), want.data(), m);
    EXPECT_EQ(download(dy, n), want) << "binary op " << static_cast<int>(op);
  }
  gpu_->affine(dx, dy, m, -1.5f, 0.25f);
  cpu_->affine(x.data(), want.data(), m, -1.5f, 0.25f);
  EXPECT_EQ(download(dy, n), want) << "affine";
}

}  // namespace
}  // namespace mgt::test
