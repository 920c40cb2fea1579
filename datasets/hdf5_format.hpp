#pragma once
// The HDF5 sample format: `/x` [N, ...] (uint8 or float32) and `/y` [N] (integer class labels),
// chunked by rows, with attributes num_classes, class_names, mean, std and source on the root
// group or on `/x` (the `/x` attribute wins when both exist; mean and std are scalars or arrays of
// one value per channel of [N, C, ...] samples), and optionally `/row_crc32` [N]
// (see kRowChecksums). README.md, "Data format", describes it for users.
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "mgtrain/error.hpp"
#include "mgtrain/tensor.hpp"

namespace mgt::data {

// Debian's HDF5 is built without thread safety: every HDF5 call in the process (datasets, the
// checkpoint writer, tests) must hold this mutex. It is recursive so helpers that lock it may be
// called by code that already holds it. The functions of this module lock it themselves.
std::recursive_mutex& hdf5_mutex();

// `/row_crc32` [N] uint32: row i's CRC-32 (zlib's) over row i of x as stored (its bytes in the
// file's byte order, which the reader checks before converting them), continued over y[i] as a
// little-endian int32. Its string-list attribute `datasets` names the x
// and y it covers; the reader verifies every row it reads when they are the ones it reads, so a
// damaged file stops the job with the row instead of training on garbage.
inline constexpr const char* kRowChecksums = "row_crc32";
uint32_t row_crc32_label(uint32_t crc_of_row, int32_t label);

struct DatasetInfo {
  std::string path, x_name, y_name;  // names as given ("x"), not "/x"
  Shape sample_shape;                // per sample, e.g. {1, 28, 28}
  int64_t num_samples = 0;
  std::string x_type;                // "uint8" or "float32"
  std::string y_type;                // the stored integer type, e.g. "int32"
  int64_t num_classes = 0;           // attribute num_classes, else max(y) + 1
  bool normalized_attrs = false;     // mean and std attributes present
  float mean = 0.0f, stddev = 1.0f;  // over pixels scaled to [0, 1] for uint8 files
  // Per-channel statistics, when mean or std is an array (of C values for samples [C, ...], a
  // scalar one repeated); empty when both are scalars, which then apply to every element.
  std::vector<float> channel_mean, channel_std;
  std::vector<std::string> class_names;  // empty when the file has none
  Shape x_chunk;                         // chunk dims of x, empty when x is not chunked
  bool row_checksums = false;            // /row_crc32 covers this x and y
  // A token file read in windows (TokenReader): a sample is `labels_per_sample` token ids, its
  // labels the tokens that follow each. 1 for a sample file (one class label a sample).
  int64_t labels_per_sample = 1;
  int64_t tokens = 0;  // a token file's length
  // A token file's windows, a language model's data: a label per token, one token a window
  // (model.context = 1) too, so labels_per_sample alone does not tell.
  bool token_windows() const { return tokens > 0; }
};

// Opens and validates a data file: it exists and is readable HDF5; x and y exist and are
// datasets; x has rank >= 2 and y rank 1 with the same N >= 1; x is uint8 or float32 and y an
// integer type. Throws mgt::DataError with one line naming the file (and the dataset) and the
// expected versus the actual, e.g.
//   data file 'a.h5': dataset '/x' has rank 1, expected at least 2 ([N, ...])
DatasetInfo open_dataset_info(const std::string& path, const std::string& x_name = "x",
                              const std::string& y_name = "y");

// Number of samples of each class 0..num_classes-1 (reads all of y). Throws DataError naming the
// file and row for a label outside [0, num_classes).
std::vector<int64_t> class_counts(const DatasetInfo& info);

// The line for a label outside [0, num_classes): "data file 'F': dataset '/y' row R has label L, ...".
std::string label_error(const DatasetInfo& info, int64_t row, int32_t label);

// Multi-line, human-readable summary for `mgtrain data inspect`: path, N, sample shape, x type,
// classes with per-class counts, normalisation, chunking and all attributes.
std::string inspect(const std::string& path, const std::string& x_name = "x", const std::string& y_name = "y");

}  // namespace mgt::data
