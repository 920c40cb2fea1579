// Sync plugin `bf16_ef`: the gradients all-reduced in bfloat16, half the bytes of FP32 on the wire,
// with error feedback (Seide et al., 2014; Karimireddy et al., 2019): what rounding a rank's
// gradient to bfloat16 drops is kept, and added to that rank's next gradient before it is rounded,
// so nothing is lost, only delayed by a step.
//   e = g + residual;  q = bf16(e);  residual = e - q;  g = sum over ranks of q
// The residual is this strategy's own state: without it in the checkpoint a resumed run would
// differ from one never stopped (`mgtrain verify` would say FAIL), so it is handed to the core as
// checkpoint state, and given back on resume.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "mgtrain/plugin.hpp"  // the descriptor macros; includes config, error, communicator and sync

namespace {

const mgt::ConfigKey kBf16EfKeys[] = {
    {"sync.error_feedback", mgt::KeyType::boolean, "true",
     "carry what rounding to bfloat16 dropped into the next step (false: plain bfloat16 all-reduce)"},
};

// Round to nearest even on the upper 16 bits of the float, as the communicator's bfloat16 sums.
uint16_t to_bf16(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof(bits));
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

float from_bf16(uint16_t h) {
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float x;
  std::memcpy(&x, &bits, sizeof(x));
  return x;
}

class Bf16ErrorFeedback final : public mgt::SyncStrategy {
 public:
  explicit Bf16ErrorFeedback(const mgt::ConfigSection& section) : error_feedback_(section.get_bool("error_feedback")) {}

  void setup(mgt::Communicator& comm, mgt::ParameterStore& store) override {
    comm_ = &comm;
    store_ = &store;
    wire_.resize(store.flat_size());
    if (error_feedback_) residual_.assign(store.flat_size(), 0.0f);
  }

  // After backward: each rank's gradient (plus its residual) rounded, summed over the ranks in
  // bfloat16, and widened back into the gradient buffer the optimizer reads.
  bool end_backward(int64_t) override {
    float* grads = store_->grads_data();
    const size_t n = store_->flat_size();
    for (size_t i = 0; i < n; ++i) {
      const float e = grads[i] + (error_feedback_ ? residual_[i] : 0.0f);
      wire_[i] = to_bf16(e);
      if (error_feedback_) residual_[i] = e - from_bf16(wire_[i]);
    }
    comm_->allreduce_sum(wire_.data(), n, mgt::ElementType::bf16);
    for (size_t i = 0; i < n; ++i) grads[i] = from_bf16(wire_[i]);
    return true;
  }

  // Each rank's residual goes into the checkpoint (as /sync/residual.rank<R>).
  std::vector<mgt::SyncStateArray> checkpoint_state() override {
    if (!error_feedback_) return {};
    return {{"residual", residual_}};
  }

  // The residual a rank had is that rank's own delayed gradient: it comes back to the same rank.
  // Resumed on another number of ranks, the ranks' shares of the data differ, so the residuals
  // start again from zero (at most one step's rounding is lost), which rank 0 says.
  void restore_state(const std::vector<mgt::SyncStateArray>& saved, int saved_ranks) override {
    if (!error_feedback_) return;
    if (saved_ranks != comm_->size()) {
      if (comm_->rank() == 0)
        std::fprintf(stderr,
                     "mgtrain: note: sync bf16_ef: the checkpoint's run had %d rank(s), this one %d: the "
                     "error-feedback residuals start again from zero\n",
                     saved_ranks, comm_->size());
      return;
    }
    for (const auto& array : saved) {
      if (array.name != "residual") continue;
      MGT_CHECK(array.values.size() == residual_.size(), mgt::DataError,
                "sync bf16_ef: the checkpoint's residual of rank " + std::to_string(comm_->rank()) + " holds " +
                    std::to_string(array.values.size()) + " values, the model has " + std::to_string(residual_.size()) +
                    " parameters");
      residual_ = array.values;
    }
  }

 private:
  bool error_feedback_;
  mgt::Communicator* comm_ = nullptr;
  mgt::ParameterStore* store_ = nullptr;
  std::vector<uint16_t> wire_;
  std::vector<float> residual_;
};

}  // namespace

MGT_SYNC_PLUGIN("bf16_ef", "1.0.0", "all-reduce in bfloat16 with error feedback; the residuals are checkpointed",
                kBf16EfKeys, Bf16ErrorFeedback)
