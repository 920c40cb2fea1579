#pragma once
// What the training loop and evaluation read batches from: the sharded reader of sample files
// (/x, /y) and the window reader of token files (/tokens) alike.
#include <cstdint>
#include <memory>

#include "datasets/hdf5_format.hpp"
#include "mgtrain/tensor.hpp"

namespace mgt::data {

struct Batch {
  Tensor x;                    // VIEW of a slot: [rows, sample_shape...], float32 (normalised; token ids as floats)
  const int32_t* y = nullptr;  // rows x info().labels_per_sample labels, in the same order
  int64_t rows = 0;            // local_batch(), fewer (possibly 0) only in the last batch without drop_last
  int64_t epoch = 0;
  int64_t batch_in_epoch = 0;
  int64_t first_sample = 0;  // position of this rank's first row within the global batch (rank*local_batch)
  double wait_seconds = 0;   // time next() blocked waiting for the prefetch thread
};

class BatchReader {
 public:
  virtual ~BatchReader() = default;
  virtual const DatasetInfo& info() const = 0;
  virtual int64_t batches_per_epoch() const = 0;
  virtual int64_t local_batch() const = 0;
  // (Re)positions the stream at (epoch, batch_in_epoch); batch_in_epoch == batches_per_epoch()
  // means the start of the next epoch. Invalidates the Batch last returned by next().
  virtual void start(int64_t epoch, int64_t batch_in_epoch) = 0;
  // The next batch; it stays valid until the following next() or start() call.
  virtual Batch next() = 0;
};

}  // namespace mgt::data
