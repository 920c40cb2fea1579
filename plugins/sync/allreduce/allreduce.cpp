// Sync plugin `allreduce`: the gradients are summed over all ranks in buckets (sync.bucket_mb),
// in reverse layer order, after backward or overlapped with it (sync.overlap). Each rank's loss
// is already scaled by 1/global_batch, so the sum is the gradient of the global mean loss.
// sync.hierarchical and sync.wire (mgtrain/gradient_buckets.hpp) reduce across nodes through one
// leader per node and send the gradients in bfloat16 with error feedback.
// With sync.deterministic, the global batch is cut into sync.micro_shards micro-shards summed in
// one fixed tree instead, which gives the same bits at any power-of-two number of ranks.
// One implementation with grad_accum (../common/bucketed_allreduce.hpp): users name both plugins.
#include "../common/bucketed_allreduce.hpp"
#include "mgtrain/plugin.hpp"

namespace {

const mgt::ConfigKey kKeys[] = {
    kBucketMbKey,
    kOverlapKey,
    mgt::kHierarchicalKey,
    mgt::kSharedMemoryKey,
    mgt::kWireKey,
    {"sync.deterministic", mgt::KeyType::boolean, "false",
     "sum sync.micro_shards micro-shard gradients in one fixed tree: identical bits at any "
     "power-of-two number of ranks"},
    {"sync.micro_shards", mgt::KeyType::positive_integer, "8",
     "deterministic mode: micro-shards per global batch (a power of two, a multiple of the ranks)"},
};

class AllReduce final : public BucketedAllreduce {
 public:
  explicit AllReduce(const mgt::ConfigSection& config)
      : BucketedAllreduce(config, {"allreduce", 1, config.get_int("micro_shards")}) {}
};

}  // namespace

MGT_SYNC_PLUGIN("allreduce", "1.3.0",
                "synchronous all-reduce of the gradients in buckets, or deterministic over micro-shards", kKeys,
                AllReduce)
