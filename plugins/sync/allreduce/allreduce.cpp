// Sync plugin `allreduce`: the gradients are summed over all ranks in buckets (sync.bucket_mb),
// in reverse layer order, after backward or overlapped with it (sync.overlap). Each rank's loss
// is already scaled by 1/global_batch, so the sum is the gradient of the global mean loss.
// sync.hierarchical and sync.wire (mgtrain/gradient_buckets.hpp) reduce across nodes through one
// leader per node and send the gradients in bfloat16 with error feedback.
// With sync.deterministic, the global batch is cut into sync.micro_shards micro-shards summed in
// one fixed tree instead, which gives the same bits at any power-of-two number of ranks.
#include "mgtrain/deterministic_reduce.hpp"
#include "mgtrain/gradient_buckets.hpp"
#include "mgtrain/plugin.hpp"

namespace {

const mgt::ConfigKey kKeys[] = {
    {"sync.bucket_mb", mgt::KeyType::positive_real, "4", "size of one all-reduce bucket in MB"},
    {"sync.overlap", mgt::KeyType::boolean, "false",
     "start each bucket's all-reduce during backward (non-blocking) instead of after it (blocking)"},
    mgt::kHierarchicalKey,
    mgt::kSharedMemoryKey,
    mgt::kWireKey,
    {"sync.deterministic", mgt::KeyType::boolean, "false",
     "sum sync.micro_shards micro-shard gradients in one fixed tree: identical bits at any "
     "power-of-two number of ranks"},
    {"sync.micro_shards", mgt::KeyType::positive_integer, "8",
     "deterministic mode: micro-shards per global batch (a power of two, a multiple of the ranks)"},
};

class AllReduce final : public mgt::SyncStrategy {
 public:
  explicit AllReduce(const mgt::ConfigSection& config)
      : bucket_bytes_(static_cast<size_t>(config.get_real("bucket_mb") * 1e6)),
        options_(mgt::bucket_options(config)),
        deterministic_(config.get_bool("deterministic")),
        micro_shards_(config.get_int("micro_shards")) {
    options_.shared_update = true;  // this strategy hands GradientBuckets::sharding() on
  }

  void setup(mgt::Communicator& comm, mgt::ParameterStore& store) override {
    if (!deterministic_) {
      buckets_.setup(comm, store, bucket_bytes_, options_);
      return;
    }
    mgt::refuse_in_deterministic_mode(options_);
    shards_per_rank_ = mgt::DeterministicReducer::shards_per_rank(micro_shards_, comm);
    reducer_.setup(comm, store, shards_per_rank_);
  }
  int64_t accumulation_steps() const override { return deterministic_ ? shards_per_rank_ : 1; }
  bool micro_batches_are_shards() const override { return deterministic_; }
  // On one node through shared memory the ranks split the optimizer step (GradientBuckets).
  mgt::OptimizerSharding* sharding() override { return deterministic_ ? nullptr : buckets_.sharding(); }
  // The bucketed all-reduce works on NCCL and device memory alike; the deterministic reduction
  // forms its sums on the host, and the bfloat16 wire rounds and widens there.
  bool reduces_device_memory() const override { return !deterministic_ && options_.wire == mgt::WireFormat::fp32; }
  std::vector<mgt::SyncStateArray> checkpoint_state() override { return buckets_.checkpoint_state(); }
  void restore_state(const std::vector<mgt::SyncStateArray>& saved, int saved_ranks) override {
    if (!deterministic_) buckets_.restore_state(saved, saved_ranks, "allreduce");
  }
  void gradients_ready(const std::vector<mgt::ParamHandle>& handles) override {
    if (!deterministic_) buckets_.mark_ready(handles);
  }
  bool end_backward(int64_t micro_step) override {
    if (!deterministic_) {
      buckets_.finish();
      return true;
    }
    reducer_.add_shard();
    if (micro_step != shards_per_rank_ - 1) return false;
    reducer_.finish();
    return true;
  }

 private:
  size_t bucket_bytes_;
  mgt::BucketOptions options_;
  bool deterministic_;
  int64_t micro_shards_, shards_per_rank_ = 1;
  mgt::GradientBuckets buckets_;
  mgt::DeterministicReducer reducer_;
};

}  // namespace

MGT_SYNC_PLUGIN("allreduce", "1.3.0",
                "synchronous all-reduce of the gradients in buckets, or deterministic over micro-shards", kKeys,
                AllReduce)
