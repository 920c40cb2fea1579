#include "device/compiled_step.hpp"

#include <cstdio>
#include <exception>
#include <string>

#include "kernels/cpu/softmax.hpp"
#include "mgtrain/error.hpp"
#include "sdk/layer_executor.hpp"

namespace mgt {

using kernels::Backend;

DeviceParameters::DeviceParameters(Backend& backend, const ParameterStore& host)
    : memory(backend),
      params(memory.device<float>(host.flat_size())),
      grads(memory.device<float>(host.flat_size())),
      store(host.with_buffers(params, grads)) {}

namespace {

// What the host knows of a step's outcome, copied back at the end of each step.
struct StepTotals {
  double loss_sum;
  int64_t correct;
  int32_t nonfinite;
  int32_t padding;
};

// Room for an update's scalars (ElementwiseUpdate::scalars_bytes), aligned for any of them.
constexpr size_t kScalarsBytes = 256;

// What the host sets for each step: the update's scalars and the step's index (dropout's
// stream), copied in at the step's start so that a recorded step reads them at fixed addresses.
struct StepScalars {
  alignas(16) unsigned char update[kScalarsBytes];
  int64_t step;
};

}  // namespace

void check_compilable(const Model& model, const Optimizer& optimizer, const std::string& model_name,
                      const std::string& optimizer_name) {
  MGT_CHECK(dynamic_cast<const SequentialModel*>(&model) != nullptr, ConfigError,
            "model '" + model_name +
                "' is not a SequentialModel, which is what the GPU path runs; "
                "train.device = cpu runs it");
  MGT_CHECK(optimizer.element_update() != nullptr, ConfigError,
            "optimizer '" + optimizer_name +
                "' states no element update the GPU path can apply "
                "(Optimizer::element_update, mgtrain/update_rule.hpp); train.device = cpu runs it");
}

// The compiled program: the layers' executor, per slot the staged batch and the host's scalars.
struct CompiledStep::Program {
  Program(Backend& backend, const SequentialModel& model, bool bf16)
      : memory(backend), executor(backend, model.layers(), bf16) {}

