#pragma once
// The strategy behind the built-in sync plugins `allreduce` and `grad_accum`: both exist because
// users name them in their configs, and they differ only in how many micro-batches a rank adds up
// before the ranks reduce, so they are this one class. Each rank's loss is already scaled by
// 1/global_batch, so the sum over ranks and micro-batches is the gradient of the global mean loss.
// The gradients are summed over all ranks in buckets (sync.bucket_mb), in reverse layer order,
// after backward or overlapped with it (sync.overlap); sync.hierarchical and sync.wire
// (mgtrain/gradient_buckets.hpp) reduce across nodes through one leader per node and send the
// gradients in bfloat16 with error feedback. With sync.deterministic, the global batch's
// micro-batches are summed in one fixed tree instead (mgtrain/deterministic_reduce.hpp), which
// gives the same bits for any power-of-two split of them among the ranks.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "mgtrain/config.hpp"
#include "mgtrain/deterministic_reduce.hpp"
#include "mgtrain/gradient_buckets.hpp"
#include "mgtrain/sync.hpp"

namespace {

// The keys both plugins read besides their own (the deterministic key's help is each plugin's).
constexpr mgt::ConfigKey kBucketMbKey{"sync.bucket_mb", mgt::KeyType::positive_real, "4",
                                      "size of one all-reduce bucket in MB"};
constexpr mgt::ConfigKey kOverlapKey{
    "sync.overlap", mgt::KeyType::boolean, "false",
    "start each bucket's all-reduce during backward (non-blocking) instead of after it (blocking)"};

// What sets the two plugins apart.
struct Accumulation {
  const char* plugin;   // the plugin's name, under which restore_state() takes its state
  int64_t local_steps;  // micro-batches each rank adds up before the one all-reduce (allreduce: 1)
  // Deterministic mode: the global batch's micro-shards, a rank's share of them its micro-batches
  // (allreduce's sync.micro_shards); 0: a rank's local_steps are its micro-shards (grad_accum).
  int64_t micro_shards;
};

class BucketedAllreduce : public mgt::SyncStrategy {
 public:
  BucketedAllreduce(const mgt::ConfigSection& config, const Accumulation& accumulation)
      : accumulation_(accumulation),
        bucket_bytes_(static_cast<size_t>(config.get_real("bucket_mb") * 1e6)),
        options_(mgt::bucket_options(config)),
        deterministic_(config.get_bool("deterministic")),
        shards_per_rank_(accumulation.micro_shards > 0 ? 1 : accumulation.local_steps) {
    options_.shared_update = true;  // this strategy hands GradientBuckets::sharding() on
  }

  void setup(mgt::Communicator& comm, mgt::ParameterStore& store) override {
    if (!deterministic_) {
      buckets_.setup(comm, store, bucket_bytes_, options_);
      return;
    }
    mgt::refuse_in_deterministic_mode(options_);
    if (accumulation_.micro_shards > 0)
      shards_per_rank_ = mgt::DeterministicReducer::shards_per_rank(accumulation_.micro_shards, comm);
    reducer_.setup(comm, store, shards_per_rank_);
  }
  int64_t accumulation_steps() const override { return deterministic_ ? shards_per_rank_ : accumulation_.local_steps; }
  bool micro_batches_are_shards() const override { return deterministic_; }
  // On one node through shared memory the ranks split the optimizer step (GradientBuckets).
  mgt::OptimizerSharding* sharding() override { return deterministic_ ? nullptr : buckets_.sharding(); }
  // The bucketed all-reduce works on NCCL and device memory alike; the deterministic reduction
  // forms its sums on the host, and the bfloat16 wire rounds and widens there.
  bool reduces_device_memory() const override { return !deterministic_ && options_.wire == mgt::WireFormat::fp32; }
  std::vector<mgt::SyncStateArray> checkpoint_state() override { return buckets_.checkpoint_state(); }
  void restore_state(const std::vector<mgt::SyncStateArray>& saved, int saved_ranks) override {
    if (!deterministic_) buckets_.restore_state(saved, saved_ranks, accumulation_.plugin);
  }
  void begin_micro_batch(int64_t micro_step) override { last_ = micro_step == accumulation_.local_steps - 1; }
  void gradients_ready(const std::vector<mgt::ParamHandle>& handles) override {
    // Only the last micro-batch completes a gradient; earlier ones stay local.
    if (last_ && !deterministic_) buckets_.mark_ready(handles);
  }
  bool end_backward(int64_t micro_step) override {
    if (deterministic_) {
      reducer_.add_shard();
      if (micro_step != shards_per_rank_ - 1) return false;
      reducer_.finish();
      return true;
    }
    if (micro_step != accumulation_.local_steps - 1) return false;
    buckets_.finish();
    return true;
  }

 private:
  Accumulation accumulation_;
  size_t bucket_bytes_;
  mgt::BucketOptions options_;
  bool deterministic_;
  int64_t shards_per_rank_;                     // deterministic mode: this rank's micro-shards
  bool last_ = accumulation_.local_steps == 1;  // the micro-batch under way is the step's last
  mgt::GradientBuckets buckets_;
  mgt::DeterministicReducer reducer_;
};

}  // namespace
