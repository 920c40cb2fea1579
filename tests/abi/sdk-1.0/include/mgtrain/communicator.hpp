#pragma once
// One abstract communicator over the ranks of a job: host memory through MPI, device memory
// through NCCL. Every wait on other ranks has a deadline; on expiry the call throws CommError
// naming the operation, the step and the rank(s) waited for, and the launcher ends the job.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "mgtrain/export.hpp"

namespace mgt {

// A non-blocking operation in flight.
class MGT_API CommRequest {
 public:
  virtual ~CommRequest() = default;
  virtual bool test() = 0;  // true when complete; drives progress
  virtual void wait() = 0;  // blocks up to the communicator's deadline
};

// A request that was complete when the call that made it returned.
class MGT_API CompletedRequest final : public CommRequest {
 public:
  bool test() override { return true; }
  void wait() override {}
};

// The elements of a typed collective: FP32, or bfloat16 (a float's upper 16 bits, held as
// uint16_t, rounded to nearest even): half the bytes on the wire, for compressed gradients.
enum class ElementType { f32, bf16 };
inline size_t element_bytes(ElementType type) { return type == ElementType::f32 ? 4 : 2; }

// Hears when each bucket of a bucketed all-reduce over a communicator (mgt::GradientBuckets)
// starts and when this rank sees it complete, for the timeline trace (metrics.trace). Called on
// the rank's main thread, between the strategy's calls.
class MGT_API AllreduceObserver {
 public:
  virtual ~AllreduceObserver() = default;
  virtual void bucket_started(size_t bucket, size_t bytes) = 0;
  virtual void bucket_finished(size_t bucket) = 0;
};

class MGT_API Communicator {
 public:
  // Message tags a plugin may use for its point-to-point messages; the core's and the built-in
  // plugins' are below kPluginTagFirst. (MPI guarantees tags up to 32767.)
  static constexpr int kPluginTagFirst = 16384;
  static constexpr int kPluginTagLast = 32767;

  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual int local_rank() const = 0;  // among ranks on this node
  virtual int local_size() const = 0;
  virtual int node() const = 0;  // index of this node
  virtual std::string backend() const = 0;

  // Sum in place over all ranks.
  virtual void allreduce_sum(float* data, size_t count) = 0;
  virtual void allreduce_sum(double* data, size_t count) = 0;
  virtual void allreduce_max(int64_t* data, size_t count) = 0;
  virtual std::unique_ptr<CommRequest> iallreduce_sum(float* data, size_t count) = 0;
  // Sum in place over all ranks of `count` elements of `type`. bfloat16 sums are formed in FP32
  // and rounded back to bfloat16 at each addition the implementation makes (as NCCL's).
  virtual void allreduce_sum(void* data, size_t count, ElementType type) = 0;
  // Each rank's `send` holds size() blocks of `count` elements; rank r's `recv` (count elements)
  // gets the sum over the ranks of their block r (MPI_Reduce_scatter_block, ncclReduceScatter).
  // `send` may be `recv` (in place): the sum then lands in its first block. With allgather below,
  // the two halves of an all-reduce, for a strategy that updates a shard.
  virtual void reduce_scatter_sum(const void* send, void* recv, size_t count, ElementType type) = 0;
  // Sum of `count` elements of `type` over all ranks into rank `root`'s `data`, in place; the
  // other ranks' `data` is left undefined. With broadcast, the halves of an all-reduce through one
  // rank (a node's leader, for the hierarchical all-reduce). The default is an all-reduce, which
  // gives the root the same sum: a backend without a reduce of its own (NCCL's is not wired) works.
  virtual void reduce_sum(void* data, size_t count, ElementType type, int root) {
    (void)root;
    allreduce_sum(data, count, type);
  }
  // Non-blocking forms of the typed all-reduce, of reduce_sum and of broadcast: the buffer must
  // stay as it is until the request completes. The defaults run the blocking call and return it
  // complete, so a backend without them is correct, only not overlapped.
  virtual std::unique_ptr<CommRequest> iallreduce_sum_typed(void* data, size_t count, ElementType type) {
    allreduce_sum(data, count, type);
    return std::make_unique<CompletedRequest>();
  }
  virtual std::unique_ptr<CommRequest> ireduce_sum(void* data, size_t count, ElementType type, int root) {
    reduce_sum(data, count, type, root);
    return std::make_unique<CompletedRequest>();
  }
  virtual std::unique_ptr<CommRequest> ibroadcast(void* data, size_t bytes, int root) {
    broadcast(data, bytes, root);
    return std::make_unique<CompletedRequest>();
  }
  // Each rank's `count` elements of `type`; recv holds size() blocks, rank r's at block r.
  void allgather(const void* send, void* recv, size_t count, ElementType type) {
    allgather(send, recv, count * element_bytes(type));
  }
  virtual void broadcast(void* data, size_t bytes, int root) = 0;
  // recv holds size() * bytes; rank r's block lands at recv + r * bytes.
  virtual void allgather(const void* send, void* recv, size_t bytes) = 0;
  virtual void send(const void* data, size_t bytes, int dest, int tag) = 0;
  virtual void recv(void* data, size_t bytes, int source, int tag) = 0;
  // Non-blocking point-to-point; the buffer must stay valid until the request completes.
  virtual std::unique_ptr<CommRequest> isend(const void* data, size_t bytes, int dest, int tag) = 0;
  virtual std::unique_ptr<CommRequest> irecv(void* data, size_t bytes, int source, int tag) = 0;
  // The ranks passing the same color, ordered by key (like MPI_Comm_split); every rank must call.
  virtual std::unique_ptr<Communicator> split(int color, int key) = 0;
  virtual void barrier() = 0;
  // Ends every rank of the job now.
  [[noreturn]] virtual void abort(int exit_code) = 0;

  // Deadline for each wait, and the step named in timeout messages.
  void set_timeout_seconds(double seconds) { timeout_s_ = seconds; }
  double timeout_seconds() const { return timeout_s_; }
  void set_step(int64_t step) { step_ = step; }
  int64_t step() const { return step_; }

  // Counts collectives started, for tests that check a step made no communication.
  int64_t collective_count() const { return collective_count_; }
  // Counts a collective over these ranks made by other means (through shared memory).
  void count_collective() { ++collective_count_; }

  // Who hears of the bucketed all-reduces over this communicator; null (the default): nobody.
  void set_allreduce_observer(AllreduceObserver* observer) { allreduce_observer_ = observer; }
  AllreduceObserver* allreduce_observer() const { return allreduce_observer_; }

 protected:
  double timeout_s_ = 300.0;
  int64_t step_ = 0;
  int64_t collective_count_ = 0;
  AllreduceObserver* allreduce_observer_ = nullptr;
};

}  // namespace mgt
