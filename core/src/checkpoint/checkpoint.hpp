#pragma once
// Checkpoints: one HDF5 file per checkpoint, written atomically, readable by any HDF5 tool.
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "mgtrain/optimizer.hpp"
#include "mgtrain/parameters.hpp"

namespace mgt {

// A sync strategy's own state, kept under /sync (the group's attribute `strategy` names it): int64
// counters (a parameter server's update count, each worker's steps) and float32 arrays (each
// rank's error-feedback residual, as "<name>.rank<R>"), every dataset with its checksum. Empty (no
// group) for a strategy that keeps none.
struct SyncState {
  std::string strategy;
  std::map<std::string, std::vector<int64_t>> counters;
  std::map<std::string, std::vector<float>> arrays;
  bool empty() const { return counters.empty() && arrays.empty(); }
};

struct CheckpointMeta {
  int64_t step = 0;            // optimizer steps done
  int64_t epoch = 0;           // epoch of the next batch
  int64_t batch_in_epoch = 0;  // index of the next global batch within that epoch
  // Samples per step of the run that wrote it; the next sample of the epoch is batch_in_epoch x
  // global_batch (stored as samples_in_epoch). 0: not known (a checkpoint from before the
  // attribute whose config does not say either).
  int64_t global_batch = 0;
  uint64_t seed = 0;
  int64_t world_size = 1;  // at save
  std::string mgtrain_version;
  std::string plugins;       // PluginRegistry::loaded_summary()
  std::string plugin_paths;  // PluginRegistry::loaded_paths(): where `mgtrain eval` looks last
  std::string config_ini;    // the full resolved config
  // model.init_from's provenance: the checkpoint the run's parameters started from (its path) and
  // the SHA-256 of that file; both empty for a run initialised from the seed.
  std::string init_from, init_from_sha256;
  SyncState sync;  // read by load_checkpoint only
  // A language model's SentencePiece tokenizer (its serialized model, from the training file's
  // /tokenizer), kept as /tokenizer so that generate and eval need no data file; empty for byte
  // tokens and for models that read samples.
  std::string tokenizer_model;
};

// Writes <dir>/step-<N>.h5 atomically (temporary name in dir, fsync, rename, fsync dir), then
// <dir>/latest the same way, then removes the checkpoints `replaced` names (an earlier run's, under
// checkpoint.overwrite: only now that this run has one of its own; their number into
// *replaced_removed), then all but the newest `keep` checkpoints. Returns the path. A failed write
// (ENOSPC) removes its temporary file, removes nothing else and says in its IoError what `latest`
// names.
std::string write_checkpoint(const std::string& dir, const CheckpointMeta& meta, const ParameterStore& store,
                             Optimizer* optimizer, int64_t keep, const std::vector<std::string>& replaced = {},
                             int* replaced_removed = nullptr);

// write_checkpoint in two halves, so that the disk's half can run beside training: the checkpoint
// built in memory (every array copied and checksummed into an HDF5 image) at the step it records,
// then written to disk as write_checkpoint writes it.
struct FileImage {
  std::unique_ptr<char[]> data;
  size_t size = 0;
};
struct PreparedCheckpoint {
  std::string dir, name;  // name: "step-<N>.h5"
  int64_t step = 0;
  FileImage image;
};
PreparedCheckpoint prepare_checkpoint(const std::string& dir, const CheckpointMeta& meta, const ParameterStore& store,
                                      Optimizer* optimizer);
std::string commit_checkpoint(const PreparedCheckpoint& prepared, int64_t keep,
                              const std::vector<std::string>& replaced = {}, int* replaced_removed = nullptr);

// One job's exclusive use of a checkpoint directory: an flock on <dir>/.lock, held while this
// object lives. The kernel drops it when the process ends, however it ends, so a killed job never
// leaves the directory locked. Two jobs writing one directory would remove each other's temporary
// files and replace each other's checkpoints and `latest`.
class CheckpointDirLock {
 public:
  // Creates the directory where needed, checks that it takes new files, and locks it, recording
  // this host and pid in the lock file. Throws IoError naming the directory and, where that is
  // the problem, the errno text, or the host and pid of the job that holds the lock.
  explicit CheckpointDirLock(std::string dir);
  ~CheckpointDirLock();
  CheckpointDirLock(const CheckpointDirLock&) = delete;
  CheckpointDirLock& operator=(const CheckpointDirLock&) = delete;

  const std::string& dir() const { return dir_; }

  // Removes what a write killed midway left behind (".step-<N>.h5.tmp-<pid>-<random>",
  // ".latest.tmp-...", ".write-check.tmp-..."), and symbolic links with such names (the links,
  // not what they lead to); checkpoints and `latest` are never touched. Only under the lock: the
  // temporary files of a job still writing would look the same. Returns the number removed.
  int remove_leftover_temporaries() const;

