#pragma once
// All-reduce of host memory through memory that every rank of a node maps (POSIX shared memory),
// instead of through MPI's copies between processes. Each rank has a slot there, where its
// gradients live (ParameterStore::place_grads), so backward writes them in place. Local rank l
// sums part l of a range over the slots (in local-rank order, so every rank gets the same bits)
// and, when the job spans nodes, all-reduces that part with the ranks of local rank l on the other
// nodes, one network all-reduce per local rank at once (as NCCL's rings per GPU); it then writes
// the sum into every slot. Two barriers in shared memory per call, no copy in or out, no system
// call on the way.
//
// With a parameter region (one node only), the node's ranks also share one copy of the parameters
// (ParameterStore::place_params) and the optimizer step is split among them: local rank l sums
// only part l of the gradient (reduce_scatter_sum), updates part l of the shared parameters, and
// every rank waits for the others' parts (wait_for_parts). The optimizer's work and state on each
// rank fall to 1 / ranks of the node, and nothing is written back into the other slots. Backward
// then writes into one of two sets of slots by turns where they are small (a line is then written
// two steps after another core read it): into its slot directly, or into a buffer of its own from
// which the parts the others sum are copied into the slot, with ordinary or streamed stores, as
// they cost where the cores are now (slot_writes.hpp); with one set always its own buffer and
// streamed copies, so that no line another core read last step need be taken back from it store
// by store.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "mgtrain/communicator.hpp"
#include "slot_writes.hpp"

namespace mgt {

class SharedMemoryAllreduce {
 public:
  // Collective over `comm`. Null on every rank when it cannot be used, with the reason in
  // `why_not` (a rank could not create or map the memory, or the nodes run different numbers of
  // ranks); the caller then reduces through MPI.
  // `with_params`: a region for the shared parameters too (refused across nodes).
  static std::unique_ptr<SharedMemoryAllreduce> create(Communicator& comm, size_t count, std::string& why_not,
                                                       bool with_params = false);
  ~SharedMemoryAllreduce();
  SharedMemoryAllreduce(const SharedMemoryAllreduce&) = delete;
  SharedMemoryAllreduce& operator=(const SharedMemoryAllreduce&) = delete;

  // This rank's slot of `count` floats, and what keeps it mapped (for the store that points into it).
  float* slot() const { return slot(local_rank_); }
  std::shared_ptr<void> memory() const { return mapping_; }
  // Where this rank's backward writes its gradients (ParameterStore::place_grads), and what keeps
  // that memory: its slot; with the parameters, for the coming reduce_scatter_sum, a buffer of the
  // slot's size of its own or its slot of the coming set (slot_writes.hpp), which the store is
  // pointed at after each reduce_scatter_sum.
  float* gradients() const;
  std::shared_ptr<void> gradients_memory() const { return own_gradients_ ? own_gradients_ : mapping_; }
  // Every place gradients() may give: the slot; with the parameters the own buffer and this rank's
  // slot of each set.
  std::vector<float*> gradient_places() const;

  // Sums data[0, count) over every rank of the communicator, in place: slot()[offset, offset +
  // count) of each rank, which `data` is where the gradients live in the slot (else it is copied in
  // and out). Blocking; a rank that does not arrive within the communicator's deadline is named
  // (CommError).
  void allreduce_sum(float* data, size_t offset, size_t count);

  // The shared update (with_params). This rank's part of the `count` floats: part_floats() from
  // part_begin(), whole cache lines; the last rank's may reach past `count` (the slots and the
  // parameters are zero there).
  float* params() const;
  size_t part_begin() const { return part_floats_ * static_cast<size_t>(local_rank_); }
  size_t part_floats() const { return part_floats_; }
  // Sums this rank's part of the gradient over the ranks, in local-rank order (the bits of
  // allreduce_sum), into the gradient backward wrote (gradients() before the call, summed()
  // after): where that was the rank's own buffer, the other parts go into this rank's slot of the
  // step's set for the ranks they belong to (above), and are left as they were.
  void reduce_scatter_sum();
  // The gradient of the last reduce_scatter_sum, this rank's part summed.
  float* summed() const { return summed_ ? summed_ : gradients(); }
  // Sums `n` doubles over the node's ranks, in local-rank order, in place. It is also the point
  // after which no rank reads another's slot: they may be written again.
  void sum_over_ranks(double* values, size_t n);
  // Waits until every rank has updated its part of the parameters.
  void wait_for_parts();

  int local_rank() const { return local_rank_; }
  int local_size() const { return local_size_; }
  // The communicator's rank of each local rank.
  const std::vector<int>& world_ranks() const { return world_rank_of_local_; }

 private:
  SharedMemoryAllreduce() = default;
  // The mapping's regions of slot_floats_ each: the slots' first set, the parameters (with_params),
  // then the slots' second set (slot_sets_ = 2).
  float* region(int index) const;
  float* slot(int local_rank, int set = 0) const;
  // Waits until every rank of the node has arrived here; `what` and `count` name the operation in
  // the timeout message.
  void barrier(const char* what, size_t count);
  // How the coming step's gradient reaches this rank's slot.
  SlotWrites::Kind next_way();
  // Whether every rank of the node has reached the barrier this rank is in.
  bool all_arrived() const;
  // out[0, n) = the sum of slot(r, set)[at, at + n) over the local ranks r, in local-rank order, this
  // rank's term read from own[at, at + n) instead: every rank, and both forms of the sum, get the
  // same bits. `out` may be this rank's term (one pass, kernels::sum_terms). The other ranks' slots
  // are prefetched from at + n for the next block, up to `end`.
  void sum_block(size_t at, size_t n, size_t end, const float* own, float* out, int set) const;

  Communicator* comm_ = nullptr;
  std::unique_ptr<Communicator> rail_;  // across nodes: the ranks of this local rank, one per node
  std::vector<int> world_rank_of_local_;
  std::shared_ptr<void> mapping_;        // unmapped with its last holder
  std::shared_ptr<void> own_gradients_;  // with the parameters: this rank's gradients, off the slots
  size_t count_ = 0;                     // floats set up for
  size_t part_floats_ = 0;               // a local rank's part of count_, whole cache lines
  size_t slot_floats_ = 0;               // every rank's part: count_ and then padding
  bool with_params_ = false;
  int slot_sets_ = 1;  // with the parameters and small enough: 2, used by turns (reduce_scatter_sum)
  int set_ = 0;        // the set of the last reduce_scatter_sum
  SlotWrites writes_;  // how this rank's gradient reaches its slot of a set
  SlotWrites::Kind way_ = SlotWrites::Kind::streamed;  // that of the coming reduce_scatter_sum
  float* summed_ = nullptr;                            // summed()
  int local_rank_ = 0, local_size_ = 1;
  uint64_t generation_ = 0;                        // barriers passed
  mutable std::vector<const float*> block_terms_;  // sum_block's terms, one per local rank
};

}  // namespace mgt
