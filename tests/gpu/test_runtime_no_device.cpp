// The CUDA wrappers that must work on any machine, GPU or not: device discovery that never
// throws, the error checks' messages, an empty device buffer, version strings, and allocation
// errors that arrive as mgt::CudaError.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kernels/cuda/check.hpp"
#include "kernels/cuda/device_buffer.hpp"
#include "kernels/cuda/pointwise.hpp"
#include "kernels/cuda/runtime.hpp"
#include "mgtrain/error.hpp"

namespace {

using mgt::cuda::DeviceBuffer;

// The message of the CudaError `f` throws; a failure if it throws nothing.
template <typename F>
std::string cuda_error_message(F&& f) {
  try {
    f();
  } catch (const mgt::CudaError& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected mgt::CudaError";
  return {};
}

void expect_contains(const std::string& text, const std::string& part) {
  EXPECT_NE(text.find(part), std::string::npos) << "'" << part << "' not in: " << text;
}

TEST(CudaRuntime, DeviceCountNeverThrowsAndSaysWhyWhenZero) {
  std::string why;
  const int count = mgt::cuda::device_count(&why);
  EXPECT_GE(count, 0);
  if (count == 0) {
    EXPECT_FALSE(why.empty());
  }
  std::printf("  device_count: %d%s%s\n", count, why.empty() ? "" : ", ", why.c_str());
  EXPECT_EQ(mgt::cuda::device_count(), count) << "a second call agrees, and needs no reason";
}

cudaError_t failing_call() { return cudaErrorInvalidValue; }

TEST(CudaRuntime, CudaCheckNamesCallFileLineAndText) {
  int line = 0;
  const std::string msg = cuda_error_message([&] {
    line = __LINE__ + 1;  // the check's line
    MGT_CUDA_CHECK(failing_call());
  });
  expect_contains(msg, "CUDA call failing_call() failed at ");
  // Relative to the source tree, not the absolute path of this checkout.
  expect_contains(msg, " tests/gpu/test_runtime_no_device.cpp:" + std::to_string(line) + ": ");
  expect_contains(msg, "invalid argument");
  expect_contains(msg, "(cudaErrorInvalidValue)");
}

TEST(CudaRuntime, LibraryChecksNameTheLibraryAndStatus) {
  expect_contains(cuda_error_message([] { MGT_CUBLAS_CHECK(CUBLAS_STATUS_INVALID_VALUE); }),
                  "cuBLAS call CUBLAS_STATUS_INVALID_VALUE failed at ");
  expect_contains(cuda_error_message([] { MGT_CUBLAS_CHECK(CUBLAS_STATUS_INVALID_VALUE); }),
                  "CUBLAS_STATUS_INVALID_VALUE)");
  const std::string cudnn = cuda_error_message([] { MGT_CUDNN_CHECK(CUDNN_STATUS_BAD_PARAM); });
  expect_contains(cudnn, "cuDNN call CUDNN_STATUS_BAD_PARAM failed at ");
  expect_contains(cudnn, "BAD_PARAM");
  const std::string nccl = cuda_error_message([] { MGT_NCCL_CHECK(ncclInvalidArgument); });
  expect_contains(nccl, "NCCL call ncclInvalidArgument failed at ");
  expect_contains(nccl, "invalid argument");
  // Success passes through quietly.
  MGT_CUDA_CHECK(cudaSuccess);
  MGT_CUBLAS_CHECK(CUBLAS_STATUS_SUCCESS);
  MGT_CUDNN_CHECK(CUDNN_STATUS_SUCCESS);
  MGT_NCCL_CHECK(ncclSuccess);
}

TEST(CudaRuntime, EmptyBufferNeedsNoDevice) {
  DeviceBuffer<float> empty(0);
  EXPECT_TRUE(empty.empty());
  EXPECT_EQ(empty.data(), nullptr);
  EXPECT_TRUE(empty.to_host().empty());
  empty.fill_zero();
  DeviceBuffer<float> moved(std::move(empty));
  EXPECT_EQ(moved.size(), 0u);
  // Kernels over no elements launch nothing.
  mgt::cuda::relu_forward(nullptr, nullptr, 0);
  mgt::cuda::relu_backward(nullptr, nullptr, nullptr, 0);
}

TEST(CudaRuntime, BufferOverrunIsRefused) {
  DeviceBuffer<float> empty;
  std::vector<float> host(3);
  try {
    empty.upload(host.data(), host.size());
    ADD_FAILURE() << "expected mgt::Error";
  } catch (const mgt::Error& e) {
    expect_contains(e.what(), "upload of 3 elements, the buffer holds 0");
  }
}

TEST(CudaRuntime, FailedAllocationIsCudaError) {
  // Without a device any allocation fails; with one, a petabyte does.
  const bool have_device = mgt::cuda::device_count() > 0;
  const size_t count = have_device ? (size_t{1} << 48) : 16;
  const std::string msg = cuda_error_message([&] { DeviceBuffer<float> buffer(count); });
  // A device that lacks the memory says so as OutOfMemoryError (a CudaError) with its figures.
  if (have_device)
    expect_contains(msg, "cudaMalloc of 1073741824.0 MB failed with");
  else
    expect_contains(msg, "CUDA call cudaMalloc of " + std::to_string(count * sizeof(float)) + " bytes failed at ");
  // Out of memory is not sticky: the next check must not see it. (Without a driver every call
  // reports the failed start-up again, so there is nothing to clear.)
  if (have_device) {
    EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  }
}

TEST(CudaRuntime, VersionStrings) {
  EXPECT_EQ(mgt::cuda::cuda_version_string(13000), "13.0");
  EXPECT_EQ(mgt::cuda::cuda_version_string(12040), "12.4");
  EXPECT_EQ(mgt::cuda::cuda_version_string(0), "-");
  EXPECT_EQ(mgt::cuda::cudnn_version_string(91900), "9.19.0");
  EXPECT_EQ(mgt::cuda::cudnn_version_string(90101), "9.1.1");
  EXPECT_EQ(mgt::cuda::cudnn_version_string(8907), "8.9.7");
  EXPECT_EQ(mgt::cuda::nccl_version_string(22809), "2.28.9");
  EXPECT_EQ(mgt::cuda::nccl_version_string(2804), "2.8.4");
  EXPECT_EQ(mgt::cuda::nccl_version_string(0), "-");
}

TEST(CudaRuntime, LoadedLibrariesMatchTheHeadersMajorVersion) {
  const auto loaded = mgt::cuda::library_versions();
  const auto compiled = mgt::cuda::compiled_versions();
  EXPECT_GT(loaded.runtime, 0);
  EXPECT_EQ(loaded.runtime / 1000, compiled.runtime / 1000);
  EXPECT_EQ(loaded.cudnn / 10000, compiled.cudnn / 10000);
  EXPECT_EQ(loaded.nccl / 10000, compiled.nccl / 10000);
  std::printf("  runtime %s, driver %s, cuDNN %s, NCCL %s\n", mgt::cuda::cuda_version_string(loaded.runtime).c_str(),
              mgt::cuda::cuda_version_string(loaded.driver).c_str(),
              mgt::cuda::cudnn_version_string(loaded.cudnn).c_str(),
              mgt::cuda::nccl_version_string(loaded.nccl).c_str());
}

}  // namespace