 private:
  std::string dir_;
  int fd_ = -1;
};

// The newest checkpoint in `dir` that a run resuming from `resume` ("" for none, "latest" or a
// path) would not continue, or "" when there is none: with no --resume, or a checkpoint from
// another directory, that run's checkpoints and keep-K pruning would mix with these and `latest`
// would move back.
std::string checkpoint_of_another_run(const std::string& dir, const std::string& resume);

// The checkpoints of `dir` newer than the one `resume` names ("latest" or a path) when that one is
// in `dir` (newest first): a run resumed from it rolls back, and theirs would mix with its own.
// Empty otherwise.
std::vector<std::string> checkpoints_after(const std::string& dir, const std::string& resume);

// Reads only the metadata (attributes) of a checkpoint.
CheckpointMeta read_checkpoint_meta(const std::string& path);

// Loads parameters (and optimizer state when optimizer is not null) into an already laid-out
// store; verifies names, shapes, checksums (of the datasets and of the attributes) and that every
// value is finite. Throws IoError/DataError naming the path and the dataset or attribute at fault.
// Every reader here (read_checkpoint_meta, read_checkpoint_group too) validates the attributes:
// ranges, and agreement with each other and with the stored config.
CheckpointMeta load_checkpoint(const std::string& path, ParameterStore& store, Optimizer* optimizer);

// Where a run resumed from `meta` (read from `path`) continues, with `global_batch` samples a
// step over `num_samples` samples, `batches_per_epoch` batches an epoch. The position is the
// sample offset in the epoch, so a run resumed under another global batch continues from the same
// sample; one whose global batch does not divide that offset is refused with both values, as is
// an offset past the end of the data. `note` says what was converted ("" when nothing was).
struct ResumePosition {
  int64_t epoch = 0;
  int64_t batch_in_epoch = 0;
  std::string note;
};
ResumePosition resume_position(const std::string& path, const CheckpointMeta& meta, int64_t global_batch,
                               int64_t num_samples, int64_t batches_per_epoch);

// Checkpoints without the root's attribute checksum (format_version 1, written before it was added)
// are refused unless allowed here (the commands' --allow-unchecked): their step, config and
// attributes cannot be verified, and an edited file can be made to look like one.
void allow_unchecked_checkpoints(bool allow);

// One dataset of a checkpoint group, as stored.
struct StoredTensor {
  std::string name;
  Shape shape;
  std::vector<float> values;
};

// Every dataset of a group ("/params", "/optimizer/momentum"), checksums verified, by name.
std::vector<StoredTensor> read_checkpoint_group(const std::string& path, const std::string& group_path);

// All a checkpoint holds, everything verified as load_checkpoint verifies it (checksums, finite
// values, attributes), for `mgtrain compare`. Throws naming the checkpoint and what is at fault,
// a missing /params or /optimizer included.
struct CheckpointContents {
  CheckpointMeta meta;  // meta.sync: the sync strategy's state, empty when it kept none
  std::vector<StoredTensor> params, buffers;
  int64_t optimizer_steps = 0;
  std::map<std::string, std::vector<StoredTensor>> optimizer;  // by state buffer ("momentum", ...)
};
CheckpointContents read_checkpoint_contents(const std::string& path);

// The model's part of a checkpoint (meta, /params and /buffers where present, verified as above),
// without its optimizer state: what model.init_from starts a new run from.
CheckpointContents read_checkpoint_model(const std::string& path);

// "step-<N>.h5" -> N; nullopt for any other name.
std::optional<int64_t> checkpoint_step(const std::string& name);
// The name <dir>/latest holds, trailing line break and blanks removed; nullopt when there is no
// such file. Throws IoError when it exists but cannot be read.
std::optional<std::string> read_latest_name(const std::string& dir);

// What <dir>/latest names now, for a message about a checkpoint not written: "the previous
// checkpoint is intact: '<dir>/latest' still names step-20.h5", or that there is none. Never throws.
std::string latest_state(const std::string& dir);

// The checkpoints (step-<N>.h5) in `dir`, newest first.
std::vector<std::string> list_checkpoints(const std::string& dir);

// A checkpoint as a user names it: a checkpoint file, a run's `latest` (the text file naming the
// newest checkpoint beside it) or a run's checkpoint directory (its `latest`). Returns the
// checkpoint file's path; anything else is returned as given, for its reader to say what is wrong
// with it. Throws IoError when a `latest` (or a directory's) names no checkpoint that is there.
// eval, export, generate, compare and --resume take their checkpoints through it.
std::string resolve_checkpoint(const std::string& spec);

// Resolves `--resume` argument: "latest" reads <dir>/latest; anything else is a checkpoint as
// resolve_checkpoint takes it.
// Throws IoError naming the directory when there is no checkpoint to resume.
std::string resolve_resume(const std::string& dir, const std::string& spec);

}  // namespace mgt
