// Sync plugin `allreduce`: the gradients are summed over all ranks in buckets (sync.bucket_mb),
// each bucket's all-reduce starting as soon as backward has produced all its gradients, so
// communication overlaps the rest of backward. Each rank's loss is already scaled by
// 1/global_batch, so the sum is the gradient of the global mean loss.
#include "mgtrain/gradient_buckets.hpp"
#include "mgtrain/plugin.hpp"

namespace {

const mgt::ConfigKey kKeys[] = {
    {"sync.bucket_mb", mgt::KeyType::positive_real, "4", "size of one all-reduce bucket in MB"},
    {"sync.overlap", mgt::KeyType::boolean, "false",
     "start each bucket's all-reduce during backward (non-blocking) instead of after it (blocking)"},
};

class AllReduce final : public mgt::SyncStrategy {
 public:
  explicit AllReduce(const mgt::ConfigSection& config)
      : bucket_bytes_(static_cast<size_t>(config.get_real("bucket_mb") * 1e6)),
        overlap_(config.get_bool("overlap")) {}

  void setup(mgt::Communicator& comm, mgt::ParameterStore& store) override {
    buckets_.setup(comm, store, bucket_bytes_, overlap_);
  }
  void gradients_ready(const std::vector<mgt::ParamHandle>& handles) override {
    buckets_.mark_ready(handles);
  }
  bool end_backward(int64_t) override {
    buckets_.finish();
    return true;
  }

 private:
  size_t bucket_bytes_;
  bool overlap_;
  mgt::GradientBuckets buckets_;
};

}  // namespace

MGT_SYNC_PLUGIN("allreduce", "1.1.0",
                "synchronous all-reduce of the gradients in buckets, overlapped with backward", kKeys,
                AllReduce)
