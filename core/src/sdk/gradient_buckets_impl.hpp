#pragma once
// GradientBuckets' state and stages (mgtrain/gradient_buckets.hpp), kept out of the public header
// so that the SDK's class is an opaque handle: its private stages, communicators and shared-memory
// pointers can change without changing what a built sync plugin sees.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "mgtrain/gradient_buckets.hpp"

namespace mgt {

class SharedMemoryAllreduce;

class GradientBucketsImpl {
 public:
  GradientBucketsImpl();
  ~GradientBucketsImpl();
  GradientBucketsImpl(const GradientBucketsImpl&) = delete;
  GradientBucketsImpl& operator=(const GradientBucketsImpl&) = delete;

  // Collective over `comm` (it may split the communicator and map shared memory).
  void setup(Communicator& comm, ParameterStore& store, size_t bucket_bytes, const BucketOptions& options);
  // Starts every bucket whose gradients are now all final; advances those in flight.
  void mark_ready(const std::vector<ParamHandle>& handles);
  // Starts what is left and waits for every bucket; the buffer then holds the sum over ranks.
  // Returns the seconds spent waiting (communication not hidden behind backward).
  double finish();

  size_t bucket_count() const { return buckets_.size(); }
  bool hierarchical() const { return node_ != nullptr; }
  bool shared_memory() const { return shared_ != nullptr; }
  // The shared update's split of the optimizer step, for SyncStrategy::sharding(); null when the
  // ranks each update the whole buffer (not asked for, or the shared memory does not apply).
  OptimizerSharding* sharding() const { return update_.get(); }

  // The bfloat16 wire's error-feedback residual, this rank's (/sync/residual.rank<R> in a
  // checkpoint); none with the FP32 wire. `strategy` names the strategy in the note on restore.
  std::vector<SyncStateArray> checkpoint_state() const;
  void restore_state(const std::vector<SyncStateArray>& saved, int saved_ranks, const std::string& strategy);

 private:
  // A bucket goes through stages in order, each one collective: flat, the all-reduce; hierarchical,
  // the reduce to the node's leader, the leaders' all-reduce, the node's broadcast.
  enum Stage : int { kNodeReduce = 0, kLeaders = 1, kNodeBroadcast = 2, kStages = 3 };
  struct Bucket {
    size_t begin = 0, end = 0;  // float range of the flat gradient buffer
    size_t params = 0;          // parameters in the bucket
    size_t ready = 0;           // of them final in this backward pass
    int started = 0;            // stages started in this step (flat: its one stage is kLeaders)
    std::unique_ptr<CommRequest> request;
  };
  void launch(size_t index);
  void start_stage(size_t index, int stage);
  void end_bucket(size_t index);
  void progress();
  void* wire_data(const Bucket& b);
  size_t wire_count(const Bucket& b) const { return b.end - b.begin; }
  ElementType wire_type() const { return wire_ == WireFormat::bf16 ? ElementType::bf16 : ElementType::f32; }
  Communicator& stage_comm(int stage);

  Communicator* comm_ = nullptr;
  ParameterStore* store_ = nullptr;
  std::vector<Bucket> buckets_;          // in launch order: last layer first
  std::vector<size_t> bucket_of_param_;  // parameter handle -> bucket index
  bool overlap_ = false;
  WireFormat wire_ = WireFormat::fp32;
  // Hierarchical: the node's ranks for the reduce and, apart, for the broadcast (so each
  // communicator sees its collectives in bucket order on every rank), and the leaders' (local rank
  // 0 of each node; the other ranks hold a part they never use). Null: flat.
  std::unique_ptr<Communicator> node_, node_broadcast_, leaders_;
  // Null: through MPI. Else the store's gradients live in its memory (ParameterStore::place_grads).
  std::unique_ptr<SharedMemoryAllreduce> shared_;
  // Non-null: the shared update; each rank's sum is of its part alone (reduce-scatter).
  std::unique_ptr<OptimizerSharding> update_;
  std::vector<int> stages_;  // this rank's stages of a bucket (a node's other ranks skip kLeaders)
  // Per stage, the next bucket to start it: every rank starts each stage in bucket order.
  size_t next_start_[kStages] = {0, 0, 0};
  size_t next_finished_ = 0;      // buckets before it were seen complete (observer told)
  std::vector<uint16_t> wire16_;  // bf16: the rounded gradient, then its sum
  std::vector<float> residual_;   // bf16: what rounding dropped, added to the next gradient
};

}  // namespace mgt