  BackendMemory memory;
  LayerExecutor executor;
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
  std::vector<float*> state;  // the optimizer's state buffers, in state_buffers() order
  std::unique_ptr<ElementwiseUpdate> update;
  std::unique_ptr<kernels::UpdateOp> update_op;
  std::unique_ptr<kernels::RecordedStep> recorded[2];
};

CompiledStep::CompiledStep(Backend& backend, const SequentialModel& model, DeviceParameters& params,
                           Optimizer& optimizer, SyncStrategy& sync, const CompiledStepOptions& options)
    : backend_(backend),
      optimizer_(optimizer),
      sync_(sync),
      params_(params),
      options_(options),
      program_(std::make_unique<Program>(backend, model, options.bf16)) {
  Program& p = *program_;
  MGT_CHECK(options.pass_rows > 0 && options.passes_per_micro_batch > 0 && options.accumulation > 0, Error,
            "compiled step: rows, passes and accumulation must be positive");
  MGT_CHECK(!options.host_sync || options.host_sync->flat_size() == params.store.flat_size(), Error,
            "compiled step: the host sync store's layout differs from the device's");
  // The host strategy runs between the kernels, which a recording cannot hold.
  if (options.host_sync) options_.record = false;
  MGT_CHECK(options.pipeline_depth == 1 || options.pipeline_depth == 2, Error,
            "compiled step: pipeline depth " + std::to_string(options.pipeline_depth) + ", expected 1 or 2");
  p.sample_numel = shape_numel(options.sample_shape);
  Shape in_shape = {options.pass_rows};
  in_shape.insert(in_shape.end(), options.sample_shape.begin(), options.sample_shape.end());
  p.executor.plan(in_shape);
  const Shape& out = p.executor.output_shape();
  MGT_CHECK(out.size() == 2 && out[1] == options.classes, Error,
            "compiled step: the model's output " + shape_string(out) + " is not [rows, " +
                std::to_string(options.classes) + "]");

  const auto rows = static_cast<size_t>(step_rows());
  for (int slot = 0; slot < 2; ++slot) {
    p.pinned_scalars[slot] = p.memory.host<StepScalars>(1);
    p.pinned_totals[slot] = p.memory.host<StepTotals>(1);
    p.x[slot] = p.memory.device<float>(rows * static_cast<size_t>(p.sample_numel));
    p.y[slot] = p.memory.device<int32_t>(rows);
  }
  p.scalars = p.memory.device<StepScalars>(1);
  p.totals = p.memory.device<StepTotals>(1);
  p.row_loss = p.memory.device<double>(static_cast<size_t>(options.pass_rows));
  backend.read_step_from(&p.scalars->step);

  p.update = optimizer.element_update();
  MGT_CHECK(p.update != nullptr, ConfigError, "the optimizer states no element update the GPU path can apply");
  MGT_CHECK(p.update->scalars_bytes() <= kScalarsBytes, Error,
            "optimizer update '" + p.update->name() + "': " + std::to_string(p.update->scalars_bytes()) +
                " bytes of scalars, at most " + std::to_string(kScalarsBytes));
  const size_t flat = params.store.flat_size();
  for (int k = 0; k < p.update->states(); ++k) p.state.push_back(p.memory.device<float>(flat));
  p.update_op = backend.make_update(*p.update);
  MGT_CHECK(optimizer.state_buffers().size() == p.state.size(), Error,
            "optimizer: " + std::to_string(optimizer.state_buffers().size()) +
                " state buffers, its element update needs " + std::to_string(p.state.size()));
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
  MGT_CHECK(staged_ && submitted_ - collected_ < options_.pipeline_depth, Error, "compiled step: launch without begin");
  const int slot = static_cast<int>(submitted_ % 2);
  p.update->scalars(lr, applied_ + 1, p.pinned_scalars[slot]->update);
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
  b.copy_from_pinned(p.scalars, p.pinned_scalars[slot], sizeof(StepScalars));
  StepContext ctx;
  ctx.seed = options_.seed;
  // The host's copy; the ops read the step from p.scalars when they run (a recording is replayed).
  ctx.step = p.pinned_scalars[slot]->step;
  ctx.training = true;
  bool apply = false;
  int64_t pass_index = 0;
  for (int64_t m = 0; m < options_.accumulation; ++m) {
    sync_.begin_micro_batch(m);
    for (int64_t pass = 0; pass < options_.passes_per_micro_batch; ++pass, ++pass_index) {
      const bool last_pass = pass + 1 == options_.passes_per_micro_batch;
      const float* input = p.x[slot] + pass_index * rows * p.sample_numel;
      const int32_t* labels = p.y[slot] + pass_index * rows;
      ctx.micro_step = m;
      // The pass's rows in the global batch: dropout's masks are keyed by the global sample.
      ctx.first_sample = options_.first_sample + pass_index * rows;
      const Tensor& logits = p.executor.forward(input, store, ctx);
      // Loss, into the totals; its gradient is where backward starts.
      b.softmax_xent(logits.data(), labels, p.executor.logits_grad(), p.row_loss, rows, options_.classes,
                     options_.grad_scale, &p.totals->loss_sum, &p.totals->correct);
      // The micro-batch's gradients of a layer are final after its last pass.
      p.executor.backward(store, ctx, [&](const std::vector<ParamHandle>& handles) {
        if (last_pass && !options_.host_sync) sync_.gradients_ready(handles);
      });
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
            "sync strategy: end_backward did not complete the step after its " + std::to_string(options_.accumulation) +
                " micro-batch(es)");
  // After the reduction every rank holds the same sum, so every rank skips the same steps.
  b.flag_nonfinite(params_.grads, flat, &p.totals->nonfinite);
  p.update_op->run(params_.params, params_.grads, p.state.data(), p.scalars->update, flat, &p.totals->nonfinite);
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
  const auto& handles = program_->executor.handles();
  for (auto h = handles.rbegin(); h != handles.rend(); ++h)
    if (!h->empty()) sync_.gradients_ready(*h);
  const bool apply = sync_.end_backward(micro_step);
  if (!apply && host.grads_discarded())
    backend_.zero(params_.grads, bytes);  // taken out (a micro-shard): the next micro-batch starts from zero
  else
    backend_.upload(params_.grads, host.grads_data(), bytes);  // the reduced sum, or what accumulates
  if (!apply && last) backend_.upload(params_.params, host.params_data(), bytes);  // a parameter server's pull
  return apply;
}

}  // namespace mgt
