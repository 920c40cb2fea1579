#pragma once
// Shared by the GPU tests: a fixture that skips without a device, and comparisons with the CPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kernels/backend.hpp"
#include "kernels/cuda/cuda_backend.hpp"
#include "kernels/cuda/runtime.hpp"

namespace mgt::test {

// Every test on the device derives from this: without a usable GPU it is skipped and says why.
class GpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (cuda::device_count(&why) == 0) GTEST_SKIP() << "no usable CUDA device: " << why;
  }
};

// The GPU backend's operations against the CPU backend's: both backends, and host vectors copied
// to device memory that lives as long as the test.
class GpuAgainstCpu : public GpuTest {
 protected:
  void SetUp() override {
    GpuTest::SetUp();
    if (IsSkipped()) return;
    gpu_ = cuda::make_cuda_backend(0);
    cpu_ = kernels::make_cpu_backend();
  }
  void TearDown() override {
    for (float* p : owned_) gpu_->release(p);
  }
  float* upload(const std::vector<float>& host) {
    auto* p = static_cast<float*>(gpu_->allocate(host.size() * sizeof(float)));
    gpu_->upload(p, host.data(), host.size() * sizeof(float));
    owned_.push_back(p);
    return p;
  }
  std::vector<float> download(const float* p, size_t n) {
    std::vector<float> host(n);
    gpu_->download(host.data(), p, n * sizeof(float));
    return host;
  }
  std::unique_ptr<kernels::Backend> gpu_, cpu_;
  std::vector<float*> owned_;
};

inline std::vector<float> random_floats(size_t n, unsigned seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(gen);
  return v;
}

// Each element within rtol of the largest magnitude in `expected` (a norm-wise relative error:
// element-wise it would fail on values that cancel to near zero). Reports the worst element and
// how many differ at all, so a device run shows whether the two agree bit for bit.
inline void expect_close(const std::vector<float>& actual, const std::vector<float>& expected, double rtol,
                         const std::string& what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  double scale = 0.0;
  for (const float e : expected) scale = std::max(scale, std::fabs(static_cast<double>(e)));
  const double tol = rtol * std::max(scale, 1e-30);
  double worst = 0.0;
  size_t worst_at = 0, differing = 0, failures = 0;
  for (size_t i = 0; i < actual.size(); ++i) {
    const double diff = std::fabs(static_cast<double>(actual[i]) - expected[i]);
    if (actual[i] != expected[i]) ++differing;
    if (diff > worst || std::isnan(diff)) {
      worst = diff;
      worst_at = i;
    }
    if (!(diff <= tol) && ++failures <= 5)
      ADD_FAILURE() << what << " element " << i << ": GPU " << actual[i] << ", CPU " << expected[i] << ", difference "
                    << diff << " > tolerance " << tol;
  }
  std::printf("  %s: %zu of %zu elements differ, largest difference %.3g (element %zu), tolerance %.3g\n", what.c_str(),
              differing, actual.size(), worst, worst_at, tol);
  EXPECT_EQ(failures, 0u) << what;
}

}  // namespace mgt::test
