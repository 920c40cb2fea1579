#pragma once
// The interface a model plugin implements. Most models are a stack of SDK layers and derive from
// SequentialModel; anything else implements Model directly.
#include <functional>
#include <memory>
#include <vector>

#include "mgtrain/export.hpp"
#include "mgtrain/layers.hpp"
#include "mgtrain/parameters.hpp"

namespace mgt {

// Called during backward with the handles whose gradients have just become final, so a sync
// strategy can start communicating them while the rest of backward runs.
using GradientsReady = std::function<void(const std::vector<ParamHandle>&)>;

class MGT_API Model {
 public:
  virtual ~Model() = default;
  // Declares every parameter into the store (called once, before finalize).
  virtual void declare(ParameterStore& store) = 0;
  // Shape of the logits for an input batch shape.
  virtual Shape output_shape(const Shape& input) const = 0;
  // Returns the logits; the tensor stays valid until the next forward.
  virtual const Tensor& forward(const Tensor& input, const StepContext& ctx) = 0;
  // Back-propagates from the logits' gradient, adding into the gradient buffer.
  virtual void backward(const Tensor& grad_logits, const StepContext& ctx, const GradientsReady& ready) = 0;
  // True when `shards` deterministic micro-shards of `shard_rows` rows may go through forward and
  // backward as one batch (StepContext::shards) with the same bits as one shard at a time.
  virtual bool shard_batchable(int64_t shard_rows, int64_t shards) const {
    (void)shard_rows;
    (void)shards;
    return false;
  }
  // The layers the model applies one after another, for `mgtrain export`; empty (the default)
  // when it is not such a stack, as a model that drives its layers itself: no export form.
  virtual std::vector<const Layer*> export_layers() const { return {}; }
  // A language model's window: it reads token files (/tokens) as samples of this many token ids
  // (floats holding integers) and gives logits [rows, sequence_length(), vocabulary], one row of
  // logits per position, each position's label the token after it. 0 (the default): the model
  // reads sample files (/x, /y) and gives logits [rows, classes].
  virtual int64_t sequence_length() const { return 0; }
};

// Layers applied in order, run on the CPU in host memory by the same executor that runs them on
// a GPU (the compiled step); activations are planned on the first batch of a shape and reused.
class MGT_API SequentialModel : public Model {
 public:
  SequentialModel();
  ~SequentialModel() override;
  void add(std::unique_ptr<Layer> layer);
  // Keeps `store` as the parameters forward and backward run with (the CPU path's).
  void declare(ParameterStore& store) override;
  Shape output_shape(const Shape& input) const override;
  const Tensor& forward(const Tensor& input, const StepContext& ctx) override;
  void backward(const Tensor& grad_logits, const StepContext& ctx, const GradientsReady& ready) override;
  const std::vector<std::unique_ptr<Layer>>& layers() const { return layers_; }
  // Always (a layer that is not row-wise runs one shard at a time: shard_passes in the SDK).
  bool shard_batchable(int64_t shard_rows, int64_t shards) const override;
  std::vector<const Layer*> export_layers() const override;

 private:
  struct HostExecutor;
  std::vector<std::unique_ptr<Layer>> layers_;
  ParameterStore* store_ = nullptr;
  std::unique_ptr<HostExecutor> host_;  // made on the first forward
};

}  // namespace mgt
