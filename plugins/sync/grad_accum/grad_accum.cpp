// Sync plugin `grad_accum`: each rank accumulates sync.accum_steps micro-batches into its gradient
// buffer (layers add their gradients) and the ranks synchronise once, through the bucketed
// all-reduce, on the last one; the other micro-steps make no communication at all.
// Global batch = world x micro-batch x accum_steps. With sync.deterministic, the world x
// accum_steps micro-batches are summed in one fixed tree instead: (np=1, k=8) and (np=8, k=1)
// give the same bits.
#include "mgtrain/deterministic_reduce.hpp"
#include "mgtrain/gradient_buckets.hpp"
#include "mgtrain/plugin.hpp"

namespace {

const mgt::ConfigKey kKeys[] = {
    {"sync.accum_steps", mgt::KeyType::positive_integer, "2", "micro-batches accumulated per optimizer step"},
    {"sync.bucket_mb", mgt::KeyType::positive_real, "4", "size of one all-reduce bucket in MB"},
    {"sync.overlap", mgt::KeyType::boolean, "false",
     "start each bucket's all-reduce during backward (non-blocking) instead of after it (blocking)"},
    mgt::kHierarchicalKey,
    mgt::kSharedMemoryKey,
    mgt::kWireKey,
    {"sync.deterministic", mgt::KeyType::boolean, "false",
     "sum the micro-batch gradients in one fixed tree: identical bits for any split of the same "
     "world x accum_steps (both powers of two)"},
};

class GradAccum final : public mgt::SyncStrategy {
 public:
  explicit GradAccum(const mgt::ConfigSection& config)
      : steps_(config.get_int("accum_steps")),
        bucket_bytes_(static_cast<size_t>(config.get_real("bucket_mb") * 1e6)),
        options_(mgt::bucket_options(config)),
        deterministic_(config.get_bool("deterministic")) {
    options_.shared_update = true;  // this strategy hands GradientBuckets::sharding() on
  }

  void setup(mgt::Communicator& comm, mgt::ParameterStore& store) override {
    if (deterministic_) {
      mgt::refuse_in_deterministic_mode(options_);
      reducer_.setup(comm, store, steps_);
    } else {
      buckets_.setup(comm, store, bucket_bytes_, options_);
    }
  }
  int64_t accumulation_steps() const override { return steps_; }
  bool micro_batches_are_shards() const override { return deterministic_; }
  // On one node through shared memory the ranks split the optimizer step (GradientBuckets).
  mgt::OptimizerSharding* sharding() override { return deterministic_ ? nullptr : buckets_.sharding(); }
  // The bucketed all-reduce works on NCCL and device memory alike; the deterministic reduction
  // forms its sums on the host, and the bfloat16 wire rounds and widens there.
  bool reduces_device_memory() const override { return !deterministic_ && options_.wire == mgt::WireFormat::fp32; }
  std::vector<mgt::SyncStateArray> checkpoint_state() override { return buckets_.checkpoint_state(); }
  void restore_state(const std::vector<mgt::SyncStateArray>& saved, int saved_ranks) override {
    if (!deterministic_) buckets_.restore_state(saved, saved_ranks, "grad_accum");
  }
  void begin_micro_batch(int64_t micro_step) override { last_ = micro_step == steps_ - 1; }
  void gradients_ready(const std::vector<mgt::ParamHandle>& handles) override {
    // Only the last micro-batch completes a gradient; earlier ones stay local.
    if (last_ && !deterministic_) buckets_.mark_ready(handles);
  }
  bool end_backward(int64_t micro_step) override {
    if (deterministic_) reducer_.add_shard();
    if (micro_step != steps_ - 1) return false;
    if (deterministic_)
      reducer_.finish();
    else
      buckets_.finish();
    return true;
  }

 private:
  int64_t steps_;
  size_t bucket_bytes_;
  mgt::BucketOptions options_;
  bool deterministic_;
  bool last_ = false;
  mgt::GradientBuckets buckets_;
  mgt::DeterministicReducer reducer_;
};

}  // namespace

MGT_SYNC_PLUGIN("grad_accum", "1.2.0", "gradient accumulation over sync.accum_steps micro-batches, then one all-reduce",
                kKeys, GradAccum)
