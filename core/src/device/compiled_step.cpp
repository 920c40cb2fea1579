#include "device/compiled_step.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <exception>
#include <string>

#include "device/batch_statistics.hpp"
#include "io/console.hpp"
#include "kernels/cpu/softmax.hpp"
#include "kernels/elementwise.hpp"
#include "mgtrain/error.hpp"
#include "observers/trace.hpp"
#include "sdk/layer_executor.hpp"
#include "testing/fault_injection.hpp"

namespace mgt {

using kernels::Backend;

DeviceParameters::DeviceParameters(Backend& backend, const ParameterStore& host)
    : memory(backend),
      params(memory.device<float>(host.flat_size())),
      grads(memory.device<float>(host.flat_size())),
      buffers(host.buffers_size() > 0 ? memory.device<float>(host.buffers_size()) : nullptr),
      store(host.with_buffers(params, grads, buffers)) {}

namespace {

// Each layer's forward and backward as a span of the timeline, named after the layer, nested in
// the step's forward and backward (and a residual block's layers in the block's span).
class TraceLayerTimer final : public LayerTimer {
 public:
  explicit TraceLayerTimer(TraceBuffer* trace) : trace_(trace) {}
  void begin(const Layer&) override { begins_.push_back(TraceBuffer::Clock::now()); }
  void end(const Layer& layer) override {
    trace_->record(layer.name().c_str(), begins_.back(), TraceBuffer::Clock::now());
    begins_.pop_back();
  }

