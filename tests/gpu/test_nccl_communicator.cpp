// The NCCL communicator at one rank (a singleton MPI process): every collective runs and keeps
// the order of the compute stream, a request joins it back, split gives a working part, barrier
// and the host waits keep their deadlines (the communicator fails on expiry, and is aborted once
// no CUDA graph holds its work), and the operations replay correctly from a CUDA graph captured on
// the compute stream. Skipped without a device, except
// the wait's report of a device that cannot be queried.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "comm/mpi_communicator.hpp"
#include "gpu_test.hpp"
#include "kernels/cuda/check.hpp"
#include "kernels/cuda/device_buffer.hpp"
#include "kernels/cuda/nccl_communicator.hpp"
#include "mgtrain/error.hpp"

namespace {

using mgt::cuda::DeviceBuffer;

// MPI for the host communicator, started only where the tests run (a device is present), so the
// skipping run needs no MPI at all.
class MpiEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    if (mgt::cuda::device_count() > 0) mpi_ = std::make_unique<mgt::MpiRuntime>(nullptr, nullptr);
  }
  void TearDown() override { mpi_.reset(); }

 private:
  std::unique_ptr<mgt::MpiRuntime> mpi_;
};

[[maybe_unused]] ::testing::Environment* const mpi_environment =
    ::testing::AddGlobalTestEnvironment(new MpiEnvironment);

void expect_contains(const std::string& text, const std::string& part) {
  EXPECT_NE(text.find(part), std::string::npos) << "'" << part << "' not in: " << text;
}

// Page-locked host memory: copies from it are truly asynchronous, so the order they take on the
// compute stream is the order under test (a pageable copy would synchronise the host first).
template <typename T>
class PinnedBuffer {
 public:
  explicit PinnedBuffer(size_t count) : size_(count) {
    void* ptr = nullptr;
    MGT_CUDA_CHECK(cudaMallocHost(&ptr, count * sizeof(T)));
    data_ = static_cast<T*>(ptr);
  }
  ~PinnedBuffer() { cudaFreeHost(data_); }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  T* data() { return data_; }
  size_t bytes() const { return size_ * sizeof(T); }
  std::vector<T> to_vector() const { return std::vector<T>(data_, data_ + size_); }
  void assign(const std::vector<T>& values) { std::memcpy(data_, values.data(), values.size() * sizeof(T)); }

 private:
  T* data_ = nullptr;
  size_t size_ = 0;
};

// Holds the stream it is enqueued on for `*ms` milliseconds: work behind it starts late, so work
// that wrongly runs beside it sees data not yet written.
void CUDART_CB hold_stream(void* ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(*static_cast<const int*>(ms)));
}
const int kHoldMs = 100;
const int kLongHoldMs = 2000;

void hold(cudaStream_t stream, const int& ms) {
  MGT_CUDA_CHECK(cudaLaunchHostFunc(stream, hold_stream, const_cast<int*>(&ms)));
}

class NcclCommunicatorTest : public mgt::test::GpuTest {
 protected:
  void SetUp() override {
    GpuTest::SetUp();
    if (IsSkipped()) return;
    mgt::cuda::set_device(0);
    MGT_CUDA_CHECK(cudaStreamCreateWithFlags(&compute_, cudaStreamNonBlocking));
    host_ = mgt::make_mpi_communicator();
    host_->set_timeout_seconds(60);
    comm_ = mgt::cuda::make_nccl_communicator(*host_, compute_, 0);
    comm_->set_timeout_seconds(60);
  }
  void TearDown() override {
    comm_.reset();
    host_.reset();
    if (compute_) cudaStreamDestroy(compute_);
  }

  void sync() { MGT_CUDA_CHECK(cudaStreamSynchronize(compute_)); }

  // Host to device on compute, behind a hold of the stream.
  template <typename T>
  void late_upload(T* device, PinnedBuffer<T>& host) {
    hold(compute_, kHoldMs);
    MGT_CUDA_CHECK(cudaMemcpyAsync(device, host.data(), host.bytes(), cudaMemcpyHostToDevice, compute_));
  }
  template <typename T>
  void download(PinnedBuffer<T>& host, const T* device) {
    MGT_CUDA_CHECK(cudaMemcpyAsync(host.data(), device, host.bytes(), cudaMemcpyDeviceToHost, compute_));
  }

  cudaStream_t compute_ = nullptr;
  std::unique_ptr<mgt::Communicator> host_;
  std::unique_ptr<mgt::Communicator> comm_;
};

