// SequentialModel on the CPU path: the layer executor on a CPU backend of its own, in host memory.
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>

#include "kernels/backend.hpp"
#include "layer_executor.hpp"
#include "mgtrain/error.hpp"
#include "mgtrain/model.hpp"

namespace mgt {

struct SequentialModel::HostExecutor {
  explicit HostExecutor(const std::vector<std::unique_ptr<Layer>>& layers)
      : backend(kernels::make_cpu_backend()), executor(*backend, layers, /*bf16=*/false, /*counted=*/false) {
    backend->read_step_from(&step);
  }
  std::unique_ptr<kernels::Backend> backend;
  LayerExecutor executor;
  int64_t step = 0;  // the step dropout draws for, read by the backend
};

SequentialModel::SequentialModel() = default;
SequentialModel::~SequentialModel() = default;

void SequentialModel::add(std::unique_ptr<Layer> layer) {
  MGT_CHECK(layer != nullptr, Error, "SequentialModel::add: null layer");
  MGT_CHECK(!host_, Error, "SequentialModel::add after the first forward");
  layers_.push_back(std::move(layer));
}

void SequentialModel::declare(ParameterStore& store) {
  // The executor announces a layer's param_handles() as final after its backward: a parameter a
  // layer declares but does not list would never reach the sync strategy.
  for (auto& layer : layers_) {
    const size_t before = store.params().size();
    try {
      layer->declare(store);
    } catch (const ConfigError&) {
      throw;
    } catch (const Error& e) {
      const std::string what = e.what();
      // Name the layer, unless the message already starts with it (a residual block names itself).
      if (what.find("'" + layer->name() + "'") != std::string::npos) throw;
      throw Error("layer '" + layer->name() + "': " + what);
    }
    std::vector<char> listed(store.params().size() - before, 0);
    for (ParamHandle h : layer->param_handles()) {
      MGT_CHECK(h >= before && h < store.params().size(), Error,
                "layer '" + layer->name() + "': param_handles() lists handle " + std::to_string(h) +
                    ", which it did not declare");
      listed[h - before] = 1;
    }
    for (size_t i = 0; i < listed.size(); ++i)
      MGT_CHECK(listed[i], Error,
                "layer '" + layer->name() + "' declares '" + store.params()[before + i].name +
                    "' but does not list it in param_handles(): its gradient would never reach the sync "
                    "strategy");
  }
  store_ = &store;
}

Shape SequentialModel::output_shape(const Shape& input) const {
  Shape s = input;
  const Layer* before = nullptr;
  for (const auto& layer : layers_) {
    s = next_output_shape(before, *layer, s);
    before = layer.get();
  }
  return s;
}

// Every layer takes a pass of several shards: whole, or the executor runs it shard by shard.
bool SequentialModel::shard_batchable(int64_t, int64_t) const { return !layers_.empty(); }

std::vector<const Layer*> SequentialModel::export_layers() const {
  std::vector<const Layer*> layers;
  for (const auto& layer : layers_) layers.push_back(layer.get());
  return layers;
}

const Tensor& SequentialModel::forward(const Tensor& input, const StepContext& ctx) {
  MGT_CHECK(!layers_.empty(), Error, "SequentialModel::forward: the model has no layers");
  MGT_CHECK(store_ != nullptr && store_->finalized(), Error,
            "SequentialModel::forward before its parameters were declared and finalized");
  if (!host_) host_ = std::make_unique<HostExecutor>(layers_);
  host_->executor.plan(input.shape(), ctx.shards);
  host_->step = ctx.step;
  return host_->executor.forward(input.data(), *store_, ctx);
}

void SequentialModel::backward(const Tensor& grad_logits, const StepContext& ctx, const GradientsReady& ready) {
  MGT_CHECK(host_ != nullptr, Error, "SequentialModel::backward called before forward");
  const Shape& logits = host_->executor.output_shape();
  MGT_CHECK(grad_logits.numel() == shape_numel(logits), Error,
            "SequentialModel::backward: gradient " + shape_string(grad_logits.shape()) + " does not match the logits " +
                shape_string(logits));
  float* top = host_->executor.logits_grad();
  if (top != grad_logits.data())
    std::memcpy(top, grad_logits.data(), static_cast<size_t>(grad_logits.numel()) * sizeof(float));
  host_->executor.backward(*store_, ctx, ready);
}

// The CPU's operations for layers driven by hand on the host: one backend per thread.
namespace {
struct HostOpsOfThread {
  HostOpsOfThread() : backend(kernels::make_cpu_backend()) { backend->read_step_from(&step); }
  std::unique_ptr<kernels::Backend> backend;
  int64_t step = 0;
};
thread_local HostOpsOfThread host_ops_of_thread;
}  // namespace

Ops& host_ops(int64_t step) {
  host_ops_of_thread.step = step;
  return *host_ops_of_thread.backend;
}

Ops& host_ops() { return *host_ops_of_thread.backend; }

namespace {

class HostLayerPlanner final : public LayerPlanner {
 public:
  Ops& ops() override { return host_ops(); }
  void* allocate(size_t bytes) override;
  const void* upload(const void* host, size_t bytes) override {
    void* p = allocate(bytes);
    if (p) std::memcpy(p, host, bytes);
    return p;
  }

 private:
  struct Block;
  std::vector<std::unique_ptr<Block>> blocks_;
};

// Plain heap blocks rather than a backend's memory: a planner may outlive the thread's host
// backend (a static one is destroyed after the thread's objects).
struct HostLayerPlanner::Block {
  explicit Block(size_t bytes) : data(std::aligned_alloc(64, (bytes + 63) / 64 * 64)) {
    if (!data) throw std::bad_alloc();
    std::memset(data, 0, (bytes + 63) / 64 * 64);
  }
  ~Block() { std::free(data); }
  void* data;
};

void* HostLayerPlanner::allocate(size_t bytes) {
  if (bytes == 0) return nullptr;
  blocks_.push_back(std::make_unique<Block>(bytes));
  return blocks_.back()->data;
}

}  // namespace

std::unique_ptr<LayerPlanner> make_host_layer_planner() { return std::make_unique<HostLayerPlanner>(); }

}  // namespace mgt
