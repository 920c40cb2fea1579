#include "runtime/core_keys.hpp"

#include <climits>
#include <cstdint>
#include <cstdio>

#include "mgtrain/error.hpp"

namespace mgt {

const std::vector<ConfigKey>& core_config_keys() {
  static const std::vector<ConfigKey> keys = {
      {"data.train", KeyType::path, nullptr,
       "HDF5 training file (see `mgtrain data convert`), or a data set in several files: a "
       "comma-separated list of files and glob patterns (*, ?, [...]; each pattern's matches in byte "
       "order), read one after the other as one data set"},
      {"data.test", KeyType::path, "",
       "HDF5 test file (or several, as data.train): rank 0 reports the final model's accuracy on it "
       "(and every train.eval_every_epochs epochs)"},
      {"data.x_name", KeyType::string, "x", "dataset holding the samples, [N, ...]"},
      {"data.y_name", KeyType::string, "y", "dataset holding the integer labels, [N]"},
      {"data.prefetch", KeyType::positive_integer, "3", "batches the reader thread keeps ready"},
      {"data.cache_mb", KeyType::non_negative_real, "0",
       "HDF5 chunk cache per rank in MB; 0 reads each batch's rows straight from the file (the OS "
       "page cache still caches it) and keeps the rank's memory small"},
      {"data.in_memory", KeyType::boolean, "false",
       "read the whole training file into each rank's memory once and take the batches from there, "
       "instead of reading each batch's rows (a token file's windows) from the file: for datasets that "
       "fit, when the reader cannot keep up with a GPU"},
      {"data.augment", KeyType::string, "",
       "random augmentation of the training samples ([C, H, W] only; never the test data), a "
       "comma-separated list: crop:P (pad each side by P zero pixels, then take a random window of "
       "the original size) and flip (mirror the width axis with probability 1/2), e.g. crop:4,flip; "
       "drawn per sample from (train.seed, epoch, sample), so the same at any world size and across "
       "a resume"},
      {"model.name", KeyType::string, nullptr, "model plugin (libmgtrain-model-<name>.so)"},
      {"model.sync_bn", KeyType::boolean, "false",
       "batch norm normalises by the statistics of the global batch, summed over the ranks (as "
       "PyTorch's SyncBatchNorm), instead of each rank's own rows; deterministic mode always does, "
       "in a fixed order; not with an asynchronous strategy (param_server)"},
      {"model.init_from", KeyType::path, "",
       "start from another run's parameters (fine-tuning): a checkpoint file, a run's checkpoint directory "
       "or its latest; every parameter and buffer whose name and shape match is loaded, the rest start "
       "from train.seed, and optimizer state, step, data position and schedule start fresh; rank 0 says "
       "which were loaded, new and left out; a checkpoint none of whose parameters match is refused. "
       "--resume wins (the run's own parameters)"},
      {"optimizer.name", KeyType::string, nullptr, "optimizer plugin"},
      {"sync.name", KeyType::string, "allreduce", "sync-strategy plugin"},
      {"train.epochs", KeyType::positive_integer, "10", "epochs to train"},
      {"train.max_steps", KeyType::non_negative_integer, "0",
       "stop after this many optimizer steps counted from the start of training (0: no limit)"},
      {"train.global_batch", KeyType::positive_integer, "128",
       "samples per optimizer step over all ranks and accumulation micro-batches"},
      {"train.seed", KeyType::non_negative_integer, "0", "seed of all randomness: initialisation, sampling, dropout"},
      {"train.lr_schedule", KeyType::string, "constant",
       "learning-rate schedule: constant, cosine (decays to 0 at the run's last step: of train.epochs, or "
       "train.max_steps where that is sooner), or the name of a schedule plugin (libmgtrain-schedule-<name>.so "
       "in the plugin path; its keys in [schedule])"},
      {"train.stop_grace_s", KeyType::non_negative_real, "10",
       "after a stop signal, seconds the step in flight (or an evaluation) may run on before the ranks "
       "end without finishing it, with no new checkpoint, rank 0 naming the newest intact one (0: no "
       "limit); a second signal a second or more after the first ends them at once. Keep it below the "
       "launcher's wait before SIGKILL (Slurm's KillWait, 30 s by default)"},
      {"train.warmup_steps", KeyType::non_negative_integer, "0",
       "steps of linear learning-rate warm-up from 0 to optimizer.lr (as optimizer.lr_scaling scales it)"},
      {"train.label_smoothing", KeyType::non_negative_real, "0",
       "label smoothing e in [0, 1): the loss's target is (1 - e) on the label plus e / classes on "
       "every class, as PyTorch's CrossEntropyLoss(label_smoothing = e); the test loss stays the plain "
       "cross-entropy"},
      {"train.eval_every_epochs", KeyType::non_negative_integer, "0",
       "with data.test: evaluate the model on it after every N-th epoch, all training ranks sharing the "
       "test set (a line 'epoch E: test accuracy ...' and a metrics record); 0: only at the end"},
      {"optimizer.clip_norm", KeyType::non_negative_real, "0",
       "clip the reduced gradient to this global L2 norm (scaled by clip_norm / norm when its norm is "
       "above it, as torch.nn.utils.clip_grad_norm_) before the update; 0: no clipping. The norm "
       "before clipping is in each metrics record (grad_norm)"},
      {"optimizer.weight_decay_on", KeyType::choice, "all",
       "the parameters the optimizer's weight decay applies to: all, as torch.optim.AdamW(model.parameters()) "
       "does, or matrices: the weights of rank 2 and more (linear and convolution weights, embeddings) and "
       "not the biases or normalisation scales and shifts, as transformers are usually trained",
       "all|matrices"},
      {"optimizer.lr_scaling", KeyType::choice, "none",
       "none, or linear: the learning rate is optimizer.lr x train.global_batch / "
       "optimizer.lr_base_batch (Goyal et al., 2017), said once at the start",
       "none|linear"},
      {"optimizer.lr_base_batch", KeyType::positive_integer, "256",
       "the global batch optimizer.lr is meant for, with optimizer.lr_scaling = linear"},
      {"train.threads", KeyType::positive_integer, "1",
       "compute threads per rank; more than the cores the rank may use (its CPU affinity) are lowered "
       "to them, with a warning"},
      {"train.device", KeyType::choice, "auto",
       "where each rank trains: gpu (one GPU per rank, local rank % visible GPUs), cpu, auto (gpu "
       "when every rank sees one, else cpu), or emulated_gpu: the GPU path's program (the step in memory "
       "of its own, the optimizer's element update, the layers' plans) run by the CPU's kernels, so a "
       "plugin is checked on the GPU path without a GPU (slower than cpu)",
       "auto|cpu|gpu|emulated_gpu"},
      {"gpu.allow_shared", KeyType::boolean, "false",
       "allow more ranks on a node than GPUs, several ranks sharing one GPU (a warning instead of "
       "a refusal); NCCL cannot have two ranks of one job on one GPU, so the ranks then reduce "
       "through host memory and MPI, slower and without CUDA graphs"},
      {"gpu.cuda_graphs", KeyType::boolean, "true",
       "record each step once as a CUDA graph and replay it: one launch per step instead of one "
       "per kernel"},
      {"gpu.precision", KeyType::choice, "fp32",
       "fp32 (every operation in FP32, no TF32), or bf16: mixed precision, the linear layers' "
       "GEMMs and the convolutions on bfloat16 operands with FP32 accumulation (tensor cores), "
       "weights, gradients, optimizer state and everything else in FP32",
       "fp32|bf16"},
      {"gpu.on_oom", KeyType::choice, "error",
       "when the micro-batch does not fit in GPU memory: error (say so and stop), or halve (run "
       "each micro-batch as passes of half the rows, halving again until it fits; the global "
       "batch and the result stay the same)",
       "error|halve"},
      {"metrics.gpu_sample_s", KeyType::positive_real, "5",
       "seconds between samples of each rank's GPU utilisation, memory and temperature (NVML), "
       "reported in each metrics record"},
      {"train.progress", KeyType::choice, "auto",
       "rank 0's progress: bar (a live bar per epoch), lines (plain lines for batch logs) or auto "
       "(a bar when stdout is a terminal)",
       "auto|bar|lines"},
      {"train.nonfinite", KeyType::choice, "abort",
       "a NaN or Inf gradient on any rank: abort the job, or skip the step on all ranks and count it; "
       "either way the line and a metrics record name the rank, the first layer whose output and the "
       "first parameter whose gradient held it (on the CPU)",
       "abort|skip"},
      {"train.log_every", KeyType::positive_integer, "50", "steps between progress lines and metrics records"},
      {"checkpoint.dir", KeyType::path, "runs/%j",
       "directory for step-<N>.h5, latest and metrics.jsonl; %j becomes SLURM_JOB_ID ('local' outside "
       "Slurm): give a fixed directory to resume across jobs"},
      {"checkpoint.every_steps", KeyType::non_negative_integer, "0", "steps between checkpoints (0: only at the end)"},
      {"checkpoint.every_seconds", KeyType::non_negative_real, "0",
       "seconds between checkpoints, as rank 0's clock says at a step's end, beside every_steps (0: off; "
       "lock-step sync strategies)"},
      {"checkpoint.keep", KeyType::non_negative_integer, "3", "checkpoints kept (0: all)"},
      {"checkpoint.overwrite", KeyType::boolean, "false",
       "a run that does not continue the checkpoints already in checkpoint.dir (no --resume, one "
       "from elsewhere, or an older one of its own) removes them (or the newer ones) once it writes "
       "its first checkpoint; false: such a run is refused, since its checkpoints would mix with theirs"},
      {"checkpoint.resume_fallback", KeyType::boolean, "false",
       "with --resume latest, a checkpoint that fails to load (truncated, checksum mismatch) is "
       "skipped for the newest older one that loads; false: the job stops with the error"},
      {"metrics.file", KeyType::path, "", "JSON-lines metrics file (default: <checkpoint.dir>/metrics.jsonl)"},
      {"metrics.tensorboard_dir", KeyType::path, "",
       "write TensorBoard event files here (rank 0, every train.log_every steps); %j as in checkpoint.dir"},
      {"metrics.trace", KeyType::path, "",
       "write a timeline of the run to this file at its end, a Chrome/Perfetto JSON trace (ui.perfetto.dev, "
       "chrome://tracing): a process per rank with its data wait, forward, backward, sync, optimizer, "
       "checkpoints and evaluations, each all-reduce bucket on a track of its own, the data reader's reads; "
       "clocks aligned on rank 0's; %j as in checkpoint.dir"},
      {"metrics.trace_steps", KeyType::positive_integer, "1000",
       "steps metrics.trace records: the first ones of the run (then the final checkpoint and evaluation); "
       "each rank keeps at most 2^20 spans per thread"},
      {"comm.timeout_s", KeyType::positive_real, "300",
       "seconds any wait on other ranks may take before the job is ended"},
  };
  return keys;
}

void check_core_key_ranges(const Config& config) {
  // The largest value each key's use holds: an int, a deadline in steady_clock's nanoseconds
  // (int64, with room for the clock's own count), a byte count in size_t.
  struct Range {
    const char* key;
    double max;
    const char* why;
  };
  static const Range ranges[] = {
      {"data.prefetch", INT_MAX, "a 32-bit int"},
      {"train.epochs", INT_MAX, "a 32-bit int, so that epochs x steps per epoch fits 64 bits"},
      {"comm.timeout_s", 1e9, "a deadline on the steady clock"},
      {"train.stop_grace_s", 1e9, "a deadline on the steady clock"},
      {"metrics.gpu_sample_s", 1e9, "a deadline on the steady clock"},
      {"data.cache_mb", static_cast<double>(SIZE_MAX) / 1e6 / 2, "a byte count"},
  };
  // Label smoothing of 1 would leave no weight on the label: the target would not depend on it.
  if (config.has("train.label_smoothing") && !(config.get_real("train.label_smoothing") < 1.0)) {
    const auto& entry = config.values().at("train.label_smoothing");
    throw ConfigError("config key 'train.label_smoothing' (" + entry.source + "): expected a value in [0, 1), got '" +
                      entry.value + "'");
  }
  for (const auto& range : ranges) {
    if (!config.has(range.key)) continue;
    const double value = config.get_real(range.key);
    if (value <= range.max) continue;
    char max[32];
    std::snprintf(max, sizeof max, "%.6g", range.max);
    const auto& entry = config.values().at(range.key);
    throw ConfigError("config key '" + std::string(range.key) + "' (" + entry.source + "): expected at most " + max +
                      " (it is used as " + range.why + "), got '" + entry.value + "'");
  }
}

}  // namespace mgt