TEST(NcclWaitWithDeadline, IdleStreamReturnsAndUnqueryableDeviceIsCudaError) {
  if (mgt::cuda::device_count() > 0) {
    mgt::cuda::wait_with_deadline(nullptr, 1.0, "idle wait", 0, 1);
    return;
  }
  try {
    mgt::cuda::wait_with_deadline(nullptr, 1.0, "idle wait", 0, 1);
    ADD_FAILURE() << "expected mgt::CudaError without a device";
  } catch (const mgt::CudaError& e) {
    expect_contains(e.what(), "CUDA call cudaStreamQuery failed at ");
  }
}

TEST_F(NcclCommunicatorTest, IdentityOfTheHost) {
  EXPECT_EQ(comm_->backend(), "nccl");
  EXPECT_EQ(comm_->rank(), host_->rank());
  EXPECT_EQ(comm_->size(), host_->size());
  EXPECT_EQ(comm_->local_rank(), host_->local_rank());
  EXPECT_EQ(comm_->local_size(), host_->local_size());
  EXPECT_EQ(comm_->node(), host_->node());
  EXPECT_EQ(comm_->size(), 1) << "these tests run as one rank";
}

// A healthy communicator passes the check the step waits make; any other communicator is not
// NCCL's to judge.
TEST_F(NcclCommunicatorTest, HealthyCommunicatorPassesTheFailureCheck) {
  EXPECT_NO_THROW(mgt::cuda::raise_if_failed(*comm_));
  EXPECT_NO_THROW(mgt::cuda::raise_if_failed(*host_));
  float one = 1.0f;
  float* device = nullptr;
  MGT_CUDA_CHECK(cudaMalloc(&device, sizeof(float)));
  MGT_CUDA_CHECK(cudaMemcpy(device, &one, sizeof(float), cudaMemcpyHostToDevice));
  comm_->allreduce_sum(device, 1);
  sync();
  EXPECT_NO_THROW(mgt::cuda::raise_if_failed(*comm_));
  MGT_CUDA_CHECK(cudaFree(device));
}

TEST_F(NcclCommunicatorTest, AllreduceFloatsAndDoublesInComputeOrder) {
  const size_t n = 1 << 20;
  const auto values = mgt::test::random_floats(n, 7);
  PinnedBuffer<float> in(n), out(n);
  in.assign(values);
  DeviceBuffer<float> data(n);
  late_upload(data.data(), in);
  const int64_t before = comm_->collective_count();
  comm_->allreduce_sum(data.data(), n);
  download(out, data.data());
  sync();
  EXPECT_EQ(out.to_vector(), values) << "the sum over one rank is the rank's own values";

  std::vector<double> doubles(1000);
  for (size_t i = 0; i < doubles.size(); ++i) doubles[i] = 0.25 * static_cast<double>(i) - 3.0;
  PinnedBuffer<double> din(doubles.size()), dout(doubles.size());
  din.assign(doubles);
  DeviceBuffer<double> ddata(doubles.size());
  late_upload(ddata.data(), din);
  comm_->allreduce_sum(ddata.data(), doubles.size());
  download(dout, ddata.data());
  sync();
  EXPECT_EQ(dout.to_vector(), doubles);
  EXPECT_EQ(comm_->collective_count(), before + 2);

  comm_->allreduce_sum(data.data(), 0);
  EXPECT_EQ(comm_->collective_count(), before + 2) << "zero elements start nothing";
}

TEST_F(NcclCommunicatorTest, AllreduceMaxIsExactOnInt64) {
  const std::vector<int64_t> values = {-5, int64_t{1} << 60, 7, (int64_t{1} << 53) + 1};
  PinnedBuffer<int64_t> in(values.size()), out(values.size());
  in.assign(values);
  DeviceBuffer<int64_t> data(values.size());
  late_upload(data.data(), in);
  comm_->allreduce_max(data.data(), values.size());
  download(out, data.data());
  sync();
  EXPECT_EQ(out.to_vector(), values);
}

TEST_F(NcclCommunicatorTest, NonBlockingAllreduceJoinsComputeOnWait) {
  const size_t n = 4096;
  const auto values = mgt::test::random_floats(n, 11);
  PinnedBuffer<float> in(n), out(n);
  in.assign(values);
  DeviceBuffer<float> data(n);
  late_upload(data.data(), in);
  auto request = comm_->iallreduce_sum(data.data(), n);
  EXPECT_TRUE(request->test()) << "enqueued is complete as far as the host is concerned";
  request->wait();
  request->wait();  // a second wait is harmless
  download(out, data.data());
  sync();
  EXPECT_EQ(out.to_vector(), values);

  auto empty = comm_->iallreduce_sum(data.data(), 0);
  EXPECT_TRUE(empty->test());
  empty->wait();
}

