// Sync plugin `allreduce`: after each backward, the flat gradient buffer is summed over all ranks
// in buckets of sync.bucket_mb. Each rank's loss is already scaled by 1/global_batch, so the sum is
// the gradient of the global mean loss.
#include <algorithm>

#include "mgtrain/plugin.hpp"

namespace {

const mgt::ConfigKey kKeys[] = {
    {"sync.bucket_mb", mgt::KeyType::positive_real, "4", "size of one all-reduce bucket in MB"},
};

class AllReduce final : public mgt::SyncStrategy {
 public:
  explicit AllReduce(const mgt::ConfigSection& config)
      : bucket_floats_(std::max<size_t>(1, static_cast<size_t>(config.get_real("bucket_mb") * 1e6 / sizeof(float)))) {}

  void setup(mgt::Communicator& comm, mgt::ParameterStore& store) override {
    comm_ = &comm;
    store_ = &store;
    const size_t buckets = (store.flat_size() + bucket_floats_ - 1) / bucket_floats_;
    requests_.reserve(buckets);
  }

  bool end_backward(int64_t) override {
    if (comm_->size() == 1) return true;
    float* grads = store_->grads_data();
    const size_t total = store_->flat_size();
    // All buckets in flight at once; the order of completion does not change the result.
    for (size_t offset = 0; offset < total; offset += bucket_floats_)
      requests_.push_back(comm_->iallreduce_sum(grads + offset, std::min(bucket_floats_, total - offset)));
    for (auto& r : requests_) r->wait();
    requests_.clear();
    return true;
  }

 private:
  size_t bucket_floats_;
  mgt::Communicator* comm_ = nullptr;
  mgt::ParameterStore* store_ = nullptr;
  std::vector<std::unique_ptr<mgt::CommRequest>> requests_;
};

}  // namespace

MGT_SYNC_PLUGIN("allreduce", "1.0.0", "synchronous all-reduce of the gradients in buckets", kKeys,
                AllReduce)
