#pragma once
// Bucketed all-reduce of the flat gradient buffer. Parameters are grouped into buckets of about
// `bucket_bytes` in reverse layer order (the order backward produces them). With `overlap`, each
// bucket's non-blocking all-reduce starts as soon as all its gradients are final and runs while
// the rest of backward does; without it, the buckets are reduced after backward by blocking
// all-reduces, which Open MPI runs faster on one node (its tuned collectives against
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

class GradientBucketsImpl;

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

// An opaque handle: the state lives in the core (GradientBucketsImpl), so that how the buckets
// are reduced can change without changing this class's layout.
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

  size_t bucket_count() const;
  bool hierarchical() const;
  bool shared_memory() const;
  // The shared update's split of the optimizer step, for SyncStrategy::sharding(); null when the
  // ranks each update the whole buffer (not asked for, or the shared memory does not apply).
  OptimizerSharding* sharding() const;

  // The bfloat16 wire's error-feedback residual, this rank's (/sync/residual.rank<R> in a
  // checkpoint); none with the FP32 wire. `strategy` names the strategy in the note on restore.
  std::vector<SyncStateArray> checkpoint_state() const;
  void restore_state(const std::vector<SyncStateArray>& saved, int saved_ranks, const std::string& strategy);

 private:
  std::unique_ptr<GradientBucketsImpl> impl_;
};

}  // namespace mgt