TEST_F(NcclCommunicatorTest, BroadcastAndAllgatherInComputeOrder) {
  const size_t bytes = 3000;
  std::vector<uint8_t> pattern(bytes);
  for (size_t i = 0; i < bytes; ++i) pattern[i] = static_cast<uint8_t>(i * 7 + 1);
  PinnedBuffer<uint8_t> in(bytes), out(bytes);
  in.assign(pattern);
  DeviceBuffer<uint8_t> data(bytes), gathered(bytes);
  late_upload(data.data(), in);
  comm_->broadcast(data.data(), bytes, 0);
  download(out, data.data());
  sync();
  EXPECT_EQ(out.to_vector(), pattern);

  // Out of place, so NCCL itself must copy what compute wrote late (a new pattern over the old
  // one: reading early would gather the old), and compute must read it only after.
  for (auto& b : pattern) b = static_cast<uint8_t>(b ^ 0x5a);
  in.assign(pattern);
  MGT_CUDA_CHECK(cudaMemsetAsync(gathered.data(), 0, gathered.bytes(), compute_));
  late_upload(data.data(), in);
  comm_->allgather(data.data(), gathered.data(), bytes);
  download(out, gathered.data());
  sync();
  EXPECT_EQ(out.to_vector(), pattern);
}

TEST_F(NcclCommunicatorTest, SplitGivesAWorkingPart) {
  comm_->set_timeout_seconds(42);
  comm_->set_step(5);
  auto part = comm_->split(0, 0);
  EXPECT_EQ(part->backend(), "nccl");
  EXPECT_EQ(part->size(), 1);
  EXPECT_EQ(part->rank(), 0);
  EXPECT_EQ(part->timeout_seconds(), 42);
  EXPECT_EQ(part->step(), 5);
  const std::vector<float> values = {1.5f, -2.0f, 3.25f};
  PinnedBuffer<float> in(values.size()), out(values.size());
  in.assign(values);
  DeviceBuffer<float> data(values.size());
  late_upload(data.data(), in);
  part->allreduce_sum(data.data(), values.size());
  download(out, data.data());
  sync();
  EXPECT_EQ(out.to_vector(), values);
  part->barrier();
  part.reset();
  comm_->barrier();  // the parent still works after its part is gone

  try {
    comm_->split(-1, 0);
    ADD_FAILURE() << "expected mgt::CommError for a negative color";
  } catch (const mgt::CommError& e) {
    expect_contains(e.what(), "color -1, expected 0 or more");
  }
}

TEST_F(NcclCommunicatorTest, BarrierWaitsForBothStreams) {
  PinnedBuffer<float> in(1), out(1);
  in.assign({4.0f});
  DeviceBuffer<float> data(1);
  late_upload(data.data(), in);
  comm_->allreduce_sum(data.data(), 1);
  download(out, data.data());
  const int64_t before = comm_->collective_count();
  comm_->barrier();
  EXPECT_EQ(cudaStreamQuery(compute_), cudaSuccess) << "compute is idle after a barrier";
  EXPECT_EQ(out.to_vector(), std::vector<float>{4.0f});
  EXPECT_EQ(comm_->collective_count(), before + 1);
}

TEST_F(NcclCommunicatorTest, BarrierPastItsDeadlineFailsAndNamesStepAndRank) {
  comm_->set_timeout_seconds(0.1);
  comm_->set_step(12);
  hold(compute_, kLongHoldMs);
  const auto start = std::chrono::steady_clock::now();
  try {
    comm_->barrier();
    ADD_FAILURE() << "expected mgt::CommError at the deadline";
  } catch (const mgt::CommError& e) {
    expect_contains(e.what(), "nccl barrier at step 12 did not finish within 0.1 s on rank 0: ");
  }
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 1.5)
      << "the barrier gave up at its deadline, not when the stream drained";
  // Failed: every later operation says so instead of hanging.
  DeviceBuffer<float> data(1);
  try {
    comm_->allreduce_sum(data.data(), 1);
    ADD_FAILURE() << "expected mgt::CommError after the failure";
  } catch (const mgt::CommError& e) {
    expect_contains(e.what(),
                    "nccl allreduce (floats) at step 12 on rank 0: the communicator failed at an earlier error");
  }
  sync();
}

