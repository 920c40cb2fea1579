#pragma once
// Bucketed all-reduce of the flat gradient buffer. Parameters are grouped into buckets of about
// `bucket_bytes` in reverse layer order (the order backward produces them). With `overlap`, each
// bucket's non-blocking all-reduce starts as soon as all its gradients are final and runs while
// the rest of backward does; without it, the buckets are reduced after backward by blocking
// all-reduces, which Open MPI runs about 1.5x faster on one node (its tuned collectives against
// libnbc) and which leave the cores to compute. Sync strategies built on all-reduce share it.
// The communicator's AllreduceObserver, when set, hears each bucket's start and completion.
//
// Hierarchical (across nodes): each bucket is summed inside the node to its leader (local rank 0,
// over shared memory), all-reduced among the leaders, one per node, and broadcast inside the node,
// so each node sends one copy of the gradient over the network instead of one per rank.
// Shared memory (the blocking FP32 all-reduce on MPI; by default in a job of one node): the ranks
// of a node sum each bucket through memory they all map, and across nodes (when asked) each rank
// all-reduces its part of the node's sum with the ranks of its local rank on the other nodes
// (SharedMemoryAllreduce); the leaders' form above then does not apply. A strategy that asks for
// the shared update (BucketOptions::shared_update) gets more on one node: its ranks share one copy
// of the parameters, each sums only its part of the gradient and the core updates that part alone
// (sharding()), so the optimizer's work and state are split among them instead of repeated.
// Wire format bf16: each rank rounds its gradient to bfloat16 before sending, keeping what the
// rounding dropped (the residual) and adding it to its next gradient before rounding (error
// feedback), so nothing is lost, only delayed by a step; every hop then carries half the bytes.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "mgtrain/communicator.hpp"
#include "mgtrain/config.hpp"
#include "mgtrain/export.hpp"
#include "mgtrain/parameters.hpp"
#include "mgtrain/sharding.hpp"
#include "mgtrain/sync.hpp"

namespace mgt {

class SharedMemoryAllreduce;

enum class Hierarchy { automatic, on, off };
enum class WireFormat { fp32, bf16 };

struct BucketOptions {
  bool overlap = false;
  // automatic: on when the ranks span more than one node and reduce host memory over MPI (NCCL
  // already follows the topology).
  Hierarchy hierarchy = Hierarchy::off;
  WireFormat wire = WireFormat::fp32;
  // Sum inside each node through shared memory where it applies (blocking, FP32, host memory over
  // MPI, more than one rank on a node): automatic, on a job of one node; on, across nodes too.
  Hierarchy shared_memory = Hierarchy::automatic;
  // Where the shared memory applies on a job of one node, to the host's store (not a view of a
  // step's own memory): the ranks share the parameters and split the optimizer step (the strategy
  // returns sharding() to the core). Asked for by the strategy, which must then hand sharding() on.
  bool shared_update = false;
};

// The config keys of a strategy built on GradientBuckets beyond sync.bucket_mb and sync.overlap.
inline constexpr ConfigKey kHierarchicalKey{
    "sync.hierarchical", KeyType::choice, "off",
    "across nodes, sum each bucket inside the node to its leader over shared memory, all-reduce among one leader "
    "per node, broadcast inside the node: on, off, or auto (on when the ranks span more than one node, on MPI; "
    "not in deterministic mode). Off by default: it has not yet measured faster than the flat all-reduce",
    "auto|on|off"};
inline constexpr ConfigKey kWireKey{
    "sync.wire", KeyType::choice, "fp32",
    "gradients on the wire: fp32, or bf16 (half the bytes; each rank carries what rounding dropped into its next "
    "step, error feedback, checkpointed; not in deterministic mode)",
    "fp32|bf16"};
inline constexpr ConfigKey kSharedMemoryKey{
    "sync.shared_memory", KeyType::choice, "auto",
    "sum each bucket among the ranks of a node through memory they all map instead of through MPI's copies (the "
    "blocking FP32 all-reduce over MPI): auto (when the job runs on one node), on (across nodes too: each rank "
    "then all-reduces its part of the node's sum with its peers of the same local rank; sync.hierarchical then "
    "does not apply), or off. On one node the ranks also share one copy of the parameters and each updates its "
    "part: the optimizer's work and state are split among them",
    "auto|on|off"};
// sync.overlap, sync.hierarchical, sync.shared_memory and sync.wire from a strategy's section (keys it lacks keep
// their defaults).
MGT_API BucketOptions bucket_options(const ConfigSection& section);
// Deterministic mode sums FP32 in its own fixed tree: an explicit sync.hierarchical = on or
// sync.wire = bf16 would be silently ignored there, so it is refused (ConfigError).
MGT_API void refuse_in_deterministic_mode(const BucketOptions& options);

class MGT_API GradientBuckets {
 public:
  GradientBuckets();
  ~GradientBuckets();
  GradientBuckets(const GradientBuckets&) = delete;
  GradientBuckets& operator=(const GradientBuckets&) = delete;

  // Collective over `comm` (it may split the communicator and map shared memory).
  void setup(Communicator& comm, ParameterStore& store, size_t bucket_bytes, const BucketOptions& options);
  void setup(Communicator& comm, ParameterStore& store, size_t bucket_bytes, bool overlap) {
    BucketOptions options;
    options.overlap = overlap;
    setup(comm, store, bucket_bytes, options);
  }
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
