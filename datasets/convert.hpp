#pragma once
// Converters to the HDF5 sample format (`mgtrain data convert`). Both write to a temporary file in
// the output's directory and rename it into place, so a failed conversion leaves no partial file.
#include <cstdint>
#include <string>
#include <vector>

#include "mgtrain/tensor.hpp"

namespace mgt::data {

// Rows per HDF5 chunk of /x when the caller passes chunk_rows = 0: 64 rows (49 KiB for 28x28
// uint8, no compression). A random row costs one small chunk; with the reader's default 64 MiB
// chunk cache, shuffled Fashion-MNIST batches of 128 read at ~2800 batches/s (1 row/chunk: ~1000,
// 16: ~1700, 256: ~3100 but 4x the bytes per cold random row).
constexpr int64_t kDefaultChunkRows = 64;

// The ten Fashion-MNIST class names, in label order.
const std::vector<std::string>& fashion_mnist_class_names();

// IDX images (magic 0x00000803, [N, H, W] uint8) and labels (0x00000801, [N] uint8), each gzip
// (detected by its magic bytes) or plain, to HDF5: /x uint8 [N, 1, H, W] chunked by chunk_rows
// rows, /y int32 [N]; attributes num_classes, class_names (when given), source on the root and
// mean, std on /x (over the pixels scaled to [0, 1]). Throws DataError naming the file and what is
// wrong: bad magic, count mismatch between images and labels, truncated data, a label outside
// class_names. IoError when the output cannot be written.
void convert_idx(const std::string& images, const std::string& labels, const std::string& out,
                 const std::vector<std::string>& class_names = {}, int64_t chunk_rows = 0);

// CSV with one sample per line: column label_column (negative counts from the end, -1 = last) is
// the integer class label >= 0, the other columns, in order, are the features; sample_shape must
// multiply to their count. A first line with any non-numeric field is a header and is skipped.
// Features are stored as uint8 when every value is an integer in [0, 255] (so the reader scales
// them by 1/255 like image pixels), as float32 otherwise. mean and std attributes are written as
// for IDX (over the scaled values for uint8). Throws DataError naming the file and line.
void convert_csv(const std::string& csv, const std::string& out, int label_column, const Shape& sample_shape,
                 int64_t chunk_rows = 0);

}  // namespace mgt::data
