#pragma once
// Converters to the HDF5 sample format (`mgtrain data convert`). Both write to a temporary file in
// the output's directory and rename it into place, so a failed conversion leaves no partial file.
#include <cstdint>
#include <functional>
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

// How --bad-images treats a file that is not a readable PNG or JPEG.
enum class BadImages { error, skip };

struct ImageFolderOptions {
  int64_t height = 0, width = 0;  // every image is scaled and centre-cropped to this size
  int channels = 0;               // 1 or 3; 0: 3 when any image is colour, else 1
  BadImages bad_images = BadImages::error;
  int64_t chunk_rows = 0;
};

struct ImageFolderSummary {
  int64_t images = 0;   // rows written
  int64_t skipped = 0;  // bad images left out (BadImages::skip)
  int64_t ignored = 0;  // files that are not images by their name (README, .DS_Store, ...)
  int channels = 0;
  std::vector<std::string> class_names;
};

// A folder in torchvision's ImageFolder layout, DIR/<class>/<images> (class folders sorted by
// name give the labels 0, 1, ...; files are found in sub-folders too, and taken in sorted order),
// to HDF5: /x uint8 [N, C, H, W] and /y int32, with num_classes, class_names (the folder names)
// and on /x the per-channel mean and std (float32 arrays of C values, of pixels scaled to [0, 1]).
// Files named *.png, *.jpg, *.jpeg (any case) are images; other image formats (.bmp, .gif, ...)
// are bad images; hidden files and folders and other files are ignored. Every image is decoded
// twice, first to check it, then to write it, so memory stays bounded. A bad image throws DataError
// naming it and why, or, with BadImages::skip, is reported to `warn` and left out. Throws
// DataError for a folder without classes or a class without images; the output is written to a
// temporary and renamed, so nothing is left behind on error. The same folder gives the same bytes.
ImageFolderSummary convert_image_folder(const std::string& dir, const std::string& out,
                                        const ImageFolderOptions& options,
                                        const std::function<void(const std::string&)>& warn);

}  // namespace mgt::data
