#pragma once
// A data key's value (data.train, data.test, `eval --data`) names one file or a data set stored
// in several (shards): a comma-separated list of paths, each of which may be a shell glob pattern
// (`*`, `?`, `[...]`) whose matches are taken in byte order; the list's order is kept. The
// shards are read as one data set, their rows (a token file's tokens) one after the other, so
// what a run draws does not depend on how the data set was split into files.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "datasets/hdf5_format.hpp"
#include "datasets/token_file.hpp"

namespace mgt::data {

// The files `spec` names, in order. A value that is itself an existing path is that one file
// (a name holding a comma or a `*` still works). Throws ConfigError naming the spec and why: an
// empty entry, a pattern that matches nothing, a file named twice (by two entries, or by a
// pattern and an entry: the same file, whatever its spelling).
std::vector<std::string> expand_data_files(const std::string& spec);

// What must agree between the shards of one data set, each fact named as a message says it
// ("vocab_size", "sample shape"), in a fixed order. A sample file's normalisation (mean, std) may
// differ: each file's samples are normalised as that file says.
struct ShardFacts {
  std::string path;
  std::vector<std::pair<std::string, std::string>> facts;  // (what, value)
};
ShardFacts shard_facts(const TokenFileInfo& file);  // what a token means: vocabulary, tokenizer, width
ShardFacts shard_facts(const DatasetInfo& file);    // sample shape and type, classes

// Throws DataError with one line naming the first two files that differ and what differs:
//   data files 'a.h5' and 'b.h5' (shards of 'data/*.h5') differ: vocab_size 256 vs 128; ...
void check_shards_agree(const std::string& spec, const std::vector<ShardFacts>& shards);

// The sample files' description as one data set, once check_shards_agree passed: one file's is
// its own; several give path = spec, num_samples = their sum, the first's shape, types and
// classes (and, for `data inspect` alone, normalisation).
DatasetInfo sample_set_info(const std::string& spec, const std::vector<DatasetInfo>& shards);
// open_dataset_info of every file `spec` names, as one data set.
DatasetInfo open_sample_set_info(const std::string& spec, const std::string& x_name, const std::string& y_name);

// Where tokens (rows) [offset, offset + count) of a concatenation lie in its files: `starts`
// holds each file's first index in the concatenation and, last, the total (starts[0] == 0).
struct FileSpan {
  size_t file = 0;
  int64_t offset = 0;  // within the file
  int64_t count = 0;
};
// Into `out` (cleared; its capacity kept, so a reader's loop does not allocate).
void file_spans(const std::vector<int64_t>& starts, int64_t offset, int64_t count, std::vector<FileSpan>& out);
std::vector<FileSpan> file_spans(const std::vector<int64_t>& starts, int64_t offset, int64_t count);

}  // namespace mgt::data
