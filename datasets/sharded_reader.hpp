#pragma once
// The sharded reader: this rank's rows of each global batch, read from the HDF5 file by a
// prefetch thread into a ring of reusable buffers, normalised to float32.
//
// Sharding (a pure function of seed, epoch, global batch B and world W): global batch b of epoch
// e is positions perm[b*B .. (b+1)*B) of rng::epoch_permutation(seed, e, N) (identity without
// shuffle); rank r takes the contiguous slice [r*B/W, (r+1)*B/W) of it. Concatenating the ranks'
// batches in rank order gives exactly the world-1 batch. Where the path names several files
// (datasets/data_files.hpp), N is their rows together and row i of the data set is row i of their
// concatenation: the batches are those of one file holding every row.
//
// Augmentation (training data only, ReaderOptions::augment): each sample's random crop offsets and
// flip are drawn from the counter-based generator keyed by (seed, epoch, row), so a sample is
// augmented the same way whatever the world size, the batch it falls in, or a resume.
//
// Threading: after construction only the prefetch thread calls HDF5, always under hdf5_mutex().
// The reader itself is used from one thread (the training loop); it is not thread-safe.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "datasets/batch_reader.hpp"
#include "datasets/hdf5_format.hpp"
#include "datasets/mlm_masks.hpp"
#include "mgtrain/tensor.hpp"

namespace mgt::data {

// How one batch's sorted rows are read from the file (all give identical batches).
enum class ReadMode {
  // The default: where the samples are stored as they are in memory (uint8 or native float32, no
  // filter, contiguous or in chunks of whole rows, no user block), each run of consecutive rows is
  // one pread at the offset HDF5 gives for its chunk, and the labels and checksums are read once
  // at the start: no HDF5 call per batch. Elsewhere as Runs.
  Direct,
  Runs,   // one H5Dread per run of consecutive rows
  Union,  // one H5Dread of the OR of the runs' hyperslabs (HDF5 1.10 maps it per element:
          // ~30x slower on shuffled Fashion-MNIST; kept for comparison)
};

// Random augmentation of [C, H, W] samples, the spec of data.augment: "crop:P,flip".
struct Augmentation {
  int64_t crop_padding = 0;  // crop:P: pad each side by P zeros, then take a random H x W window (0: off)
  bool flip = false;         // flip: mirror the width axis with probability 1/2
  bool any() const { return crop_padding > 0 || flip; }
};

// Parses a comma-separated list of operations ("crop:4,flip", spaces allowed, "" for none). Throws
// ConfigError naming the bad entry, e.g. "entry 'crop:x' of 'crop:x,flip': ..." (the caller adds
// the key and where it came from).
Augmentation parse_augmentation(const std::string& spec);

// Where sample `row` of `epoch` lands: crop offsets in [0, 2P] and whether it is flipped. A pure
// function of (seed, epoch, row), the same on every rank.
struct AugmentDraw {
  int64_t offset_y = 0, offset_x = 0;
  bool flip = false;
};
AugmentDraw augment_draw(const Augmentation& augment, uint64_t seed, int64_t epoch, int64_t row);

struct ReaderOptions {
  // One file, or several as datasets/data_files.hpp says (a list, glob patterns).
  std::string path, x_name = "x", y_name = "y";
  int64_t global_batch = 0;
  int rank = 0;
  int world = 1;
  uint64_t seed = 0;
  bool shuffle = true;
  bool drop_last = true;
  int prefetch_depth = 3;                // batches kept ready ahead of the one the caller holds
  size_t chunk_cache_bytes = 64u << 20;  // HDF5 chunk cache of x (H5Pset_chunk_cache)
  ReadMode read_mode = ReadMode::Direct;
  // Reads the whole file into memory once (data.in_memory) and takes each batch's rows from there:
  // for datasets that fit, when reading rows from the file cannot keep up with a GPU.
  bool in_memory = false;
  // Random crop and flip of each sample as it is read (data.augment): for training data only.
  // Refused (ConfigError) for samples that are not [C, H, W].
  Augmentation augment;
  // Where the prefetch slots' samples live; by default ordinary memory. The GPU path gives pinned
  // host memory, from which copies to the device run asynchronously, on their own stream.
  std::function<void*(size_t bytes)> allocate_slot;
  std::function<void(void*)> release_slot;
  // The prefetch thread shares the caller's one core (core/src/base/idle_core.hpp): it reads only while
  // the caller waits, for its batch in next() or for other ranks. At most one reader of a process
  // does at a time; with another already sharing, this one reads as without.
  bool share_core = false;
  // Called by the prefetch thread after it read each batch: when it began and ended, and the
  // batch's index in its epoch (the timeline trace). Empty: nothing is timed.
  std::function<void(std::chrono::steady_clock::time_point begin, std::chrono::steady_clock::time_point end,
                     int64_t batch)>
      on_batch_read;
  // A language model's window (Model::sequence_length): token files are read in windows of this
  // many tokens by a TokenReader (datasets/token_reader.hpp); 0 for a model of sample files.
  int64_t context = 0;
  // > 0: the model's vocabulary, which a token file's vocab_size must not exceed.
  int64_t vocab_limit = 0;
  // For messages: the model's name (model.name).
  std::string model_name;
  // A masked language model's inputs and labels (datasets/mlm_masks.hpp), asked for by the model;
  // token files only.
  MlmMasking mlm;
};

class ShardedReader final : public BatchReader {
 public:
  // Opens and validates the file and the options, allocates the ring (prefetch_depth + 1 slots of
  // local_batch rows) once. Throws ConfigError (batch/world) or DataError (file, too few samples).
  // Does not start reading: call start(), or next() starts at (0, 0).
  explicit ShardedReader(const ReaderOptions& options);
  ~ShardedReader() override;  // stops and joins the prefetch thread, closes the file
  ShardedReader(const ShardedReader&) = delete;
  ShardedReader& operator=(const ShardedReader&) = delete;

  const DatasetInfo& info() const override;
  int64_t batches_per_epoch() const override;  // floor(N / B) with drop_last, ceil(N / B) otherwise
  int64_t local_batch() const override;        // B / W
  // Whether the rows are read straight from the file (ReadMode::Direct where the layout allows).
  bool reads_directly() const;

  // (Re)positions the stream at (epoch, batch_in_epoch) and starts prefetching from there; the
  // stream then runs on through later epochs forever. batch_in_epoch == batches_per_epoch() means
  // the start of the next epoch. Invalidates the Batch last returned by next().
  void start(int64_t epoch, int64_t batch_in_epoch) override;

  // Blocks until the next batch is ready. The returned Batch (x and y) stays valid until the
  // following next() or start() call. A read error in the thread is rethrown here as DataError
  // naming the file and the rows, and again on every later call until start().
  Batch next() override;

 private:
  void init(const ReaderOptions& options);
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace mgt::data
