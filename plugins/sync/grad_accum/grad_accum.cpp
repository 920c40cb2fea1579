// Sync plugin `grad_accum`: each rank accumulates sync.accum_steps micro-batches into its gradient
// buffer (layers add their gradients) and the ranks synchronise once, through the bucketed
// all-reduce, on the last one; the other micro-steps make no communication at all.
// Global batch = world x micro-batch x accum_steps. With sync.deterministic, the world x
// accum_steps micro-batches are summed in one fixed tree instead: (np=1, k=8) and (np=8, k=1)
// give the same bits.
// One implementation with allreduce (../common/bucketed_allreduce.hpp): users name both plugins.
#include "../common/bucketed_allreduce.hpp"
#include "mgtrain/plugin.hpp"

namespace {

const mgt::ConfigKey kKeys[] = {
    {"sync.accum_steps", mgt::KeyType::positive_integer, "2", "micro-batches accumulated per optimizer step"},
    kBucketMbKey,
    kOverlapKey,
    mgt::kHierarchicalKey,
    mgt::kSharedMemoryKey,
    mgt::kWireKey,
    {"sync.deterministic", mgt::KeyType::boolean, "false",
     "sum the micro-batch gradients in one fixed tree: identical bits for any split of the same "
     "world x accum_steps (both powers of two)"},
};

class GradAccum final : public BucketedAllreduce {
 public:
  explicit GradAccum(const mgt::ConfigSection& config)
      : BucketedAllreduce(config, {"grad_accum", config.get_int("accum_steps"), 0}) {}
};

}  // namespace

MGT_SYNC_PLUGIN("grad_accum", "1.2.0", "gradient accumulation over sync.accum_steps micro-batches, then one all-reduce",
                kKeys, GradAccum)
