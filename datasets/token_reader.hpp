#pragma once
// The window reader of token files (datasets/token_file.hpp): a sample is `context` token ids,
// its labels the `context` tokens that follow each, read from the file a window at a time, or
// from the whole file held in memory with data.in_memory.
//
// Sampling (a pure function of seed, epoch and the global sample index, as the image permutation
// is): an epoch is floor((tokens - 1) / context) windows; training window s of epoch e starts at
// an offset drawn from the counter-based generator keyed by (seed, "data.windows", e, s), uniform
// over every offset that leaves context + 1 tokens. Global batch b is windows [b*B, (b+1)*B), rank
// r taking its contiguous slice, so the ranks' batches together are the world-1 batch at any world
// size, accumulation split or resume. Without shuffle (evaluation) window s starts at s * context:
// the file's windows in order, each token predicted once.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "datasets/batch_reader.hpp"
#include "datasets/sharded_reader.hpp"
#include "datasets/token_corpus.hpp"
#include "datasets/token_file.hpp"

namespace mgt::data {

// Where window `sample` of `epoch` starts in a file of `tokens` tokens (shuffled windows).
int64_t window_offset(uint64_t seed, int64_t epoch, int64_t sample, int64_t tokens, int64_t context);

// The reader a data file needs: a TokenReader for a token file, a ShardedReader for a sample file.
// options.path may name several files (datasets/data_files.hpp), all of one kind.
// Refuses (DataError, naming the file and the model) a token file for a model that reads sample
// files (options.context == 0) and a sample file for a language model.
std::unique_ptr<BatchReader> open_batch_reader(const ReaderOptions& options);

// What open_batch_reader's reader would give as info(), without reading the data: a token file's
// windows of `context` tokens, or open_dataset_info's figures. Refuses as open_batch_reader does.
DatasetInfo open_data_info(const std::string& path, const std::string& x_name, const std::string& y_name,
                           int64_t context, const std::string& model_name);

class TokenReader final : public BatchReader {
 public:
  // Opens, validates and reads the file (checksums checked). Throws ConfigError (batch, world,
  // context) or DataError (file; fewer tokens than one window; vocabulary above the model's).
  explicit TokenReader(const ReaderOptions& options);
  ~TokenReader() override;
  const DatasetInfo& info() const override { return info_; }
  int64_t batches_per_epoch() const override { return batches_per_epoch_; }
  int64_t local_batch() const override { return local_; }
  void start(int64_t epoch, int64_t batch_in_epoch) override;
  Batch next() override;

 private:
  ReaderOptions options_;
  DatasetInfo info_;
  // The corpus (one file or several), read a window at a time for a corpus of any size or held
  // in memory (options.in_memory); checked against the files' checksums when opened.
  std::unique_ptr<TokenCorpus> corpus_;
  std::vector<uint32_t> window_;  // one window's token ids, read from corpus_
  // mask_window's scratch (options.mlm).
  std::vector<int32_t> mask_order_;
  int64_t local_ = 0, batches_per_epoch_ = 0;
  int64_t epoch_ = 0, batch_ = 0;
  int slot_ = 0;
  Tensor x_[2];
  std::vector<int32_t> y_[2];
};

}  // namespace mgt::data
