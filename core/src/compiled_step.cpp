#include "compiled_step.hpp"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>

#include "kernels/cpu/pointwise.hpp"
#include "kernels/cpu/softmax.hpp"
#include "mgtrain/error.hpp"
#include "mgtrain/rng.hpp"

namespace mgt {

using kernels::Backend;
using Kind = LayerSpec::Kind;

namespace {

// Test-only: MGTRAIN_TEST_DEVICE_MEMORY_MB caps the device memory compiled steps may hold in this
// process, on any backend, so that running out of GPU memory is rehearsed on purpose.
size_t test_device_memory_cap() {
  static const size_t cap = [] {
    const char* text = std::getenv("MGTRAIN_TEST_DEVICE_MEMORY_MB");
    return text ? static_cast<size_t>(std::strtod(text, nullptr) * 1048576.0) : size_t{0};
  }();
  return cap;
}
std::atomic<size_t> capped_device_bytes{0};

}  // namespace

BackendMemory::~BackendMemory() {
  for (const auto& [p, bytes] : device_) {
    backend_.release(p);
    capped_device_bytes -= bytes;
  }
  for (void* p : host_) backend_.release_host(p);
}

void* BackendMemory::device_bytes(size_t bytes) {
  if (bytes == 0) return nullptr;
  if (const size_t cap = test_device_memory_cap(); cap != 0 && capped_device_bytes + bytes > cap) {
    char text[160];
    std::snprintf(text, sizeof text, "allocation of %.1f MB with %.1f MB free of %.1f MB (MGTRAIN_TEST_DEVICE_MEMORY_MB)",
                  static_cast<double>(bytes) / 1048576.0, static_cast<double>(cap - capped_device_bytes) / 1048576.0,
                  static_cast<double>(cap) / 1048576.0);
    throw OutOfMemoryError(text);
  }
  void* p = backend_.allocate(bytes);
  device_.emplace_back(p, bytes);
  capped_device_bytes += bytes;
  backend_.zero(p, bytes);
  return p;
}

void* BackendMemory::host_bytes(size_t bytes) {
  if (bytes == 0) return nullptr;
  void* p = backend_.allocate_host(bytes);
  host_.push_back(p);
  std::memset(p, 0, bytes);
  return p;
}

DeviceParameters::DeviceParameters(Backend& backend, const ParameterStore& host)
    : memory(backend),
      params(memory.device<float>(host.flat_size())),
      grads(memory.device<float>(host.flat_size())),
      store(host.with_buffers(params, grads)) {}

namespace {

// Layers that pass their input through unchanged in training: their output aliases the input.
bool is_identity(const LayerSpec& s) {
  return s.kind == Kind::flatten || (s.kind == Kind::dropout && s.probability == 0.0f);
}

bool has_params(const LayerSpec& s) { return s.kind == Kind::linear || s.kind == Kind::conv2d; }

// What the host knows of a step's outcome, copied back at the end of each step.
struct StepTotals {
  double loss_sum;
  int64_t correct;
  int32_t nonfinite;
  int32_t padding;
};

union UpdateScalars {
  kernels::SgdScalars sgd;
  kernels::AdamWScalars adamw;
};

}  // namespace

void check_compilable(const Model& model, const Optimizer& optimizer, const std::string& model_name,
                      const std::string& optimizer_name) {
  const auto* sequential = dynamic_cast<const SequentialModel*>(&model);
  MGT_CHECK(sequential != nullptr, ConfigError,
            "model '" + model_name + "' is not a SequentialModel of SDK layers, which is what the GPU "
            "path runs; train.device = cpu runs it");
  for (const auto& layer : sequential->layers()) {
    const LayerSpec s = layer->spec();
    MGT_CHECK(s.kind != Kind::custom, ConfigError,
              "model '" + model_name + "': layer '" + layer->name() +
                  "' is not an SDK layer, and the GPU path runs only those; train.device = cpu runs it");
  }
  MGT_CHECK(optimizer.update_rule().kind != UpdateRule::Kind::none, ConfigError,
            "optimizer '" + optimizer_name + "' has no update rule the GPU path can apply "
            "(Optimizer::update_rule); use sgd or adam, or train.device = cpu");
}

// The compiled program: per layer its buffers and kernel plans, per slot its staging buffers.
struct CompiledStep::Program {
  explicit Program(Backend& backend) : memory(backend) {}

