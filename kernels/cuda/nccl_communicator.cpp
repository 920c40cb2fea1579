#include "kernels/cuda/nccl_communicator.hpp"

#include <chrono>
#include <cstdlib>
#include <exception>
#include <initializer_list>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "kernels/cuda/check.hpp"
#include "mgtrain/error.hpp"

// MGT_NCCL_CHECK with NCCL's own account of the failure (ncclGetLastError), which names the peer,
// transport or argument at fault where the status alone says only "system error".
#define MGT_NCCL_COMM_CHECK(call, comm)                                                  \
  do {                                                                                   \
    const ncclResult_t mgt_nccl_status_ = (call);                                        \
    if (mgt_nccl_status_ != ncclSuccess)                                                 \
      ::mgt::cuda::detail::raise_error("NCCL", #call, __FILE__, __LINE__, nullptr,       \
                                       nccl_error_text(mgt_nccl_status_, comm).c_str()); \
  } while (0)

namespace mgt::cuda {

namespace {

using Clock = std::chrono::steady_clock;

// NCCL's text for `status`, then its last error message on `comm` when it has one.
std::string nccl_error_text(ncclResult_t status, ncclComm_t comm) {
  std::string text = ncclGetErrorString(status);
  const char* last = ncclGetLastError(comm);
  if (last && *last) text += std::string(": ") + last;
  return text;
}

// "300", "0.5": the timeout as configured.
std::string seconds_text(double seconds) {
  std::ostringstream out;
  out << seconds;
  return out.str();
}

std::string overdue_message(const std::string& what, int64_t step, double timeout_s, int rank) {
  return what + " at step " + std::to_string(step) + " did not finish within " + seconds_text(timeout_s) +
         " s on rank " + std::to_string(rank) +
         ": its device work is still pending; a peer rank is stuck or gone, or a kernel hangs "
         "(comm.timeout_s)";
}

// Why a host wait ended.
enum class WaitEnd { done, timed_out, nccl_failed };

// Polls each stream until its work is done, `comm` (when not null) reports an asynchronous error,
// or `timeout_s` passes. Sleeping between polls leaves the core to the rank's other threads (the
// prefetcher) and to oversubscribed peers. A failed query throws CudaError.
WaitEnd poll_streams(std::initializer_list<cudaStream_t> streams, double timeout_s, ncclComm_t comm,
                     ncclResult_t* nccl_error) {
  const auto deadline =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s));
  const auto nccl_failed = [&] {
    if (!comm) return false;
    ncclResult_t async = ncclSuccess;
    MGT_NCCL_CHECK(ncclCommGetAsyncError(comm, &async));
    if (async == ncclSuccess || async == ncclInProgress) return false;
    *nccl_error = async;
    return true;
  };
  for (cudaStream_t stream : streams) {
    while (true) {
      const cudaError_t status = cudaStreamQuery(stream);
      if (status == cudaSuccess) break;
      if (status != cudaErrorNotReady)
        detail::raise_error("CUDA", "cudaStreamQuery", __FILE__, __LINE__, cudaGetErrorName(status),
                            cudaGetErrorString(status));
      // "Not ready" is no error: leave nothing behind for the next check.
      cudaGetLastError();
      if (nccl_failed()) return WaitEnd::nccl_failed;
      if (Clock::now() >= deadline) return WaitEnd::timed_out;
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
  // An error can be pending with the streams idle (a failed proxy operation, a lost peer).
  return nccl_failed() ? WaitEnd::nccl_failed : WaitEnd::done;
}

struct EventDeleter {
  void operator()(CUevent_st* event) const noexcept { cudaEventDestroy(event); }
};
using Event = std::unique_ptr<CUevent_st, EventDeleter>;

// Events order streams only: no timing, so recording and waiting stay cheap.
Event make_event() {
  cudaEvent_t event = nullptr;
  MGT_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  return Event(event);
}

// Non-blocking: the legacy default stream must not serialise with communication behind the
// caller's back; the order is the explicit one through events.
std::shared_ptr<CUstream_st> make_stream() {
  cudaStream_t stream = nullptr;
  MGT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  return std::shared_ptr<CUstream_st>(stream, [](cudaStream_t s) { cudaStreamDestroy(s); });
}

// Requests in flight each get an event of their own, so waiting for one does not wait for those
// started after it; past this many, a reused event orders after a later operation, which is still
// correct since the communication stream runs its operations in order.
constexpr size_t kRequestEvents = 16;

// The device is checked before any stream or event is created on the wrong one.
int require_current(int device) {
  int current = -1;
  MGT_CUDA_CHECK(cudaGetDevice(&current));
  MGT_CHECK(current == device, CudaError,
            "nccl communicator for device " + std::to_string(device) + ": the current device is " +
                std::to_string(current) + ", expected " + std::to_string(device));
  return device;
}

// A non-blocking operation enqueued on the communication stream: `done` is recorded after it.
class NcclRequest final : public CommRequest {
 public:
  NcclRequest(cudaStream_t compute, cudaEvent_t done) : compute_(compute), done_(done) {}
  ~NcclRequest() override {
    // Work on `compute` after a dropped request must still not touch its buffer early.
    if (!joined_) cudaStreamWaitEvent(compute_, done_, 0);
  }
  // Enqueued is as far as the host follows it; completion is ordered on the device.
  bool test() override { return true; }
  void wait() override {
    if (joined_) return;
    MGT_CUDA_CHECK(cudaStreamWaitEvent(compute_, done_, 0));
    joined_ = true;
  }

 private:
  cudaStream_t compute_;
  cudaEvent_t done_;
  bool joined_ = false;
};

// What a request of zero elements waits for.
class DoneRequest final : public CommRequest {
 public:
  bool test() override { return true; }
  void wait() override {}
};

ncclDataType_t nccl_type(ElementType type) { return type == ElementType::f32 ? ncclFloat32 : ncclBfloat16; }

class NcclCommunicator final : public Communicator {
 public:
  // Bootstrap over `host`: rank 0 makes the unique id, every rank joins with it.
  NcclCommunicator(Communicator& host, cudaStream_t compute, int device)
      : host_(host), compute_(compute), device_(require_current(device)), stream_(make_stream()) {
    make_events();
    ncclUniqueId id{};
    if (host_.rank() == 0) MGT_NCCL_CHECK(ncclGetUniqueId(&id));
    host_.broadcast(&id, sizeof id, 0);
    MGT_NCCL_COMM_CHECK(ncclCommInitRank(&comm_, host_.size(), id, host_.rank()), comm_);
  }

  // A part of `parent` split over `host`; split() fills comm_ afterwards, so a failed
  // ncclCommSplit leaves nothing to clean up but this object.
  NcclCommunicator(std::unique_ptr<Communicator> host, const NcclCommunicator& parent)
      : owned_host_(std::move(host)),
        host_(*owned_host_),
        compute_(parent.compute_),
        device_(parent.device_),
        stream_(parent.stream_) {
    make_events();
    timeout_s_ = parent.timeout_s_;
    step_ = parent.step_;
  }

  // ncclCommAbort and ncclCommDestroy return only once no CUDA graph holding work captured from
  // this communicator is left (NCCL waits for the graphs' destruction): the graphs go first.
  ~NcclCommunicator() override {
    if (!comm_) return;
    if (failed_ || std::uncaught_exceptions() > 0) {
      // Failed, or the job is failing: peers may never join what is pending, so do not wait out
      // a deadline. The abort also ends this rank's NCCL kernels stuck waiting for them.
      ncclCommAbort(comm_);
      return;
    }
    try {
      wait_for("nccl shutdown", {stream_.get()});
      ncclCommDestroy(comm_);
    } catch (...) {
      ncclCommAbort(comm_);  // a destructor reports nothing
    }
  }
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override { return host_.rank(); }
  int size() const override { return host_.size(); }
  int local_rank() const override { return host_.local_rank(); }
  int local_size() const override { return host_.local_size(); }
  int node() const override { return host_.node(); }
  std::string backend() const override { return "nccl"; }

  void allreduce_sum(float* data, size_t count) override {
    if (count == 0) return;
    require_live("allreduce (floats)");
    ++collective_count_;
    fork();
    MGT_NCCL_COMM_CHECK(ncclAllReduce(data, data, count, ncclFloat32, ncclSum, comm_, stream()), comm_);
    join();
  }
  void allreduce_sum(double* data, size_t count) override {
    if (count == 0) return;
    require_live("allreduce (doubles)");
    ++collective_count_;
    fork();
    MGT_NCCL_COMM_CHECK(ncclAllReduce(data, data, count, ncclFloat64, ncclSum, comm_, stream()), comm_);
    join();
  }
  void allreduce_max(int64_t* data, size_t count) override {
    if (count == 0) return;
    require_live("allreduce-max (integers)");
    ++collective_count_;
    fork();
    MGT_NCCL_COMM_CHECK(ncclAllReduce(data, data, count, ncclInt64, ncclMax, comm_, stream()), comm_);
    join();
  }
  std::unique_ptr<CommRequest> iallreduce_sum(float* data, size_t count) override {
    if (count == 0) return std::make_unique<DoneRequest>();
    require_live("non-blocking allreduce (floats)");
    ++collective_count_;
    fork();
    MGT_NCCL_COMM_CHECK(ncclAllReduce(data, data, count, ncclFloat32, ncclSum, comm_, stream()), comm_);
    return std::make_unique<NcclRequest>(compute_, mark());
  }
  void allreduce_sum(void* data, size_t count, ElementType type) override {
    if (count == 0) return;
    require_live(type == ElementType::f32 ? "allreduce (floats)" : "allreduce (bfloat16)");
    ++collective_count_;
    fork();
    MGT_NCCL_COMM_CHECK(ncclAllReduce(data, data, count, nccl_type(type), ncclSum, comm_, stream()), comm_);
    join();
  }
  void reduce_scatter_sum(const void* send, void* recv, size_t count, ElementType type) override {
    if (count == 0) return;
    require_live(type == ElementType::f32 ? "reduce-scatter (floats)" : "reduce-scatter (bfloat16)");
    ++collective_count_;
    fork();
    // NCCL's in place is recv at send + rank * count; this interface's puts the sum first.
    const bool in_place = send == recv;
    void* out = in_place ? static_cast<char*>(recv) + static_cast<size_t>(rank()) * count * element_bytes(type) : recv;
    MGT_NCCL_COMM_CHECK(ncclReduceScatter(send, out, count, nccl_type(type), ncclSum, comm_, stream()), comm_);
    if (in_place && rank() != 0)
      MGT_CUDA_CHECK(cudaMemcpyAsync(recv, out, count * element_bytes(type), cudaMemcpyDeviceToDevice, stream()));
    join();
  }
  using Communicator::allgather;
  void broadcast(void* data, size_t bytes, int root) override {
    if (bytes == 0) return;
    require_live("broadcast (bytes)");
    ++collective_count_;
    fork();
    MGT_NCCL_COMM_CHECK(ncclBroadcast(data, data, bytes, ncclUint8, root, comm_, stream()), comm_);
    join();
  }
  void allgather(const void* send, void* recv, size_t bytes) override {
    if (bytes == 0) return;
    require_live("allgather (bytes)");
    ++collective_count_;
    fork();
    MGT_NCCL_COMM_CHECK(ncclAllGather(send, recv, bytes, ncclUint8, comm_, stream()), comm_);
    join();
  }
  void send(const void* data, size_t bytes, int dest, int /*tag*/) override {
    if (bytes == 0) return;
    require_live("send (bytes)");
    fork();
    MGT_NCCL_COMM_CHECK(ncclSend(data, bytes, ncclUint8, dest, comm_, stream()), comm_);
    join();
  }
  void recv(void* data, size_t bytes, int source, int /*tag*/) override {
    if (bytes == 0) return;
    require_live("receive (bytes)");
    fork();
    MGT_NCCL_COMM_CHECK(ncclRecv(data, bytes, ncclUint8, source, comm_, stream()), comm_);
    join();
  }
  std::unique_ptr<CommRequest> isend(const void* data, size_t bytes, int dest, int /*tag*/) override {
    if (bytes == 0) return std::make_unique<DoneRequest>();
    require_live("send (bytes)");
    fork();
    MGT_NCCL_COMM_CHECK(ncclSend(data, bytes, ncclUint8, dest, comm_, stream()), comm_);
    return std::make_unique<NcclRequest>(compute_, mark());
  }
  std::unique_ptr<CommRequest> irecv(void* data, size_t bytes, int source, int /*tag*/) override {
    if (bytes == 0) return std::make_unique<DoneRequest>();
    require_live("receive (bytes)");
    fork();
    MGT_NCCL_COMM_CHECK(ncclRecv(data, bytes, ncclUint8, source, comm_, stream()), comm_);
    return std::make_unique<NcclRequest>(compute_, mark());
  }

  std::unique_ptr<Communicator> split(int color, int key) override {
    // NCCL_SPLIT_NOCOLOR and MPI_UNDEFINED (no communicator for this rank) have no place in the
    // interface: every caller gets a communicator.
    MGT_CHECK(
        color >= 0, CommError,
        "nccl split on rank " + std::to_string(rank()) + ": color " + std::to_string(color) + ", expected 0 or more");
    require_live("split");
    auto sub = std::make_unique<NcclCommunicator>(host_.split(color, key), *this);
    // NCCL orders the new ranks by key, ties by rank here, as MPI_Comm_split does; the NCCL ranks
    // are the host ranks, so the two parts agree.
    MGT_NCCL_COMM_CHECK(ncclCommSplit(comm_, color, key, &sub->comm_, nullptr), comm_);
    int sub_rank = -1;
    MGT_NCCL_COMM_CHECK(ncclCommUserRank(sub->comm_, &sub_rank), sub->comm_);
    MGT_CHECK(sub_rank == sub->rank(), CommError,
              "nccl split on rank " + std::to_string(rank()) + ": NCCL rank " + std::to_string(sub_rank) +
                  " in the new communicator, expected the host's rank " + std::to_string(sub->rank()));
    return sub;
  }

  void barrier() override {
    require_live("barrier");
    ++collective_count_;
    wait_for("nccl barrier", {compute_, stream()});
    host_.barrier();
  }

  void raise_if_failed() {
    if (failed_) return;  // said once already: every later operation says so
    ncclResult_t async = ncclSuccess;
    MGT_NCCL_CHECK(ncclCommGetAsyncError(comm_, &async));
    if (async == ncclSuccess || async == ncclInProgress) return;
    fail(failure_message("communication", async));
  }

  // The host's abort ends every process of the job, NCCL's with them. ncclCommAbort first would
  // wait for this rank's CUDA graphs to be destroyed, and so might never get there.
  [[noreturn]] void abort(int exit_code) override {
    host_.abort(exit_code);
    std::_Exit(exit_code);  // host.abort does not return; a virtual call cannot promise so
  }

 private:
  cudaStream_t stream() const { return stream_.get(); }

  void make_events() {
    fork_ = make_event();
    join_ = make_event();
    for (size_t i = 0; i < kRequestEvents; ++i) done_.push_back(make_event());
  }

  void require_live(const char* op) const {
    MGT_CHECK(!failed_, CommError,
              std::string("nccl ") + op + " at step " + std::to_string(step_) + " on rank " + std::to_string(rank()) +
                  ": the communicator failed at an earlier error");
  }

  // The communication stream starts after the work enqueued on `compute` so far.
  void fork() {
    MGT_CUDA_CHECK(cudaEventRecord(fork_.get(), compute_));
    MGT_CUDA_CHECK(cudaStreamWaitEvent(stream(), fork_.get(), 0));
  }
  // Work enqueued on `compute` from now on starts after the communication enqueued so far.
  void join() {
    MGT_CUDA_CHECK(cudaEventRecord(join_.get(), stream()));
    MGT_CUDA_CHECK(cudaStreamWaitEvent(compute_, join_.get(), 0));
  }
  // An event after the communication enqueued so far, for a request to wait on.
  cudaEvent_t mark() {
    cudaEvent_t event = done_[next_done_++ % done_.size()].get();
    MGT_CUDA_CHECK(cudaEventRecord(event, stream()));
    return event;
  }

  // Waits for the streams under the deadline. On expiry, an asynchronous NCCL error or a device
  // error, marks the communicator failed and throws.
  void wait_for(const std::string& what, std::initializer_list<cudaStream_t> streams) {
    ncclResult_t nccl_error = ncclSuccess;
    WaitEnd end = WaitEnd::done;
    try {
      end = poll_streams(streams, timeout_s_, comm_, &nccl_error);
    } catch (...) {
      failed_ = true;
      throw;
    }
    if (end == WaitEnd::done) return;
    fail(end == WaitEnd::timed_out ? overdue_message(what, step_, timeout_s_, rank())
                                   : failure_message(what, nccl_error));
  }

  // "<what> at step <step> failed on rank <rank>: <NCCL's reason>".
  std::string failure_message(const std::string& what, ncclResult_t status) const {
    return what + " at step " + std::to_string(step_) + " failed on rank " + std::to_string(rank()) + ": " +
           nccl_error_text(status, comm_);
  }

  // Marks the communicator failed, so that every later operation refuses, and throws. It is
  // aborted, releasing the peers blocked on this rank, when destroyed: after the CUDA graphs that
  // hold its work, since NCCL's abort waits for those to go.
  [[noreturn]] void fail(const std::string& message) {
    failed_ = true;
    throw CommError(message);
  }

  // Split parts own their part of the host communicator; declared first, so host_ may refer to it.
  std::unique_ptr<Communicator> owned_host_;
  Communicator& host_;
  cudaStream_t compute_ = nullptr;
  int device_ = 0;
  std::shared_ptr<CUstream_st> stream_;  // shared with split parts
  Event fork_, join_;
  std::vector<Event> done_;  // one per request in flight
  size_t next_done_ = 0;
  ncclComm_t comm_ = nullptr;
  bool failed_ = false;  // a deadline passed or NCCL failed: aborted, not destroyed, at the end
};

}  // namespace

std::unique_ptr<Communicator> make_nccl_communicator(Communicator& host, Stream compute, int device) {
  return std::make_unique<NcclCommunicator>(host, compute, device);
}

void raise_if_failed(Communicator& comm) {
  if (auto* nccl = dynamic_cast<NcclCommunicator*>(&comm)) nccl->raise_if_failed();
}

void wait_with_deadline(Stream stream, double timeout_s, const std::string& what, int rank, int64_t step) {
  ncclResult_t unused = ncclSuccess;
  if (poll_streams({stream}, timeout_s, nullptr, &unused) == WaitEnd::timed_out)
    throw CommError(overdue_message(what, step, timeout_s, rank));
}

}  // namespace mgt::cuda