// NCCL's abort waits until no CUDA graph holds work captured from the communicator. A run that
// fails destroys its recorded steps first, then the communicator: the abort must then return at
// once (were the graph still there, it would never return, and the test would time out).
TEST_F(NcclCommunicatorTest, FailedWithARecordedGraphIsAbortedOnceTheGraphIsGone) {
  const size_t n = 1024;
  DeviceBuffer<float> data(n);
  comm_->allreduce_sum(data.data(), n);  // uncaptured first: NCCL connects on first use
  sync();
  cudaGraph_t graph = nullptr;
  MGT_CUDA_CHECK(cudaStreamBeginCapture(compute_, cudaStreamCaptureModeThreadLocal));
  comm_->allreduce_sum(data.data(), n);
  MGT_CUDA_CHECK(cudaStreamEndCapture(compute_, &graph));
  cudaGraphExec_t exec = nullptr;
  MGT_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  MGT_CUDA_CHECK(cudaGraphDestroy(graph));
  MGT_CUDA_CHECK(cudaGraphLaunch(exec, compute_));
  sync();

  comm_->set_timeout_seconds(0.1);
  hold(compute_, kLongHoldMs);
  EXPECT_THROW(comm_->barrier(), mgt::CommError);
  MGT_CUDA_CHECK(cudaGraphExecDestroy(exec));
  const auto start = std::chrono::steady_clock::now();
  comm_.reset();  // failed: aborted
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 10.0)
      << "the abort returned once the graph was destroyed";
  sync();
}

TEST_F(NcclCommunicatorTest, WaitWithDeadlineNamesWhatStepAndRank) {
  mgt::cuda::wait_with_deadline(compute_, 10.0, "idle step", 0, 1);
  hold(compute_, kLongHoldMs);
  try {
    mgt::cuda::wait_with_deadline(compute_, 0.1, "step wait", 5, 3);
    ADD_FAILURE() << "expected mgt::CommError at the deadline";
  } catch (const mgt::CommError& e) {
    expect_contains(e.what(), "step wait at step 3 did not finish within 0.1 s on rank 5: ");
  }
  hold(compute_, kHoldMs);
  mgt::cuda::wait_with_deadline(compute_, 30.0, "step wait", 5, 3);
  EXPECT_EQ(cudaStreamQuery(compute_), cudaSuccess);
}

TEST_F(NcclCommunicatorTest, CapturedInAGraphReplaysWithNewInputs) {
  const size_t n = 1 << 16;
  PinnedBuffer<float> in(n), out(n);
  DeviceBuffer<float> data(n), gathered(n), result(n);
  // One uncaptured run first: NCCL sets up its connections on first use.
  comm_->allreduce_sum(data.data(), n);
  comm_->allgather(data.data(), gathered.data(), n * sizeof(float));
  sync();

  const int64_t before = comm_->collective_count();
  cudaGraph_t graph = nullptr;
  MGT_CUDA_CHECK(cudaStreamBeginCapture(compute_, cudaStreamCaptureModeThreadLocal));
  MGT_CUDA_CHECK(cudaMemcpyAsync(data.data(), in.data(), in.bytes(), cudaMemcpyHostToDevice, compute_));
  comm_->allreduce_sum(data.data(), n);
  comm_->allgather(data.data(), gathered.data(), n * sizeof(float));
  auto request = comm_->iallreduce_sum(gathered.data(), n);
  request->wait();
  MGT_CUDA_CHECK(cudaMemcpyAsync(result.data(), gathered.data(), result.bytes(), cudaMemcpyDeviceToDevice, compute_));
  MGT_CUDA_CHECK(cudaMemcpyAsync(out.data(), result.data(), out.bytes(), cudaMemcpyDeviceToHost, compute_));
  MGT_CUDA_CHECK(cudaStreamEndCapture(compute_, &graph));
  EXPECT_EQ(comm_->collective_count(), before + 3) << "counted when captured";
  cudaGraphExec_t exec = nullptr;
  MGT_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));

  for (unsigned seed : {21u, 22u}) {
    const auto values = mgt::test::random_floats(n, seed);
    in.assign(values);
    MGT_CUDA_CHECK(cudaMemsetAsync(result.data(), 0, result.bytes(), compute_));
    MGT_CUDA_CHECK(cudaGraphLaunch(exec, compute_));
    sync();
    EXPECT_EQ(out.to_vector(), values) << "graph launch with inputs of seed " << seed;
  }
  EXPECT_EQ(comm_->collective_count(), before + 3) << "a launch runs what was captured, uncounted";
  MGT_CUDA_CHECK(cudaGraphExecDestroy(exec));
  MGT_CUDA_CHECK(cudaGraphDestroy(graph));
}

}  // namespace