 private:
  TraceBuffer* trace_;
  std::vector<TraceBuffer::Clock::time_point> begins_;
};

// What the host knows of a step's outcome, copied back at the end of each step.
struct StepTotals {
  double loss_sum;
  int64_t correct;
  int32_t nonfinite;
  int32_t padding;
  double grad_norm;
};

// Room for an update's scalars (ElementwiseUpdate::scalars_bytes), aligned for any of them.
constexpr size_t kScalarsBytes = 256;

// What the host sets for each step: the update's scalars and the step's index (dropout's
// stream), copied in at the step's start so that a recorded step reads them at fixed addresses.
struct StepScalars {
  alignas(16) unsigned char update[kScalarsBytes];
  int64_t step;
};

using Clock = std::chrono::steady_clock;

// Adds the seconds since `start` to *total when there is a total to add to.
void add_seconds(double* total, Clock::time_point start) {
  if (total) *total += std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace

// What runs one pass's forward and backward over the step's store.
class CompiledStep::Network {
 public:
  virtual ~Network() = default;
  // The logits of `x` (rows of the planned pass, backend memory), valid until the next forward.
  virtual const float* forward(const float* x, ParameterStore& store, const StepContext& ctx) = 0;
  // Where the loss writes the logits' gradient.
  virtual float* logits_grad() = 0;
  virtual void backward(ParameterStore& store, const StepContext& ctx, const GradientsReady& ready) = 0;
};

// A SequentialModel's layers, planned again by an executor of the step's own on the backend (the
// device's memory).
class CompiledStep::ExecutorNetwork : public Network {
 public:
  ExecutorNetwork(Backend& backend, const SequentialModel& model, bool bf16, const Shape& pass)
      : executor_(backend, model.layers(), bf16) {
    executor_.plan(pass);
  }
  const float* forward(const float* x, ParameterStore& store, const StepContext& ctx) override {
    return executor_.forward(x, store, ctx).data();
  }
  float* logits_grad() override { return executor_.logits_grad(); }
  void backward(ParameterStore& store, const StepContext& ctx, const GradientsReady& ready) override {
    executor_.backward(store, ctx, ready);
  }
  const LayerExecutor& executor() const { return executor_; }

 private:
  LayerExecutor executor_;
};

// The model itself, on the host store it declared its parameters into: any Model (a
// SequentialModel runs its layers by its own executor, in host memory).
class CompiledStep::ModelNetwork : public Network {
 public:
  ModelNetwork(Model& model, const Shape& pass)
      : model_(model), input_(Tensor::view(nullptr, pass)), grad_(model.output_shape(pass)) {}
  const float* forward(const float* x, ParameterStore&, const StepContext& ctx) override {
    input_.rebind(const_cast<float*>(x));  // read only: a model does not write its input
    return model_.forward(input_, ctx).data();
  }
  float* logits_grad() override { return grad_.data(); }
  void backward(ParameterStore&, const StepContext& ctx, const GradientsReady& ready) override {
    model_.backward(grad_, ctx, ready);
  }

 private:
  Model& model_;
  Tensor input_;  // a view of the pass's rows, rebound every pass
  Tensor grad_;
};

void check_compilable(const Model& model, const Optimizer& optimizer, const std::string& model_name,
                      const std::string& optimizer_name) {
  MGT_CHECK(dynamic_cast<const SequentialModel*>(&model) != nullptr, ConfigError,
            "model '" + model_name +
                "' is not a SequentialModel, which is what the GPU path runs; "
                "train.device = cpu runs any model");
  MGT_CHECK(optimizer.element_update() != nullptr, ConfigError,
            "optimizer '" + optimizer_name +
                "' states no element update the GPU path can apply "
                "(Optimizer::element_update, mgtrain/update_rule.hpp); train.device = cpu runs it");
}

// The compiled program: the network, per slot the staged batch and the host's scalars.
struct CompiledStep::Program {
  explicit Program(Backend& backend) : memory(backend) {}

  BackendMemory memory;
  std::unique_ptr<Network> network;
  int64_t sample_numel = 0;
  // Per slot: the staged batch in backend memory, the step's scalars (pinned) and the step's
  // totals (pinned), so that a recorded step reads and writes fixed addresses.
  StepScalars* pinned_scalars[2] = {};
  StepTotals* pinned_totals[2] = {};
  float* x[2] = {};
  int32_t* y[2] = {};
  // Shared by the slots: the steps run one after another on the compute stream.
  StepScalars* scalars = nullptr;
  StepTotals* totals = nullptr;
  double* row_loss = nullptr;
  std::vector<float*> state;                  // the optimizer's state buffers, in state_buffers() order
  std::unique_ptr<ElementwiseUpdate> update;  // null: the optimizer's own step() on the host (in place only)
  std::unique_ptr<kernels::UpdateOp> update_op;
  const uint8_t* decayed = nullptr;  // the optimizer's decay mask where it runs, or null: every element
  std::unique_ptr<kernels::RecordedStep> recorded[2];
  std::unique_ptr<BatchStatistics> batch_statistics;  // null: each pass its own
  std::vector<float> buffers_before;                  // in place: the store's buffers before the step
  std::unique_ptr<LayerTimer> layer_timer;            // while a timeline is written
};

CompiledStep::CompiledStep(Backend& backend, Model& model, ParameterStore& store, Optimizer& optimizer,
                           SyncStrategy& sync, const CompiledStepOptions& options)
    : backend_(backend),
      optimizer_(optimizer),
      sync_(sync),
      store_(store),
      options_(options),
      program_(std::make_unique<Program>(backend)) {
  Program& p = *program_;
  MGT_CHECK(options.pass_rows > 0 && options.passes_per_micro_batch > 0 && options.accumulation > 0 &&
                options.micro_batches_per_pass > 0 && options.accumulation % options.micro_batches_per_pass == 0,
            Error, "compiled step: rows, passes and accumulation must be positive, whole micro-batches to a pass");
  MGT_CHECK(options.micro_batches_per_pass == 1 || (options.in_place && options.passes_per_micro_batch == 1), Error,
            "compiled step: micro-batches share a pass only in place, one pass each");
  MGT_CHECK(!options.host_sync || (!options.in_place && options.host_sync->flat_size() == store.flat_size()), Error,
            "compiled step: the host sync store's layout differs from the device's");
  // A sharded optimizer's shard lives on the host, between the strategy's collectives over MPI.
  MGT_CHECK(!sync.sharding() || options.in_place, Error,
            "compiled step: a sync strategy that shards the optimizer runs in place on the CPU only");
  // The host strategy runs between the kernels, which a recording cannot hold; in place the host
  // runs every operation as it is called.
  if (options.host_sync || options.in_place || options.statistics_comm) options_.record = false;
  if (options.in_place) options_.pipeline_depth = 1;
  MGT_CHECK(options.pipeline_depth == 1 || options.pipeline_depth == 2, Error,
            "compiled step: pipeline depth " + std::to_string(options.pipeline_depth) + ", expected 1 or 2");
  p.sample_numel = shape_numel(options.sample_shape);
  Shape in_shape = {options.pass_rows};
  in_shape.insert(in_shape.end(), options.sample_shape.begin(), options.sample_shape.end());
  const Shape out = model.output_shape(in_shape);
  const int64_t L = options.labels_per_row;
  const bool per_token = options.token_windows || L > 1;
  MGT_CHECK(L > 0 && (per_token ? out.size() == 3 && out[1] == L && out[2] == options.classes
                                : out.size() == 2 && out[1] == options.classes),
            Error,
            "compiled step: the model's output " + shape_string(out) + " is not [rows, " +
                (per_token ? std::to_string(L) + ", " : std::string()) + std::to_string(options.classes) + "]");
  if (options.in_place) {
    p.network = std::make_unique<ModelNetwork>(model, in_shape);
  } else {
    const auto* sequential = dynamic_cast<const SequentialModel*>(&model);
    MGT_CHECK(sequential != nullptr, ConfigError,
              "the model is not a SequentialModel, which is what the GPU path runs");
    p.network = std::make_unique<ExecutorNetwork>(backend, *sequential, options.bf16, in_shape);
  }

  if (options.statistics_comm) {
    if (options.deterministic_statistics)
      p.batch_statistics =
          std::make_unique<DeterministicStatistics>(backend, *options.statistics_comm, options.accumulation);
    else
      p.batch_statistics = std::make_unique<AllRanksStatistics>(backend, *options.statistics_comm);
  }

  const auto rows = static_cast<size_t>(step_rows());
  for (int slot = 0; slot < 2; ++slot) {
    p.pinned_scalars[slot] = p.memory.host<StepScalars>(1);
    p.pinned_totals[slot] = p.memory.host<StepTotals>(1);
    if (options.in_place) continue;  // the caller's rows are read where they are
    p.x[slot] = p.memory.device<float>(rows * static_cast<size_t>(p.sample_numel));
    p.y[slot] = p.memory.device<int32_t>(rows * static_cast<size_t>(L));
  }
  p.scalars = p.memory.device<StepScalars>(1);
  p.totals = p.memory.device<StepTotals>(1);
  p.row_loss = p.memory.device<double>(static_cast<size_t>(options.pass_rows * L));
  backend.read_step_from(&p.scalars->step);

  p.update = optimizer.element_update();
  MGT_CHECK(p.update != nullptr || options.in_place, ConfigError,
            "the optimizer states no element update the GPU path can apply");
  const size_t flat = store.flat_size();
  const auto buffers = optimizer.state_buffers();
  if (p.update) {
    MGT_CHECK(p.update->scalars_bytes() <= kScalarsBytes, Error,
              "optimizer update '" + p.update->name() + "': " + std::to_string(p.update->scalars_bytes()) +
                  " bytes of scalars, at most " + std::to_string(kScalarsBytes));
    MGT_CHECK(buffers.size() == static_cast<size_t>(p.update->states()), Error,
              "optimizer: " + std::to_string(buffers.size()) + " state buffers, its element update needs " +
                  std::to_string(p.update->states()));
    for (int k = 0; k < p.update->states(); ++k)
      p.state.push_back(options.in_place ? buffers[static_cast<size_t>(k)].data : p.memory.device<float>(flat));
    // Parameters in memory the node's ranks share (GradientBuckets' shared update): the other
    // ranks' cores read them next.
    p.update_op = backend.make_update(*p.update, options.in_place && store.params_placed());
    // The weight decay's mask over the optimizer's range (the store, or a sharded optimizer's
    // shard in place), set by the trainer after the optimizer's setup.
    if (const uint8_t* mask = optimizer.decay_mask()) {
      if (options.in_place) {
        p.decayed = mask;
      } else {
        auto* on_device = p.memory.device<uint8_t>(flat);
        backend.upload(on_device, mask, flat);
        p.decayed = on_device;
      }
    }
  }
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
  return options_.accumulation / options_.micro_batches_per_pass * options_.passes_per_micro_batch * options_.pass_rows;
}

void CompiledStep::upload_state(const ParameterStore& host) {
  MGT_CHECK(collected_ == submitted_, Error, "compiled step: upload_state with steps in flight");
  // The gradients hold nothing yet (device memory: garbage): the first backward writes them.
  store_.discard_grads();
  applied_ = optimizer_.step_count();
  if (options_.in_place) return;
  const size_t bytes = host.flat_size() * sizeof(float);
  backend_.upload(store_.params_data(), host.params_data(), bytes);
  if (host.buffers_size() > 0)
    backend_.upload(store_.buffers_data(), host.buffers_data(), host.buffers_size() * sizeof(float));
  auto buffers = optimizer_.state_buffers();
  for (size_t i = 0; i < buffers.size(); ++i) backend_.upload(program_->state[i], buffers[i].data, bytes);
}

void CompiledStep::download_state(ParameterStore& host) {
  MGT_CHECK(collected_ == submitted_, Error, "compiled step: download_state with steps in flight");
  if (program_->update) optimizer_.set_step_count(applied_);  // an optimizer's own step() counts its own
  if (options_.in_place) return;
  const size_t bytes = host.flat_size() * sizeof(float);
  backend_.download(host.params_data(), store_.params_data(), bytes);
  if (host.buffers_size() > 0)
    backend_.download(host.buffers_data(), store_.buffers_data(), host.buffers_size() * sizeof(float));
  auto buffers = optimizer_.state_buffers();
  for (size_t i = 0; i < buffers.size(); ++i) backend_.download(buffers[i].data, program_->state[i], bytes);
}

StepFigures CompiledStep::begin(const float* x, const int32_t* y) {
  Program& p = *program_;
  const int slot = static_cast<int>(submitted_ % 2);
  const int64_t rows = step_rows();
  const int64_t labels = rows * options_.labels_per_row;
  kernels::check_labels(y, labels, options_.classes);
  // The slot's buffers (staged rows, pinned scalars, masks and totals) were last used by the step
  // two back, which must have finished: with depth 2 it is waited for here, with depth 1 it was
  // waited for by the previous begin(). The copy runs beside the step in flight; the caller's rows
  // (pinned prefetch slots on a GPU) may be reused once this returns.
  StepFigures done;
  if (options_.pipeline_depth == 2 && submitted_ - collected_ == 2) done = finish();
  if (options_.in_place) {
    p.x[slot] = const_cast<float*>(x);  // read only
    p.y[slot] = const_cast<int32_t*>(y);
  } else {
    backend_.stage(slot, p.x[slot], x, static_cast<size_t>(rows * p.sample_numel) * sizeof(float));
    backend_.stage(slot, p.y[slot], y, static_cast<size_t>(labels) * sizeof(int32_t));
  }
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
  f.grad_norm = t.grad_norm;
  if (f.nonfinite) --applied_;  // the device skipped the update counted when it was launched
  // Its rows are still in its slot (begin() collects before it stages the next step there).
  if (f.nonfinite && options_.diagnose_nonfinite && !options_.in_place) {
    collected_origin_ = run_again_for_origin(slot);
    collected_origin_step_ = f.step;
  }
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
  MGT_CHECK(staged_ && submitted_ - collected_ < options_.pipeline_depth, Error, "compiled step: launch without begin");
  const int slot = static_cast<int>(submitted_ % 2);
  if (p.update) p.update->scalars(lr, applied_ + 1, p.pinned_scalars[slot]->update);
  p.pinned_scalars[slot]->step = step;
  optimizer_.set_learning_rate(lr);
  ++applied_;
  backend_.after_staged(slot);
  if (!p.recorded[slot] && options_.record && backend_.can_record() && submitted_ >= options_.eager_steps) {
    try {
      // Recorded on an idle stream, as with one step in flight: the step ahead is waited for
      // (twice a run), its figures left for finish() to collect.
      wait_for_steps_in_flight(options_.check_peers);
      record(slot);
    } catch (const CudaError& e) {
      MGT_CHECK(!options_.collectives_across_ranks, CudaError,
                "recording the step as a CUDA graph failed on rank " + std::to_string(options_.rank) + " (" + e.what() +
                    "). The ranks reduce through NCCL, which needs every rank to record its calls "
                    "alike, so this rank cannot go on without graphs alone: set gpu.cuda_graphs = false");
      // A library call that cannot be captured need not end the run: the step runs as it is.
      options_.record = false;
      console::warning("mgtrain: warning: [rank " + std::to_string(options_.rank) +
                       "] recording the step as a CUDA graph failed (" + e.what() +
                       "); running the steps without graphs (gpu.cuda_graphs = false skips the attempt)\n");
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

// One step: per micro-batch of the sync strategy, its passes through forward, loss and backward;
// the strategy's reduction; the non-finite check; the update; the totals back to the host.
bool CompiledStep::enqueue_program(int slot) {
  Program& p = *program_;
  Backend& b = backend_;
  const size_t flat = store_.flat_size();
  const int64_t rows = options_.pass_rows;
  const int64_t together = options_.micro_batches_per_pass;
  b.zero(p.totals, sizeof(StepTotals));
  // In place, the buffers as they were (batch norm's running statistics), for a step that is
  // skipped: its non-finite statistics must not outlive it.
  if (options_.in_place && store_.buffers_size() > 0)
    p.buffers_before.assign(store_.buffers_data(), store_.buffers_data() + store_.buffers_size());
  b.copy_from_pinned(p.scalars, p.pinned_scalars[slot], sizeof(StepScalars));
  StepContext ctx;
  ctx.seed = options_.seed;
  if (options_.trace && !p.layer_timer) p.layer_timer = std::make_unique<TraceLayerTimer>(options_.trace);
  ctx.layer_timer = p.layer_timer.get();
  // The host's copy; the ops read the step from p.scalars when they run (a recording is replayed).
  ctx.step = p.pinned_scalars[slot]->step;
  ctx.training = true;
  ctx.shards = together;
  ctx.batch_statistics = p.batch_statistics.get();
  // Test-only faults, at the step's phases (1-based), as the host reaches them.
  const int64_t fault_step = ctx.step + 1;
  const GradientsReady ready = [&](const std::vector<ParamHandle>& handles) { sync_.gradients_ready(handles); };
  const GradientsReady not_yet = [](const std::vector<ParamHandle>&) {};
  bool apply = false;
  int64_t pass_index = 0;
  for (int64_t m = 0; m < options_.accumulation; m += together) {
    sync_.begin_micro_batch(m);
    for (int64_t pass = 0; pass < options_.passes_per_micro_batch; ++pass, ++pass_index) {
      const bool last_pass = pass + 1 == options_.passes_per_micro_batch;
      const float* input = p.x[slot] + pass_index * rows * p.sample_numel;
      const int32_t* labels = p.y[slot] + pass_index * rows * options_.labels_per_row;
      ctx.micro_step = m;
      ctx.pass = pass_index;
      // The pass's rows in the global batch: dropout's masks are keyed by the global sample.
      ctx.first_sample = options_.first_sample + pass_index * rows;
      TraceSpan forward_span(options_.trace, "forward", "micro_batch", m);
      fault::at(fault::Phase::forward, fault_step);
      const float* logits = p.network->forward(input, store_, ctx);
      // Loss, into the totals; its gradient is where backward starts.
      b.softmax_xent(logits, labels, p.network->logits_grad(), p.row_loss, rows * options_.labels_per_row,
                     options_.classes, options_.grad_scale, options_.label_smoothing, &p.totals->loss_sum,
                     &p.totals->correct);
      forward_span.end();
      TraceSpan backward_span(options_.trace, "backward", "micro_batch", m);
      fault::at(fault::Phase::backward, fault_step);
      // After an update (or a strategy that took them) the gradients hold garbage: written, not added to.
      ctx.overwrite_grads = store_.grads_discarded();
      // The micro-batch's gradients of a layer are final after its last pass.
      p.network->backward(store_, ctx, last_pass && !options_.host_sync ? ready : not_yet);
      store_.mark_grads_written();
      backward_span.end();
    }
    const auto sync_start = Clock::now();
    TraceSpan sync_span(options_.trace, "sync", "micro_batch", m);
    fault::at(fault::Phase::allreduce, fault_step);
    for (int64_t shard = m; shard < m + together; ++shard)
      apply = options_.host_sync ? sync_on_host(shard, shard + 1 == options_.accumulation) : sync_.end_backward(shard);
    add_seconds(options_.sync_seconds, sync_start);
    sync_span.end();
  }
  if (!apply && (options_.host_sync || options_.in_place)) {
    // The strategy made the update itself (a parameter server, whose pull left the parameters):
    // no check, no update here.
    b.copy_to_pinned(p.pinned_totals[slot], p.totals, sizeof(StepTotals));
    return false;
  }
  MGT_CHECK(apply, Error,
            "sync strategy: end_backward did not complete the step after its " + std::to_string(options_.accumulation) +
                " micro-batch(es)");
  const auto update_start = Clock::now();
  TraceSpan update_span(options_.trace, "optimizer");
  const int64_t done = ctx.step + 1;
  const bool norm_wanted =
      options_.clip_norm > 0.0f || !options_.in_place || done % options_.norm_every == 0 || done == options_.last_step;
  OptimizerSharding* shard = sync_.sharding();
  // After the reduction every rank holds the same sum, so every rank skips the same steps.
  if (shard)
    check_and_clip_shard(*shard, norm_wanted);
  else
    b.flag_nonfinite(store_.grads_data(), flat, &p.totals->nonfinite);
  if (options_.in_place && p.totals->nonfinite != 0 && !p.buffers_before.empty())
    std::copy(p.buffers_before.begin(), p.buffers_before.end(), store_.buffers_data());
  // The same reduced gradient on every rank, its norm summed in a fixed order: every rank clips
  // alike, whatever the world size. A non-finite gradient's norm is not finite and clips nothing.
  if (!shard && norm_wanted) b.clip_global_norm(store_.grads_data(), flat, options_.clip_norm, &p.totals->grad_norm);
  fault::at(fault::Phase::optimizer, fault_step);
  // A sharded optimizer updates this rank's shard, with state for the shard alone.
  float* params = shard ? shard->shard_params() : store_.params_data();
  const float* grads = shard ? shard->shard_grads() : store_.grads_data();
  const size_t size = shard ? shard->shard_size() : flat;
  if (p.update_op) {
    p.update_op->run(params, grads, p.state.data(), p.scalars->update, size, p.decayed, &p.totals->nonfinite);
  } else if (p.totals->nonfinite == 0) {
    // An optimizer with no element update, in place: its own step() on the host, through the one
    // host entry point (the flag is current, the CPU backend having run the check at once).
    optimizer_.apply_update(params, grads, size);
  }
  // Every rank skipped or updated alike; the updated shards go to every rank.
  if (shard && p.totals->nonfinite == 0) shard->gather_parameters();
  store_.discard_grads();  // applied or skipped: the next backward writes them
  add_seconds(options_.update_seconds, update_start);
  update_span.end();
  b.copy_to_pinned(p.pinned_totals[slot], p.totals, sizeof(StepTotals));
  if (options_.host_sync) options_.host_sync->discard_grads();  // applied, as in place
  return true;
}

// A sharded optimizer's step, in place: the non-finite flag and the norm over this rank's shard of
// the reduced gradient, summed over the ranks so that every rank skips and clips alike; or, where
// every rank holds the whole reduced gradient (deterministic mode), over all of it in the one fixed
// order, as without sharding, so the bits do not depend on the world size. The shard is then
// scaled by the clipping factor, as clip_global_norm scales the whole buffer.
void CompiledStep::check_and_clip_shard(OptimizerSharding& shard, bool norm_wanted) {
  StepTotals& totals = *program_->totals;  // host memory, in place
  float* grads = shard.shard_grads();
  const size_t size = shard.shard_size();
  if (shard.whole_gradient()) {
    backend_.flag_nonfinite(store_.grads_data(), store_.flat_size(), &totals.nonfinite);
    if (norm_wanted) backend_.clip_global_norm(store_.grads_data(), store_.flat_size(), 0.0f, &totals.grad_norm);
  } else {
    int32_t flag = 0;
    double norm = 0.0;
    backend_.flag_nonfinite(grads, size, &flag);
    if (norm_wanted) backend_.clip_global_norm(grads, size, 0.0f, &norm);  // max_norm 0: the norm alone
    double sums[2] = {static_cast<double>(flag), norm * norm};
    shard.sum_over_ranks(sums, 2);
    totals.nonfinite = sums[0] > 0.0 ? 1 : 0;
    totals.grad_norm = std::sqrt(sums[1]);
  }
  const float factor = kernels::clip_factor(totals.grad_norm, options_.clip_norm);
  if (factor == 1.0f) return;
  for (size_t i = 0; i < size; ++i) grads[i] *= factor;
}

bool CompiledStep::launched_nonfinite() const {
  if (!options_.in_place || submitted_ == 0) return false;
  return program_->pinned_totals[(submitted_ - 1) % 2]->nonfinite != 0;
}

NonFiniteOrigin CompiledStep::diagnose_nonfinite() {
  MGT_CHECK(options_.in_place && submitted_ > 0, Error,
            "compiled step: diagnose_nonfinite only in place, after a step");
  return run_again_for_origin(static_cast<int>((submitted_ - 1) % 2));
}

NonFiniteOrigin CompiledStep::collected_nonfinite_origin(int64_t step) const {
  return step == collected_origin_step_ ? collected_origin_ : NonFiniteOrigin{};
}

NonFiniteOrigin CompiledStep::run_again_for_origin(int slot) {
  Program& p = *program_;
  NonFiniteOrigin origin;
  // Flags and sums in the backend's memory (the totals, free between steps), read back at once.
  auto finite = [&](const float* x, size_t n) {
    backend_.zero(&p.totals->nonfinite, sizeof(p.totals->nonfinite));
    backend_.flag_nonfinite(x, n, &p.totals->nonfinite);
    int32_t flag = 0;
    backend_.download(&flag, &p.totals->nonfinite, sizeof(flag));
    return flag == 0;
  };
  // The pass again must leave the step as it was: the running statistics it moved, the reducer
  // (whose sink would take the gradients' factors) out of the way, the gradient discarded after.
  std::vector<float> buffers(store_.buffers_size());
  if (!buffers.empty()) backend_.download(buffers.data(), store_.buffers_data(), buffers.size() * sizeof(float));
  WeightGradientSink* sink = store_.weight_gradient_sink();
  store_.set_weight_gradient_sink(nullptr);
  const std::function<void(const Layer&, const Tensor&)> after_layer = [&](const Layer& layer, const Tensor& out) {
    if (origin.layer.empty() && !finite(out.data(), static_cast<size_t>(out.numel()))) origin.layer = layer.name();
  };
  const GradientsReady check = [&](const std::vector<ParamHandle>& handles) {
    for (ParamHandle h : handles)
      if (origin.parameter.empty() && !finite(store_.grad(h), store_.info(h).numel))
        origin.parameter = store_.info(h).name;
  };
  // That step's scalars (its index: dropout's masks) back in force, where its slot still holds them.
  if (!options_.in_place) backend_.copy_from_pinned(p.scalars, p.pinned_scalars[slot], sizeof(StepScalars));
  StepContext ctx;
  ctx.seed = options_.seed;
  ctx.step = slot_step_[slot];
  ctx.training = true;
  ctx.shards = options_.micro_batches_per_pass;
  ctx.batch_statistics = p.batch_statistics.get();
  ctx.after_layer = &after_layer;
  ctx.overwrite_grads = true;  // each pass on its own
  const int64_t rows = options_.pass_rows;
  const int64_t passes = step_rows() / rows;
  try {
    for (int64_t pass = 0; pass < passes; ++pass) {
      ctx.pass = pass;
      ctx.micro_step = pass / options_.passes_per_micro_batch * options_.micro_batches_per_pass;
      ctx.first_sample = options_.first_sample + pass * rows;
      const float* logits = p.network->forward(p.x[slot] + pass * rows * p.sample_numel, store_, ctx);
      backend_.softmax_xent(logits, p.y[slot] + pass * rows * options_.labels_per_row, p.network->logits_grad(),
                            p.row_loss, rows * options_.labels_per_row, options_.classes, options_.grad_scale,
                            options_.label_smoothing, &p.totals->loss_sum, &p.totals->correct);
      p.network->backward(store_, ctx, check);
    }
  } catch (...) {
    store_.set_weight_gradient_sink(sink);
    throw;
  }
  store_.set_weight_gradient_sink(sink);
  if (!buffers.empty()) backend_.upload(store_.buffers_data(), buffers.data(), buffers.size() * sizeof(float));
  store_.discard_grads();
  origin.gradient = !origin.parameter.empty();
  return origin;
}

// The sync strategy's turn on the host store after micro-batch `micro_step`: the calls in place
// on this micro-batch's gradients (waiting for them), then its outcome back to the device.
bool CompiledStep::sync_on_host(int64_t micro_step, bool last) {
  ParameterStore& host = *options_.host_sync;
  const size_t bytes = host.flat_size() * sizeof(float);
  backend_.download(host.grads_data(), store_.grads_data(), bytes);
  host.mark_grads_written();
  const auto& handles = dynamic_cast<const ExecutorNetwork&>(*program_->network).executor().handles();
  for (auto h = handles.rbegin(); h != handles.rend(); ++h)
    if (!h->empty()) sync_.gradients_ready(*h);
  const bool apply = sync_.end_backward(micro_step);
  if (!apply && host.grads_discarded())
    store_.discard_grads();  // taken out (a micro-shard): the next micro-batch writes them
  else
    backend_.upload(store_.grads_data(), host.grads_data(), bytes);  // the reduced sum, or what accumulates
  if (!apply && last) backend_.upload(store_.params_data(), host.params_data(), bytes);  // a parameter server's pull
  return apply;
}

}  // namespace mgt
