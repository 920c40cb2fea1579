#pragma once
// The one dispatch interface of the kernels: where a compiled training step's tensors live and
// how its operations run, on the CPU (kernels/cpu_backend.hpp) or on one GPU (kernels/cuda,
// loaded from libmgtrain-gpu.so). Every pointer an operation takes is in the backend's memory
// unless it says "pinned" (host memory from allocate_host). Operations are asynchronous on the
// GPU, in the order they are called, on one compute stream; the CPU runs them at once. No CUDA
// type appears here, so the core includes it with the plain C++ compiler.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "mgtrain/ops.hpp"
#include "mgtrain/update_rule.hpp"

namespace mgt::kernels {

using ConvOp = mgt::ConvOp;
using MaxPoolOp = mgt::MaxPoolOp;

// The operations of one step recorded once (a CUDA graph) and replayed.
class RecordedStep {
 public:
  virtual ~RecordedStep() = default;
  virtual void replay() = 0;
};

// An optimizer's update (mgt::ElementwiseUpdate) prepared for one backend, once: the plugin's own
// loop on the CPU, a kernel compiled from its source on a GPU.
class UpdateOp {
 public:
  virtual ~UpdateOp() = default;
  // params, grads, state[k] (k < the update's states()), the scalars and `decayed` (n flags, or
  // null: the weight decay applies to every element) in backend memory, the array `state` itself
  // on the host; nothing is done when *skip != 0 (a non-finite gradient).
  virtual void run(float* params, const float* grads, float* const* state, const void* scalars, size_t n,
                   const uint8_t* decayed, const int32_t* skip) = 0;
};

// The layers' operations (mgt::Ops: GEMM, convolution, pooling, pointwise, randomness), and what
// an executor needs besides: memory, staging, waiting, the loss, the updates and recording.
class Backend : public Ops {
 public:
  // "cpu", or "GPU 0 (NVIDIA H200)".
  virtual std::string describe() const = 0;

  // Memory. allocate throws mgt::OutOfMemoryError when the device has not enough.
  virtual void* allocate(size_t bytes) = 0;
  virtual void release(void* ptr) noexcept = 0;
  virtual void* allocate_host(size_t bytes) = 0;  // pinned on a GPU: copies from it are asynchronous
  virtual void release_host(void* ptr) noexcept = 0;
  // Synchronous copies between the host and the backend; download first waits for the work before it.
  virtual void upload(void* dst, const void* host, size_t bytes) = 0;
  virtual void download(void* host, const void* src, size_t bytes) = 0;

  // Ordered with the operations (as copy and zero are):
  virtual void copy_from_pinned(void* dst, const void* pinned, size_t bytes) = 0;
  virtual void copy_to_pinned(void* pinned, const void* src, size_t bytes) = 0;
  // Input staging on a separate copy stream, so the next batch's transfer overlaps the running
  // step: stage copies host memory (asynchronously when it is pinned) into slot `slot`'s device
  // buffer; wait_staged blocks until those copies are done and the host memory may be reused;
  // after_staged orders the next operations after them (called outside any recording).
  virtual void stage(int slot, void* dst, const void* host, size_t bytes) = 0;
  virtual void wait_staged(int slot) = 0;
  virtual void after_staged(int slot) = 0;
  // Marks the end of the work called so far for slot `slot`, and waits for that mark; the wait
  // gives up after timeout_s with mgt::CommError naming step `step` (1-based; a rank that died
  // mid-collective). While it waits it calls `check_peers` (when set) about every millisecond,
  // which throws when the communication has failed (NCCL's asynchronous error), so such a
  // failure need not wait out the deadline. Nothing is allocated unless it gives up.
  virtual void mark_done(int slot) = 0;
  virtual void wait_done(int slot, double timeout_s, int64_t step, const std::function<void()>& check_peers = {}) = 0;

  // Softmax cross-entropy of one micro-batch: writes grad = (softmax - target) * grad_scale, the
  // target one-hot or smoothed by label_smoothing (kernels/cpu/softmax.hpp), adds the rows' loss
  // sum to *loss_sum and their count of correct arg-maxes to *correct. row_loss is scratch of
  // `rows` doubles.
  virtual void softmax_xent(const float* logits, const int32_t* labels, float* grad, double* row_loss, int64_t rows,
                            int64_t classes, float grad_scale, float label_smoothing, double* loss_sum,
                            int64_t* correct) = 0;
  // *flag = 1 when any element is NaN or Inf (never cleared here).
  virtual void flag_nonfinite(const float* x, size_t n, int32_t* flag) = 0;
  // Gradient clipping by global norm: *norm (a double in backend memory) = the L2 norm of x[0..n)
  // summed in kernels::global_norm's fixed order, the same bits on every backend; x is scaled by
  // kernels::clip_factor(*norm, max_norm) when that is not 1 (max_norm = 0: never).
  virtual void clip_global_norm(float* x, size_t n, float max_norm, double* norm) = 0;
  // The optimizer's update on this backend; throws CudaError naming the update when a GPU's
  // compiler refuses its source. `shared`: other processes' cores read the parameters next (a
  // node's shared parameters), so the CPU evicts their lines ahead of its stores (kernels/cpu/cache_lines.hpp).
  virtual std::unique_ptr<UpdateOp> make_update(const ElementwiseUpdate& update, bool shared) = 0;

  // uniform() draws for the step whose index lies at `step` in this backend's memory, read when
  // the operation runs: a recorded step reads it anew at each replay.
  virtual void read_step_from(const int64_t* step) = 0;

  // Recording a step for replay: false where the backend has no such thing (the CPU).
  virtual bool can_record() const { return false; }
  virtual void begin_recording() {}
  virtual std::unique_ptr<RecordedStep> end_recording() { return nullptr; }
};

// The CPU backend: kernels/cpu, at once, in host memory.
std::unique_ptr<Backend> make_cpu_backend();

}  // namespace mgt::kernels
