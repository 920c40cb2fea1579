#pragma once
// All-reduce of host memory through memory that every rank of a node maps (POSIX shared memory),
// instead of through MPI's copies between processes. Each rank has a slot there, where its
// gradients live (ParameterStore::place_grads), so backward writes them in place. Local rank l
// sums part l of a range over the slots (in local-rank order, so every rank gets the same bits)
// and, when the job spans nodes, all-reduces that part with the ranks of local rank l on the other
// nodes, one network all-reduce per local rank at once (as NCCL's rings per GPU); it then writes
// the sum into every slot. Two barriers in shared memory per call, no copy in or out, no system
// call on the way.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "mgtrain/communicator.hpp"

namespace mgt {

class SharedMemoryAllreduce {
 public:
  // Collective over `comm`. Null on every rank when it cannot be used, with the reason in
  // `why_not` (a rank could not create or map the memory, or the nodes run different numbers of
  // ranks); the caller then reduces through MPI.
  static std::unique_ptr<SharedMemoryAllreduce> create(Communicator& comm, size_t count, std::string& why_not);
  ~SharedMemoryAllreduce();
  SharedMemoryAllreduce(const SharedMemoryAllreduce&) = delete;
  SharedMemoryAllreduce& operator=(const SharedMemoryAllreduce&) = delete;

  // This rank's slot of `count` floats, and what keeps it mapped (for the store that points into it).
  float* slot() const { return slot(local_rank_); }
  std::shared_ptr<void> memory() const { return mapping_; }

  // Sums data[0, count) over every rank of the communicator, in place: slot()[offset, offset +
  // count) of each rank, which `data` is where the gradients live in the slot (else it is copied in
  // and out). Blocking; a rank that does not arrive within the communicator's deadline is named
  // (CommError).
  void allreduce_sum(float* data, size_t offset, size_t count);

 private:
  SharedMemoryAllreduce() = default;
  float* slot(int local_rank) const;
  // Waits until every rank of the node has arrived here; `count` is for the timeout message.
  void barrier(size_t count);

  Communicator* comm_ = nullptr;
  std::unique_ptr<Communicator> rail_;  // across nodes: the ranks of this local rank, one per node
  std::vector<int> world_rank_of_local_;
  std::shared_ptr<void> mapping_;  // unmapped with its last holder
  size_t slot_floats_ = 0;         // count, rounded up to a cache line
  int local_rank_ = 0, local_size_ = 1;
  uint64_t generation_ = 0;  // barriers passed
};

}  // namespace mgt