  struct Layer {
    LayerSpec spec;
    std::string name;
    std::vector<ParamHandle> handles;
    Shape out_shape;
    int64_t out_numel = 0;
    float* out = nullptr;   // activation; aliases the input for identity layers (null: the pass's input rows)
    float* grad = nullptr;  // gradient of the activation; aliased likewise (null: none is needed)
    std::unique_ptr<kernels::ConvOp> conv;
    std::unique_ptr<kernels::MaxPoolOp> pool;
    // Dropout: the step's scales for every pass, drawn on the host into the slot's pinned block
    // (a function of seed, step and global sample, as the SDK layer draws them), and one pass's
    // worth on the device.
    float* pinned_mask[2] = {};
    float* mask = nullptr;
    // bf16 mixed precision, linear layers: the input and the output gradient as bf16 operands.
    uint16_t* x_bf16 = nullptr;
    uint16_t* dy_bf16 = nullptr;
  };

  BackendMemory memory;
  std::vector<Layer> layers;
  size_t first_with_params = 0;  // layers before it need no input gradient
  int64_t sample_numel = 0;
  // Per slot: the staged batch in backend memory, the update's scalars (pinned) and the step's
  // totals (pinned), so that a recorded step reads and writes fixed addresses.
  UpdateScalars* pinned_scalars[2] = {};
  StepTotals* pinned_totals[2] = {};
  float* x[2] = {};
  int32_t* y[2] = {};
  // Shared by the slots: the steps run one after another on the compute stream.
  UpdateScalars* scalars = nullptr;
  StepTotals* totals = nullptr;
  double* row_loss = nullptr;
  uint16_t* params_bf16 = nullptr;  // bf16 mixed precision: this step's weights, rounded from the FP32 masters
  std::vector<float*> state;  // the optimizer's state buffers, in state_buffers() order
  UpdateRule rule;
  kernels::SgdKind sgd_kind = kernels::SgdKind::plain;
  std::unique_ptr<kernels::RecordedStep> recorded[2];
};

CompiledStep::CompiledStep(Backend& backend, const SequentialModel& model, DeviceParameters& params,
                           Optimizer& optimizer, SyncStrategy& sync, const CompiledStepOptions& options)
    : backend_(backend), optimizer_(optimizer), sync_(sync), params_(params), options_(options),
      program_(std::make_unique<Program>(backend)) {
  Program& p = *program_;
  MGT_CHECK(options.pass_rows > 0 && options.passes_per_micro_batch > 0 && options.accumulation > 0,
            Error, "compiled step: rows, passes and accumulation must be positive");
  MGT_CHECK(!options.host_sync || options.host_sync->flat_size() == params.store.flat_size(), Error,
            "compiled step: the host sync store's layout differs from the device's");
  // The host strategy runs between the kernels, which a recording cannot hold.
  if (options.host_sync) options_.record = false;
  MGT_CHECK(options.pipeline_depth == 1 || options.pipeline_depth == 2, Error,
            "compiled step: pipeline depth " + std::to_string(options.pipeline_depth) + ", expected 1 or 2");
  p.sample_numel = shape_numel(options.sample_shape);
  Shape in_shape = {options.pass_rows};
  in_shape.insert(in_shape.end(), options.sample_shape.begin(), options.sample_shape.end());
  Shape shape = in_shape;
  float* in = nullptr;  // nullptr: the input slot, bound per pass
  float* in_grad = nullptr;
  bool params_seen = false;
  for (const auto& layer : model.layers()) {
    Program::Layer l;
    l.spec = layer->spec();
    l.name = layer->name();
    l.handles = layer->param_handles();
    l.out_shape = layer->output_shape(shape);
    l.out_numel = shape_numel(l.out_shape);
    if (!params_seen && has_params(l.spec)) {
      p.first_with_params = p.layers.size();
      params_seen = true;
    }
    if (is_identity(l.spec)) {
      // Aliases its input; before any buffer (a Flatten first), the pass's input rows (null).
      l.out = in;
      l.grad = in_grad;
    } else {
      l.out = p.memory.device<float>(static_cast<size_t>(l.out_numel));
      l.grad = p.memory.device<float>(static_cast<size_t>(l.out_numel));
    }
    if (l.spec.kind == Kind::conv2d) {
      kernels::Conv2dShape cs;
      cs.in_channels = l.spec.in;
      cs.out_channels = l.spec.out;
      cs.kernel = l.spec.kernel;
      cs.stride = l.spec.stride;
      cs.padding = l.spec.padding;
      cs.height = shape.at(2);
      cs.width = shape.at(3);
      l.conv = backend.make_conv(cs, options.pass_rows, options.bf16);
    } else if (l.spec.kind == Kind::linear && options.bf16) {
      l.x_bf16 = p.memory.device<uint16_t>(static_cast<size_t>(options.pass_rows * l.spec.in));
      l.dy_bf16 = p.memory.device<uint16_t>(static_cast<size_t>(options.pass_rows * l.spec.out));
    } else if (l.spec.kind == Kind::dropout && !is_identity(l.spec)) {
      const auto step_numel = static_cast<size_t>(l.out_numel * options.accumulation * options.passes_per_micro_batch);
      for (int slot = 0; slot < 2; ++slot) l.pinned_mask[slot] = p.memory.host<float>(step_numel);
      l.mask = p.memory.device<float>(static_cast<size_t>(l.out_numel));
    } else if (l.spec.kind == Kind::max_pool2d) {
      l.pool = backend.make_max_pool(shape.at(0), shape.at(1), shape.at(2), shape.at(3), l.spec.kernel,
                                     l.spec.stride);
    }
    in = l.out;
    in_grad = l.grad;
    shape = l.out_shape;
    p.layers.push_back(std::move(l));
  }
  MGT_CHECK(!p.layers.empty(), ConfigError, "the model has no layers");
  MGT_CHECK(shape.size() == 2 && shape[1] == options.classes, Error,
            "compiled step: the model's output " + shape_string(shape) + " is not [rows, " +
                std::to_string(options.classes) + "]");

  const auto rows = static_cast<size_t>(step_rows());
  for (int slot = 0; slot < 2; ++slot) {
    p.pinned_scalars[slot] = p.memory.host<UpdateScalars>(1);
    p.pinned_totals[slot] = p.memory.host<StepTotals>(1);
    p.x[slot] = p.memory.device<float>(rows * static_cast<size_t>(p.sample_numel));
    p.y[slot] = p.memory.device<int32_t>(rows);
  }
  p.scalars = p.memory.device<UpdateScalars>(1);
  p.totals = p.memory.device<StepTotals>(1);
  p.row_loss = p.memory.device<double>(static_cast<size_t>(options.pass_rows));
  if (options.bf16) p.params_bf16 = p.memory.device<uint16_t>(params.store.flat_size());

  p.rule = optimizer.update_rule();
  const size_t flat = params.store.flat_size();
  switch (p.rule.kind) {
    case UpdateRule::Kind::sgd: {
      kernels::SgdHyper h;
      h.momentum = p.rule.momentum;
      h.weight_decay = p.rule.weight_decay;
      h.nesterov = p.rule.nesterov;
      p.sgd_kind = kernels::sgd_kind(h);
      if (p.rule.momentum > 0.0) p.state.push_back(p.memory.device<float>(flat));
      break;
    }
    case UpdateRule::Kind::adamw:
      p.state.push_back(p.memory.device<float>(flat));
      p.state.push_back(p.memory.device<float>(flat));
      break;
    case UpdateRule::Kind::none:
      throw ConfigError("the optimizer has no update rule the GPU path can apply");
  }
  MGT_CHECK(optimizer.state_buffers().size() == p.state.size(), Error,
            "optimizer: " + std::to_string(optimizer.state_buffers().size()) + " state buffers, its update rule needs " +
                std::to_string(p.state.size()));
}

CompiledStep::~CompiledStep() {
  // Nothing may still run on buffers about to be freed; an error here was already reported. A
  // failing run does not wait out another deadline (freeing the memory waits for the device).
  try {
    if (std::uncaught_exceptions() == 0) wait_for_steps_in_flight({});
  } catch (...) {
  }
}

void CompiledStep::drop_recordings() {
  for (auto& recorded : program_->recorded) recorded.reset();
  options_.record = false;
}

int64_t CompiledStep::step_rows() const {
  return options_.accumulation * options_.passes_per_micro_batch * options_.pass_rows;
}

void CompiledStep::upload_state(const ParameterStore& host) {
  MGT_CHECK(collected_ == submitted_, Error, "compiled step: upload_state with steps in flight");
  const size_t bytes = host.flat_size() * sizeof(float);
  backend_.upload(params_.params, host.params_data(), bytes);
  auto buffers = optimizer_.state_buffers();
  for (size_t i = 0; i < buffers.size(); ++i) backend_.upload(program_->state[i], buffers[i].data, bytes);
  applied_ = optimizer_.step_count();
}

void CompiledStep::download_state(ParameterStore& host) {
  MGT_CHECK(collected_ == submitted_, Error, "compiled step: download_state with steps in flight");
  const size_t bytes = host.flat_size() * sizeof(float);
  backend_.download(host.params_data(), params_.params, bytes);
  auto buffers = optimizer_.state_buffers();
  for (size_t i = 0; i < buffers.size(); ++i) backend_.download(buffers[i].data, program_->state[i], bytes);
  optimizer_.set_step_count(applied_);
}

StepFigures CompiledStep::begin(const float* x, const int32_t* y) {
  Program& p = *program_;
  const int slot = static_cast<int>(submitted_ % 2);
  const int64_t rows = step_rows();
  kernels::check_labels(y, rows, options_.classes);
  // The slot's buffers (staged rows, pinned scalars, masks and totals) were last used by the step
  // two back, which must have finished: with depth 2 it is waited for here, with depth 1 it was
  // waited for by the previous begin(). The copy runs beside the step in flight; the caller's rows
  // (pinned prefetch slots on a GPU) may be reused once this returns.
  StepFigures done;
  if (options_.pipeline_depth == 2 && submitted_ - collected_ == 2) done = finish();
  backend_.stage(slot, p.x[slot], x, static_cast<size_t>(rows * p.sample_numel) * sizeof(float));
  backend_.stage(slot, p.y[slot], y, static_cast<size_t>(rows) * sizeof(int32_t));
  staged_ = true;
  if (options_.pipeline_depth == 1) done = finish();
  backend_.wait_staged(slot);
  return done;
}

StepFigures CompiledStep::collect(int slot) {
  backend_.wait_done(slot, options_.timeout_s, slot_step_[slot] + 1, options_.check_peers);
  ++collected_;
  const StepTotals& t = *program_->pinned_totals[slot];
  StepFigures f;
  f.valid = true;
  f.step = slot_step_[slot];
  f.loss_sum = t.loss_sum;
  f.correct = t.correct;
  f.nonfinite = t.nonfinite != 0;
  if (f.nonfinite) --applied_;  // the device skipped the update counted when it was launched
  return f;
}

void CompiledStep::wait_for_steps_in_flight(const std::function<void()>& check_peers) {
  for (int64_t k = collected_; k < submitted_; ++k) {
    const int slot = static_cast<int>(k % 2);
    backend_.wait_done(slot, options_.timeout_s, slot_step_[slot] + 1, check_peers);
  }
}

StepFigures CompiledStep::finish() {
  if (collected_ == submitted_) return {};
  return collect(static_cast<int>(collected_ % 2));
}

void CompiledStep::launch(int64_t step, double lr) {
  Program& p = *program_;
  MGT_CHECK(staged_ && submitted_ - collected_ < options_.pipeline_depth, Error,
            "compiled step: launch without begin");
  const int slot = static_cast<int>(submitted_ % 2);
  UpdateScalars& s = *p.pinned_scalars[slot];
  if (p.rule.kind == UpdateRule::Kind::sgd) {
    kernels::SgdHyper h;
    h.lr = lr;
    h.momentum = p.rule.momentum;
    h.weight_decay = p.rule.weight_decay;
    h.nesterov = p.rule.nesterov;
    h.steps_done = applied_;
    s.sgd = kernels::sgd_scalars(h);
  } else {
    kernels::AdamWHyper h;
    h.lr = lr;
    h.beta1 = p.rule.beta1;
    h.beta2 = p.rule.beta2;
    h.eps = p.rule.eps;
    h.weight_decay = p.rule.weight_decay;
    h.step = applied_ + 1;
    s.adamw = kernels::adamw_scalars(h);
  }
  optimizer_.set_learning_rate(lr);
  ++applied_;
  draw_dropout_masks(slot, step);
  backend_.after_staged(slot);
  if (!p.recorded[slot] && options_.record && backend_.can_record() && submitted_ >= options_.eager_steps) {
    try {
      // Recorded on an idle stream, as with one step in flight: the step ahead is waited for
      // (twice a run), its figures left for finish() to collect.
      wait_for_steps_in_flight(options_.check_peers);
      record(slot);
    } catch (const CudaError& e) {
      MGT_CHECK(!options_.collectives_across_ranks, CudaError,
                "recording the step as a CUDA graph failed on rank " + std::to_string(options_.rank) + " (" +
                    e.what() + "). The ranks reduce through NCCL, which needs every rank to record its calls "
                    "alike, so this rank cannot go on without graphs alone: set gpu.cuda_graphs = false");
      // A library call that cannot be captured need not end the run: the step runs as it is.
      options_.record = false;
      std::fprintf(stderr,
                   "mgtrain: warning: [rank %d] recording the step as a CUDA graph failed (%s); running the "
                   "steps without graphs (gpu.cuda_graphs = false skips the attempt)\n",
                   options_.rank, e.what());
    }
  }
  if (p.recorded[slot])
    p.recorded[slot]->replay();
  else if (!enqueue_program(slot))
    --applied_;  // the host sync strategy updated the parameters; the optimizer here did not
  backend_.mark_done(slot);
  slot_step_[slot] = step;
  ++submitted_;
  staged_ = false;
}

// Records slot `slot`'s step for replay. On an error the recording is ended (the stream stays
// usable) and the error passed on.
void CompiledStep::record(int slot) {
  backend_.begin_recording();
  try {
    enqueue_program(slot);
  } catch (...) {
    try {
      backend_.end_recording();
    } catch (...) {
    }
    throw;
  }
  program_->recorded[slot] = backend_.end_recording();
}

// Each dropout layer's scales for every pass of the step, as DropoutLayer draws them: element
// (row, j) is element (global sample) * features + j of the step's stream, so the masks do not
// depend on how ranks, micro-batches or passes split the batch. The slot's block was last read by
// the step before the one in flight, which has finished.
void CompiledStep::draw_dropout_masks(int slot, int64_t step) {
  const int64_t passes = options_.accumulation * options_.passes_per_micro_batch;
  for (Program::Layer& l : program_->layers) {
    if (!l.mask) continue;
    const uint64_t key = rng::make_key(options_.seed, l.spec.rng_purpose);
    const int64_t features = l.out_numel / options_.pass_rows;
    for (int64_t pass = 0; pass < passes; ++pass) {
      float* mask = l.pinned_mask[slot] + pass * l.out_numel;
      const int64_t first_sample = options_.first_sample + pass * options_.pass_rows;
      rng::fill_uniform(mask, static_cast<size_t>(l.out_numel), 0.0f, 1.0f, key, static_cast<uint64_t>(step),
                        static_cast<uint64_t>(first_sample * features));
      kernels::dropout_scales(mask, l.out_numel, l.spec.probability);
    }
  }
}

// One step: per micro-batch of the sync strategy, its passes through forward, loss and backward;
// the strategy's reduction; the non-finite check; the update; the totals back to the host.
bool CompiledStep::enqueue_program(int slot) {
  Program& p = *program_;
  Backend& b = backend_;
  ParameterStore& store = params_.store;
  const size_t flat = store.flat_size();
  const int64_t rows = options_.pass_rows;
  b.zero(params_.grads, flat * sizeof(float));
  b.zero(p.totals, sizeof(StepTotals));
  b.copy_from_pinned(p.scalars, p.pinned_scalars[slot], sizeof(UpdateScalars));
  if (p.params_bf16) b.to_bf16(params_.params, p.params_bf16, flat);
  // A linear layer's weight as this step's bf16 operand.
  const auto weight_bf16 = [&](const Program::Layer& l) { return p.params_bf16 + store.info(l.spec.weight).offset; };
  bool apply = false;
  int64_t pass_index = 0;
  for (int64_t m = 0; m < options_.accumulation; ++m) {
    sync_.begin_micro_batch(m);
    for (int64_t pass = 0; pass < options_.passes_per_micro_batch; ++pass, ++pass_index) {
      const bool last_pass = pass + 1 == options_.passes_per_micro_batch;
      const float* input = p.x[slot] + pass_index * rows * p.sample_numel;
      const int32_t* labels = p.y[slot] + pass_index * rows;
      // Forward.
      const float* x = input;
      for (size_t i = 0; i < p.layers.size(); ++i) {
        Program::Layer& l = p.layers[i];
        switch (l.spec.kind) {
          case Kind::linear:
            b.broadcast_rows(store.param(l.spec.bias), l.out, rows, l.spec.out);
            if (l.x_bf16) {
              b.to_bf16(x, l.x_bf16, static_cast<size_t>(rows * l.spec.in));
              b.gemm_bf16(false, true, rows, l.spec.out, l.spec.in, 1.0f, l.x_bf16, l.spec.in, weight_bf16(l),
                          l.spec.in, 1.0f, l.out, l.spec.out);
            } else {
              b.gemm(false, true, rows, l.spec.out, l.spec.in, 1.0f, x, l.spec.in, store.param(l.spec.weight),
                     l.spec.in, 1.0f, l.out, l.spec.out);
            }
            break;
          case Kind::conv2d:
            l.conv->forward(x, store.param(l.spec.weight), store.param(l.spec.bias), l.out);
            break;
          case Kind::max_pool2d:
            l.pool->forward(x, l.out);
            break;
          case Kind::relu:
            b.relu_forward(x, l.out, l.out_numel);
            break;
          case Kind::dropout:
            if (l.mask) {
              b.copy_from_pinned(l.mask, l.pinned_mask[slot] + pass_index * l.out_numel,
                                 static_cast<size_t>(l.out_numel) * sizeof(float));
              b.multiply(x, l.mask, l.out, l.out_numel);
              break;
            }
            [[fallthrough]];
          case Kind::flatten:
            break;  // its output is its input's memory
          case Kind::custom:
            throw Error("compiled step: layer '" + l.name + "' is not an SDK layer");
        }
        if (l.out) x = l.out;
      }
      // Loss, into the totals.
      Program::Layer& top = p.layers.back();
      b.softmax_xent(top.out, labels, top.grad, p.row_loss, rows, options_.classes, options_.grad_scale,
                     &p.totals->loss_sum, &p.totals->correct);
      // Backward, adding parameter gradients; input gradients only where a layer below has
      // parameters.
      for (size_t i = p.layers.size(); i-- > 0;) {
        Program::Layer& l = p.layers[i];
        const float* in = i == 0 || !p.layers[i - 1].out ? input : p.layers[i - 1].out;
        // Identity layers alias their input, so below the first layer with parameters nothing
        // needs an input gradient (and those layers have no gradient buffer).
        float* grad_in = i > p.first_with_params ? p.layers[i - 1].grad : nullptr;
        switch (l.spec.kind) {
          case Kind::linear:
            if (l.dy_bf16) {
              // dW and dx from bf16 operands into FP32; the bias gradient from the FP32 dy.
              b.to_bf16(l.grad, l.dy_bf16, static_cast<size_t>(rows * l.spec.out));
              b.gemm_bf16(true, false, l.spec.out, l.spec.in, rows, 1.0f, l.dy_bf16, l.spec.out, l.x_bf16,
                          l.spec.in, 1.0f, store.grad(l.spec.weight), l.spec.in);
              if (grad_in)
                b.gemm_bf16(false, false, rows, l.spec.in, l.spec.out, 1.0f, l.dy_bf16, l.spec.out, weight_bf16(l),
                            l.spec.in, 0.0f, grad_in, l.spec.in);
            } else {
              b.gemm(true, false, l.spec.out, l.spec.in, rows, 1.0f, l.grad, l.spec.out, in, l.spec.in, 1.0f,
                     store.grad(l.spec.weight), l.spec.in);
              if (grad_in)
                b.gemm(false, false, rows, l.spec.in, l.spec.out, 1.0f, l.grad, l.spec.out,
                       store.param(l.spec.weight), l.spec.in, 0.0f, grad_in, l.spec.in);
            }
            b.add_column_sums(l.grad, store.grad(l.spec.bias), rows, l.spec.out);
            break;
          case Kind::conv2d:
            l.conv->backward_weights(in, l.grad, store.grad(l.spec.weight), store.grad(l.spec.bias));
            if (grad_in) l.conv->backward_data(l.grad, store.param(l.spec.weight), grad_in);
            break;
          case Kind::max_pool2d:
            if (grad_in) l.pool->backward(in, l.out, l.grad, grad_in);
            break;
          case Kind::relu:
            if (grad_in) b.relu_backward(l.out, l.grad, grad_in, l.out_numel);
            break;
          case Kind::dropout:
            if (l.mask) {
              if (grad_in) b.multiply(l.grad, l.mask, grad_in, l.out_numel);
              break;
            }
            [[fallthrough]];
          case Kind::flatten:
            break;  // its gradient is its input's gradient memory
          case Kind::custom:
            break;
        }
        // The micro-batch's gradients of this layer are final after its last pass.
        if (last_pass && !l.handles.empty() && !options_.host_sync) sync_.gradients_ready(l.handles);
      }
    }
    apply = options_.host_sync ? sync_on_host(m, m + 1 == options_.accumulation) : sync_.end_backward(m);
  }
  if (!apply && options_.host_sync) {
    // The strategy made the update itself (a parameter server): no check, no update here, as on
    // the CPU path.
    b.copy_to_pinned(p.pinned_totals[slot], p.totals, sizeof(StepTotals));
    return false;
  }
  MGT_CHECK(apply, Error,
            "sync strategy: end_backward did not complete the step after its " +
                std::to_string(options_.accumulation) + " micro-batch(es)");
  // After the reduction every rank holds the same sum, so every rank skips the same steps.
  b.flag_nonfinite(params_.grads, flat, &p.totals->nonfinite);
  if (p.rule.kind == UpdateRule::Kind::sgd)
    b.sgd_step(params_.params, params_.grads, p.state.empty() ? nullptr : p.state[0], flat, p.sgd_kind,
               &p.scalars->sgd, &p.totals->nonfinite);
  else
    b.adamw_step(params_.params, params_.grads, p.state[0], p.state[1], flat, &p.scalars->adamw,
                 &p.totals->nonfinite);
  b.copy_to_pinned(p.pinned_totals[slot], p.totals, sizeof(StepTotals));
  if (options_.host_sync) options_.host_sync->discard_grads();  // applied, as the CPU path does
  return true;
}

// The sync strategy's turn on the host store after micro-batch `micro_step`: the CPU path's calls
// on this micro-batch's gradients (waiting for them), then its outcome back to the device.
bool CompiledStep::sync_on_host(int64_t micro_step, bool last) {
  ParameterStore& host = *options_.host_sync;
  const size_t bytes = host.flat_size() * sizeof(float);
  backend_.download(host.grads_data(), params_.grads, bytes);
  host.mark_grads_written();
  for (auto l = program_->layers.rbegin(); l != program_->layers.rend(); ++l)
    if (!l->handles.empty()) sync_.gradients_ready(l->handles);
  const bool apply = sync_.end_backward(micro_step);
  if (!apply && host.grads_discarded())
    backend_.zero(params_.grads, bytes);  // taken out (a micro-shard): the next micro-batch starts from zero
  else
    backend_.upload(params_.grads, host.grads_data(), bytes);  // the reduced sum, or what accumulates
  if (!apply && last) backend_.upload(params_.params, host.params_data(), bytes);  // a parameter server's pull
  return apply;
}

}  // namespace mgt
