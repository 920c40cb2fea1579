// IDX, CSV and image folders to the HDF5 sample format.
#include "datasets/convert.hpp"

#include <zlib.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <mutex>

#include "datasets/crc32.hpp"
#include "datasets/hdf5_format.hpp"
#include "datasets/hdf5_util.hpp"
#include "datasets/image_decode.hpp"
#include "datasets/regular_file.hpp"

namespace mgt::data {

const std::vector<std::string>& fashion_mnist_class_names() {
  static const std::vector<std::string> names = {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                                                 "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};
  return names;
}

namespace {

// Rows converted per block: bounded memory whatever N, a whole number of chunks per write.
constexpr int64_t kBlockBytes = 8 << 20;
// An IDX image's largest size: a block of chunks of such rows still fits in memory.
constexpr int64_t kMaxIdxImageBytes = int64_t{1} << 24;

int64_t pick_chunk_rows(int64_t requested, int64_t n) {
  const int64_t rows = requested > 0 ? requested : kDefaultChunkRows;
  return std::max<int64_t>(1, std::min(rows, n));
}

// Running sums for the mean and std attributes. uint8 values are summed exactly as integers.
struct Moments {
  bool integer = true;
  uint64_t isum = 0, isq = 0;
  long double fsum = 0, fsq = 0;
  uint64_t count = 0;
  void add_u8(const uint8_t* p, size_t n) {
    for (size_t i = 0; i < n; ++i) {
      isum += p[i];
      isq += static_cast<uint64_t>(p[i]) * p[i];
    }
    count += n;
  }
  void add_f(double v) {
    fsum += v;
    fsq += static_cast<long double>(v) * v;
    ++count;
  }
  // Mean and population std, of the values scaled to [0, 1] when they are uint8.
  std::pair<double, double> result(bool scale_u8) const {
    if (count == 0) return {0.0, 1.0};
    long double s = integer ? static_cast<long double>(isum) : fsum;
    long double q = integer ? static_cast<long double>(isq) : fsq;
    if (scale_u8) {
      s /= 255.0L;
      q /= 255.0L * 255.0L;
    }
    const long double mean = s / count;
    long double var = q / count - mean * mean;
    if (var < 0) var = 0;
    // Integers: exactly zero for constant values, which rounding above may miss by an ulp (a std
    // of 1e-10 would blow the values up by 1e10 instead of leaving them centred).
    if (integer && static_cast<unsigned __int128>(count) * isq == static_cast<unsigned __int128>(isum) * isum) var = 0;
    double sd = std::sqrt(static_cast<double>(var));
    if (!(sd > 0)) sd = 1.0;  // constant data: leave the values centred, never divide by zero
    return {static_cast<double>(mean), sd};
  }
};

// Writes a data file through an h5::TemporaryOutput: nothing under the final name until commit().
class SampleFileWriter {
 public:
  SampleFileWriter(const std::string& out, int64_t n, const Shape& sample_shape, bool u8, int64_t chunk_rows)
      : file_(out), n_(n), numel_(shape_numel(sample_shape)), u8_(u8) {
    std::vector<hsize_t> dims{static_cast<hsize_t>(n)}, chunk{static_cast<hsize_t>(pick_chunk_rows(chunk_rows, n))};
    for (int64_t d : sample_shape) {
      dims.push_back(static_cast<hsize_t>(d));
      chunk.push_back(static_cast<hsize_t>(d));
    }
    h5::Id xs = h5::space(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr));
    h5::Id xp = h5::plist(H5Pcreate(H5P_DATASET_CREATE));
    H5Pset_chunk(xp.get(), static_cast<int>(chunk.size()), chunk.data());
    // No modification times in the datasets' headers: the same input gives the same file bytes.
    H5Pset_obj_track_times(xp.get(), false);
    x_ = h5::dataset(H5Dcreate2(file_.get(), "/x", u8 ? H5T_STD_U8LE : H5T_IEEE_F32LE, xs.get(), H5P_DEFAULT, xp.get(),
                                H5P_DEFAULT));
    const hsize_t yn = static_cast<hsize_t>(n), ychunk = std::min<hsize_t>(yn, 4096);
    h5::Id ys = h5::space(H5Screate_simple(1, &yn, nullptr));
    h5::Id yp = h5::plist(H5Pcreate(H5P_DATASET_CREATE));
    H5Pset_chunk(yp.get(), 1, &ychunk);
    H5Pset_obj_track_times(yp.get(), false);
    y_ = h5::dataset(H5Dcreate2(file_.get(), "/y", H5T_STD_I32LE, ys.get(), H5P_DEFAULT, yp.get(), H5P_DEFAULT));
    if (!x_ || !y_) fail("creating datasets");
    file_space_ = h5::space(H5Dget_space(x_.get()));
    rank_ = dims.size();
  }

  // Rows [row0, row0+rows) of x from a dense buffer of uint8 or float.
  void write_x(int64_t row0, int64_t rows, const void* data) {
    if (rows <= 0) return;
    // Each row's checksum starts with its bytes as stored (little-endian, as on this host).
    const size_t row_bytes = static_cast<size_t>(numel_) * (u8_ ? 1 : 4);
    for (int64_t r = 0; r < rows; ++r)
      row_crc_[static_cast<size_t>(row0 + r)] =
          crc32_update(0, static_cast<const unsigned char*>(data) + static_cast<size_t>(r) * row_bytes, row_bytes);
    std::vector<hsize_t> start(rank_, 0), count(rank_);
    H5Sget_simple_extent_dims(file_space_.get(), count.data(), nullptr);
    start[0] = static_cast<hsize_t>(row0);
    count[0] = static_cast<hsize_t>(rows);
    H5Sselect_hyperslab(file_space_.get(), H5S_SELECT_SET, start.data(), nullptr, count.data(), nullptr);
    // Same rank as the file: HDF5 then maps whole hyperslabs to chunks instead of every element.
    h5::Id ms = h5::space(H5Screate_simple(static_cast<int>(rank_), count.data(), nullptr));
    if (H5Dwrite(x_.get(), u8_ ? H5T_NATIVE_UINT8 : H5T_NATIVE_FLOAT, ms.get(), file_space_.get(), H5P_DEFAULT, data) <
        0)
      fail("writing rows " + std::to_string(row0) + ".." + std::to_string(row0 + rows - 1) + " of /x");
  }

  // The labels, then the row checksums (see kRowChecksums), which cover them too.
  void write_y(const std::vector<int32_t>& y) {
    if (H5Dwrite(y_.get(), H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, y.data()) < 0) fail("writing /y");
    for (size_t i = 0; i < y.size(); ++i) row_crc_[i] = row_crc32_label(row_crc_[i], y[i]);
    const hsize_t n = static_cast<hsize_t>(n_), chunk = std::min<hsize_t>(n, 4096);
    h5::Id space = h5::space(H5Screate_simple(1, &n, nullptr));
    h5::Id plist = h5::plist(H5Pcreate(H5P_DATASET_CREATE));
    H5Pset_chunk(plist.get(), 1, &chunk);
    H5Pset_obj_track_times(plist.get(), false);
    h5::Id crc = h5::dataset(
        H5Dcreate2(file_.get(), kRowChecksums, H5T_STD_U32LE, space.get(), H5P_DEFAULT, plist.get(), H5P_DEFAULT));
    if (!crc || H5Dwrite(crc.get(), H5T_NATIVE_UINT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, row_crc_.data()) < 0)
      fail(std::string("writing /") + kRowChecksums);
    h5::write_attr_strings(crc.get(), "datasets", {"x", "y"});
  }

  hid_t root() const { return file_.get(); }
  hid_t x() const { return x_.get(); }

  void commit() {
    x_.reset();
    y_.reset();
    file_space_.reset();
    file_.commit();
  }

 private:
  [[noreturn]] void fail(const std::string& what) const { file_.fail(what); }

  h5::TemporaryOutput file_;  // first: the datasets below close before it
  int64_t n_, numel_;
  bool u8_;
  std::vector<uint32_t> row_crc_ = std::vector<uint32_t>(static_cast<size_t>(n_));
  size_t rank_ = 0;
  h5::Id x_, y_, file_space_;
};

// ---- IDX ----

// A gzip or plain input stream; zlib reads plain files transparently, but we check the magic
// ourselves so the "source" attribute and messages can say which it was.
class IdxStream {
 public:
  explicit IdxStream(const std::string& path) : path_(path) {
    struct stat info {};
    if (const std::string why = unreachable_path(path, &info); !why.empty())
      throw DataError("IDX file '" + path + "' " + why);
    if (const std::string kind = non_regular_kind(info.st_mode); !kind.empty())
      throw DataError("IDX file '" + path + "' is " + kind +
                      ", not a regular file (expected an IDX file, gzip or plain)");
    std::ifstream probe(path, std::ios::binary);
    if (!probe) throw DataError("IDX file '" + path + "' is not readable: " + std::strerror(errno));
    unsigned char m[2] = {0, 0};
    probe.read(reinterpret_cast<char*>(m), 2);
    gzip_ = probe.gcount() == 2 && m[0] == 0x1f && m[1] == 0x8b;
    gz_ = gzopen(path.c_str(), "rb");
    if (!gz_) throw DataError("IDX file '" + path + "' could not be opened");
    gzbuffer(gz_, 1 << 20);
  }
  ~IdxStream() {
    if (gz_) gzclose(gz_);
  }
  IdxStream(const IdxStream&) = delete;
  IdxStream& operator=(const IdxStream&) = delete;

  bool gzip() const { return gzip_; }

  // Refuses a plain file shorter than its header says, before anything is allocated for it (a
  // gzip file's length is known only once read; it is read in bounded blocks).
  void require_plain_size(uint64_t declared_bytes, const std::string& what) const {
    if (gzip_) return;
    std::error_code ec;
    const uint64_t size = std::filesystem::file_size(path_, ec);
    if (!ec && size < declared_bytes)
      throw DataError("IDX file '" + path_ + "' is truncated: header says " + what + " (" +
                      std::to_string(declared_bytes) + " bytes with the header), the file has " + std::to_string(size) +
                      " bytes");
  }

  // Reads up to n bytes; returns how many were read (fewer only at the end of the data).
  size_t read(void* buf, size_t n) {
    size_t got = 0;
    auto* p = static_cast<char*>(buf);
    while (got < n) {
      const unsigned want = static_cast<unsigned>(std::min<size_t>(n - got, 1u << 30));
      const int r = gzread(gz_, p + got, want);
      if (r < 0) {
        int errnum = 0;
        const char* msg = gzerror(gz_, &errnum);
        throw DataError("IDX file '" + path_ + "' is corrupt or truncated: " + (msg ? msg : "read error"));
      }
      if (r == 0) break;
      got += static_cast<size_t>(r);
    }
    return got;
  }

  // Header: magic 0x0000 0x08 <ndims>, then ndims big-endian uint32 sizes.
  std::vector<int64_t> header(int expected_ndims, const char* what) {
    unsigned char m[4] = {0, 0, 0, 0};
    const size_t got = read(m, 4);
    const uint32_t magic = (uint32_t{m[0]} << 24) | (uint32_t{m[1]} << 16) | (uint32_t{m[2]} << 8) | m[3];
    const uint32_t want = 0x00000800u | static_cast<uint32_t>(expected_ndims);
    if (got < 4 || magic != want) {
      char buf[160];
      std::snprintf(buf, sizeof(buf), "has magic 0x%08x, expected 0x%08x (IDX %s: unsigned bytes, %d dimension%s)",
                    magic, want, what, expected_ndims, expected_ndims == 1 ? "" : "s");
      throw DataError("IDX file '" + path_ + "' " + buf);
    }
    std::vector<int64_t> dims;
    for (int i = 0; i < expected_ndims; ++i) {
      unsigned char d[4];
      if (read(d, 4) < 4) throw DataError("IDX file '" + path_ + "' is truncated inside its header");
      dims.push_back((int64_t{d[0]} << 24) | (int64_t{d[1]} << 16) | (int64_t{d[2]} << 8) | d[3]);
    }
    return dims;
  }

 private:
  std::string path_;
  gzFile gz_ = nullptr;
  bool gzip_ = false;
};

}  // namespace

void convert_idx(const std::string& images, const std::string& labels, const std::string& out,
                 const std::vector<std::string>& class_names, int64_t chunk_rows) {
  IdxStream ls(labels);
  const int64_t n = ls.header(1, "labels")[0];
  ls.require_plain_size(8 + static_cast<uint64_t>(n), std::to_string(n) + " labels");
  // Grown as the labels arrive, so a header's count alone cannot ask for gigabytes.
  std::vector<uint8_t> raw_labels;
  size_t got_labels = 0;
  while (got_labels < static_cast<size_t>(n)) {
    raw_labels.resize(std::min<size_t>(static_cast<size_t>(n), got_labels + (size_t{1} << 20)));
    const size_t got = ls.read(raw_labels.data() + got_labels, raw_labels.size() - got_labels);
    got_labels += got;
    if (got_labels < raw_labels.size()) break;
  }
  if (static_cast<int64_t>(got_labels) != n)
    throw DataError("IDX file '" + labels + "' is truncated: header says " + std::to_string(n) + " labels, found " +
                    std::to_string(got_labels));

  IdxStream is(images);
  const auto dims = is.header(3, "images");
  if (dims[0] != n)
    throw DataError("IDX file '" + images + "' has " + std::to_string(dims[0]) + " images but labels file '" + labels +
                    "' has " + std::to_string(n) + " labels; expected the same count");
  if (n < 1) throw DataError("IDX file '" + images + "' has 0 images, expected at least 1");
  const int64_t h = dims[1], w = dims[2], row_bytes = h * w;
  if (row_bytes < 1)
    throw DataError("IDX file '" + images + "' has empty images (" + std::to_string(h) + "x" + std::to_string(w) + ")");
  if (row_bytes > kMaxIdxImageBytes)
    throw DataError("IDX file '" + images + "' declares images of " + std::to_string(h) + "x" + std::to_string(w) +
                    " (" + std::to_string(row_bytes) + " bytes each), more than the " +
                    std::to_string(kMaxIdxImageBytes) + " bytes (4096x4096) an image may have");
  is.require_plain_size(16 + static_cast<uint64_t>(n) * static_cast<uint64_t>(row_bytes),
                        std::to_string(n) + " images of " + std::to_string(h) + "x" + std::to_string(w));

  std::vector<int32_t> y(raw_labels.begin(), raw_labels.end());
  int64_t num_classes = 0;
  for (int64_t i = 0; i < n; ++i) num_classes = std::max<int64_t>(num_classes, y[static_cast<size_t>(i)] + 1);
  if (!class_names.empty()) {
    const int64_t k = static_cast<int64_t>(class_names.size());
    for (int64_t i = 0; i < n; ++i)
      if (y[static_cast<size_t>(i)] >= k)
        throw DataError("IDX file '" + labels + "' row " + std::to_string(i) + " has label " +
                        std::to_string(y[static_cast<size_t>(i)]) + ", expected < " + std::to_string(k) +
                        " (the number of class names)");
    num_classes = k;
  }

  std::lock_guard lock(hdf5_mutex());
  const int64_t crows = pick_chunk_rows(chunk_rows, n);
  SampleFileWriter writer(out, n, Shape{1, h, w}, true, crows);
  // Whole chunks per block so every chunk is written once.
  const int64_t block_rows = std::max<int64_t>(1, kBlockBytes / (row_bytes * crows)) * crows;
  std::vector<uint8_t> block(static_cast<size_t>(std::min(block_rows, n) * row_bytes));
  Moments mom;
  for (int64_t row = 0; row < n; row += block_rows) {
    const int64_t rows = std::min(block_rows, n - row);
    const size_t want = static_cast<size_t>(rows * row_bytes);
    const size_t got = is.read(block.data(), want);
    if (got != want)
      throw DataError("IDX file '" + images + "' is truncated: header says " + std::to_string(n) + " images of " +
                      std::to_string(h) + "x" + std::to_string(w) + " (" + std::to_string(n * row_bytes) +
                      " bytes of pixels), found " + std::to_string(static_cast<int64_t>(row * row_bytes + got)));
    mom.add_u8(block.data(), want);
    writer.write_x(row, rows, block.data());
  }
  writer.write_y(y);

  const auto [mean, sd] = mom.result(true);
  h5::write_attr_int64(writer.root(), "num_classes", num_classes);
  if (!class_names.empty()) h5::write_attr_strings(writer.root(), "class_names", class_names);
  h5::write_attr_string(writer.root(), "source",
                        "IDX images '" + images + "'" + (is.gzip() ? " (gzip)" : "") + ", labels '" + labels + "'" +
                            (ls.gzip() ? " (gzip)" : ""));
  h5::write_attr_double(writer.x(), "mean", mean);
  h5::write_attr_double(writer.x(), "std", sd);
  writer.commit();
}

// ---- CSV ----

namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

bool parse_number(std::string_view s, double& v) {
  s = trim(s);
  if (!s.empty() && s.front() == '+') s.remove_prefix(1);
  if (s.empty()) return false;
  const auto r = std::from_chars(s.data(), s.data() + s.size(), v);
  return r.ec == std::errc() && r.ptr == s.data() + s.size();
}

void split(const std::string& line, std::vector<std::string_view>& fields) {
  fields.clear();
  std::string_view rest(line);
  while (true) {
    const size_t c = rest.find(',');
    fields.push_back(rest.substr(0, c));
    if (c == std::string_view::npos) break;
    rest.remove_prefix(c + 1);
  }
}

bool blank(const std::string& line) { return trim(line).empty(); }

}  // namespace

void convert_csv(const std::string& csv, const std::string& out, int label_column, const Shape& sample_shape,
                 int64_t chunk_rows) {
  const std::string where = "CSV file '" + csv + "'";
  if (sample_shape.empty() || std::any_of(sample_shape.begin(), sample_shape.end(), [](int64_t d) { return d < 1; }))
    throw DataError(where + ": sample shape " + shape_string(sample_shape) + " is invalid, expected positive sizes");
  const int64_t numel = shape_numel(sample_shape);
  struct stat info {};
  if (const std::string why = unreachable_path(csv, &info); !why.empty()) throw DataError(where + " " + why);
  if (const std::string kind = non_regular_kind(info.st_mode); !kind.empty())
    throw DataError(where + " is " + kind + ", not a regular file (expected a CSV file)");

  // Pass 1: validate every line, count rows, decide uint8 or float32 and compute the moments.
  std::ifstream in(csv);
  if (!in) throw DataError(where + " is not readable: " + std::strerror(errno));
  std::string line;
  std::vector<std::string_view> fields;
  int64_t lineno = 0, rows = 0, ncols = -1, label_col = -1;
  bool header = false, all_u8 = true;
  Moments mom_u8, mom_f;
  mom_f.integer = false;
  std::vector<uint8_t> u8row;
  auto line_error = [&](const std::string& what) {
    return DataError(where + " line " + std::to_string(lineno) + ": " + what);
  };
  while (std::getline(in, line)) {
    ++lineno;
    if (blank(line)) continue;
    split(line, fields);
    double v = 0;
    if (ncols < 0) {
      ncols = static_cast<int64_t>(fields.size());
      label_col = label_column < 0 ? ncols + label_column : label_column;
      if (label_col < 0 || label_col >= ncols)
        throw DataError(where + ": label column " + std::to_string(label_column) + " is out of range, the file has " +
                        std::to_string(ncols) + " columns");
      if (ncols - 1 != numel)
        throw DataError(where + " has " + std::to_string(ncols - 1) +
                        " feature columns (plus the label), but sample shape " + shape_string(sample_shape) +
                        " needs " + std::to_string(numel));
      const bool numeric =
          std::all_of(fields.begin(), fields.end(), [&](std::string_view f) { return parse_number(f, v); });
      if (!numeric) {
        header = true;
        continue;
      }
    }
    if (static_cast<int64_t>(fields.size()) != ncols)
      throw line_error("has " + std::to_string(fields.size()) + " columns, expected " + std::to_string(ncols));
    for (int64_t c = 0; c < ncols; ++c) {
      if (!parse_number(fields[static_cast<size_t>(c)], v) || !std::isfinite(v))
        throw line_error("column " + std::to_string(c) + " is '" + std::string(trim(fields[static_cast<size_t>(c)])) +
                         "', expected a " + (c == label_col ? "class label" : "finite number"));
      if (c == label_col) {
        if (v < 0 || v != std::floor(v) || v > 2147483647.0)
          throw line_error("label '" + std::string(trim(fields[static_cast<size_t>(c)])) +
                           "' is not a class index (an integer >= 0)");
        continue;
      }
      // A value beyond float32's range would be written as inf, which the reader then refuses.
      if (std::fabs(v) > std::numeric_limits<float>::max())
        throw line_error("column " + std::to_string(c) + " is '" + std::string(trim(fields[static_cast<size_t>(c)])) +
                         "', expected a number that fits a float32 (magnitude at most 3.40282e+38)");
      if (all_u8 && (v != std::floor(v) || v < 0 || v > 255)) all_u8 = false;
      if (all_u8) {
        const auto b = static_cast<uint8_t>(v);
        mom_u8.add_u8(&b, 1);
      }
      mom_f.add_f(v);
    }
    ++rows;
  }
  if (rows == 0) throw DataError(where + " has no data rows" + (header ? " (only a header)" : ""));

  // Pass 2: parse again and write blocks of rows.
  std::lock_guard lock(hdf5_mutex());
  const int64_t crows = pick_chunk_rows(chunk_rows, rows);
  SampleFileWriter writer(out, rows, sample_shape, all_u8, crows);
  const int64_t elem = all_u8 ? 1 : 4;
  const int64_t block_rows = std::max<int64_t>(1, kBlockBytes / (numel * elem * crows)) * crows;
  std::vector<float> fblock(all_u8 ? 0 : static_cast<size_t>(std::min(block_rows, rows) * numel));
  std::vector<uint8_t> ublock(all_u8 ? static_cast<size_t>(std::min(block_rows, rows) * numel) : 0);
  std::vector<int32_t> y(static_cast<size_t>(rows));
  int64_t num_classes = 0;
  in.clear();
  in.seekg(0);
  bool skipped_header = !header;
  int64_t row = 0, block_start = 0;
  while (std::getline(in, line) && row < rows) {
    if (blank(line)) continue;
    if (!skipped_header) {
      skipped_header = true;
      continue;
    }
    split(line, fields);
    const int64_t slot = row - block_start;
    int64_t k = 0;
    for (int64_t c = 0; c < ncols; ++c) {
      double v = 0;
      parse_number(fields[static_cast<size_t>(c)], v);
      if (c == label_col) {
        y[static_cast<size_t>(row)] = static_cast<int32_t>(v);
        num_classes = std::max<int64_t>(num_classes, static_cast<int64_t>(v) + 1);
      } else if (all_u8) {
        ublock[static_cast<size_t>(slot * numel + k++)] = static_cast<uint8_t>(v);
      } else {
        fblock[static_cast<size_t>(slot * numel + k++)] = static_cast<float>(v);
      }
    }
    ++row;
    if (row - block_start == block_rows || row == rows) {
      writer.write_x(block_start, row - block_start, all_u8 ? static_cast<const void*>(ublock.data()) : fblock.data());
      block_start = row;
    }
  }
  if (row != rows) throw DataError(where + " changed while it was being converted");
  writer.write_y(y);

  const auto [mean, sd] = all_u8 ? mom_u8.result(true) : mom_f.result(false);
  h5::write_attr_int64(writer.root(), "num_classes", num_classes);
  h5::write_attr_string(writer.root(), "source",
                        where + ", label column " + std::to_string(label_col) + (header ? ", header skipped" : ""));
  h5::write_attr_double(writer.x(), "mean", mean);
  h5::write_attr_double(writer.x(), "std", sd);
  writer.commit();
}

// ---- Image folders ----

namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

enum class FileKind { image, other_image_format, ignored };

FileKind kind_of(const std::filesystem::path& p) {
  const std::string ext = lower(p.extension().string());
  if (ext == ".png" || ext == ".jpg" || ext == ".jpeg") return FileKind::image;
  // What torchvision's ImageFolder would also load: named, not silently dropped.
  for (const char* other : {".bmp", ".gif", ".ppm", ".pgm", ".tif", ".tiff", ".webp"})
    if (ext == other) return FileKind::other_image_format;
  return FileKind::ignored;
}

bool hidden(const std::filesystem::path& p) {
  const std::string name = p.filename().string();
  return !name.empty() && name[0] == '.';
}

struct FolderImage {
  std::string path;
  int32_t label = 0;
};

}  // namespace

ImageFolderSummary convert_image_folder(const std::string& dir, const std::string& out,
                                        const ImageFolderOptions& options,
                                        const std::function<void(const std::string&)>& warn) {
  namespace fs = std::filesystem;
  const std::string where = "image folder '" + dir + "'";
  if (options.height < 1 || options.width < 1)
    throw DataError(where + ": size " + std::to_string(options.height) + "x" + std::to_string(options.width) +
                    " is invalid, expected positive sizes");
  if (options.channels != 0 && options.channels != 1 && options.channels != 3)
    throw DataError(where + ": channels " + std::to_string(options.channels) + " is invalid, expected 1 or 3");
  std::error_code ec;
  struct stat info {};
  if (const std::string why = unreachable_path(dir, &info); !why.empty()) throw DataError(where + " " + why);
  if (!S_ISDIR(info.st_mode)) throw DataError(where + " is not a directory");

  ImageFolderSummary summary;
  std::vector<fs::path> class_dirs;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (hidden(it->path())) continue;
    if (it->is_directory(ec))
      class_dirs.push_back(it->path());
    else
      ++summary.ignored;
  }
  if (ec) throw DataError(where + " cannot be listed: " + ec.message());
  // Byte order of the names, as Python's sorted() orders torchvision's classes.
  std::sort(class_dirs.begin(), class_dirs.end(),
            [](const fs::path& a, const fs::path& b) { return a.filename().string() < b.filename().string(); });
  if (class_dirs.empty())
    throw DataError(where + " has no class folders, expected DIR/<class>/<images> (torchvision's ImageFolder layout)");
  if (class_dirs.size() > static_cast<size_t>(INT32_MAX)) throw DataError(where + " has too many class folders");

  // Pass 1: list and decode every image; decide the channel count.
  auto bad = [&](const std::string& file, const std::string& reason) {
    const std::string what = "image '" + file + "' " + reason;
    if (options.bad_images == BadImages::error)
      throw DataError(where + ": " + what + " (--bad-images skip leaves bad images out)");
    warn(what + "; skipped");
    ++summary.skipped;
  };
  std::vector<FolderImage> images;
  bool any_colour = false;
  for (size_t label = 0; label < class_dirs.size(); ++label) {
    const fs::path& class_dir = class_dirs[label];
    summary.class_names.push_back(class_dir.filename().string());
    // Sorted by folder, then by name within it: the order of torchvision's sorted(os.walk(...)).
    std::vector<std::pair<std::string, std::string>> files;
    fs::recursive_directory_iterator it(class_dir, fs::directory_options::follow_directory_symlink, ec), end;
    for (; !ec && it != end; it.increment(ec)) {
      if (hidden(it->path())) {
        if (it->is_directory(ec)) it.disable_recursion_pending();
        continue;
      }
      if (it->is_directory(ec)) continue;
      files.emplace_back(it->path().parent_path().string(), it->path().filename().string());
    }
    if (ec) throw DataError(where + ": class folder '" + class_dir.string() + "' cannot be listed: " + ec.message());
    std::sort(files.begin(), files.end());
    int64_t usable = 0;
    for (const auto& [parent, name] : files) {
      const std::string file = (fs::path(parent) / name).string();
      switch (kind_of(name)) {
        case FileKind::ignored:
          ++summary.ignored;
          continue;
        case FileKind::other_image_format:
          bad(file, "is a " + lower(fs::path(name).extension().string()).substr(1) +
                        " file; only PNG and JPEG are supported");
          continue;
        case FileKind::image:
          break;
      }
      try {
        const Image image = decode_image(file);
        any_colour = any_colour || image.channels == 3;
        images.push_back({file, static_cast<int32_t>(label)});
        ++usable;
      } catch (const BadImage& e) {
        bad(file, e.reason);
      }
    }
    if (usable == 0)
      throw DataError(where + ": class folder '" + class_dir.string() +
                      "' has no usable PNG or JPEG images, expected at least one (every class needs samples)");
  }

  const int channels = options.channels != 0 ? options.channels : any_colour ? 3 : 1;
  summary.channels = channels;
  const int64_t n = static_cast<int64_t>(images.size());
  const int64_t plane = options.height * options.width, row_bytes = plane * channels;

  // Pass 2: decode again, fit to the size, and write blocks of whole chunks.
  std::lock_guard lock(hdf5_mutex());
  const int64_t crows = pick_chunk_rows(options.chunk_rows, n);
  SampleFileWriter writer(out, n, Shape{channels, options.height, options.width}, true, crows);
  const int64_t block_rows = std::max<int64_t>(1, kBlockBytes / (row_bytes * crows)) * crows;
  std::vector<uint8_t> block(static_cast<size_t>(std::min(block_rows, n) * row_bytes));
  std::vector<Moments> moments(static_cast<size_t>(channels));
  std::vector<int32_t> y(static_cast<size_t>(n));
  for (int64_t row0 = 0; row0 < n; row0 += block_rows) {
    const int64_t rows = std::min(block_rows, n - row0);
    for (int64_t r = 0; r < rows; ++r) {
      const FolderImage& item = images[static_cast<size_t>(row0 + r)];
      std::vector<uint8_t> fitted;
      try {
        fitted = fit_image(decode_image(item.path), options.height, options.width, channels);
      } catch (const BadImage& e) {
        throw DataError(where + ": image '" + item.path + "' changed while it was being converted: it now " + e.reason);
      }
      for (int c = 0; c < channels; ++c) moments[static_cast<size_t>(c)].add_u8(fitted.data() + c * plane, plane);
      std::copy(fitted.begin(), fitted.end(), block.begin() + r * row_bytes);
      y[static_cast<size_t>(row0 + r)] = item.label;
    }
    writer.write_x(row0, rows, block.data());
  }
  writer.write_y(y);

  std::vector<float> mean, sd;
  for (const Moments& m : moments) {
    const auto [mu, sigma] = m.result(true);
    mean.push_back(static_cast<float>(mu));
    sd.push_back(static_cast<float>(sigma));
  }
  h5::write_attr_int64(writer.root(), "num_classes", static_cast<int64_t>(summary.class_names.size()));
  h5::write_attr_strings(writer.root(), "class_names", summary.class_names);
  h5::write_attr_string(writer.root(), "source",
                        where + ", " + std::to_string(options.height) + "x" + std::to_string(options.width) + ", " +
                            std::to_string(channels) + (channels == 1 ? " channel" : " channels"));
  h5::write_attr_floats(writer.x(), "mean", mean);
  h5::write_attr_floats(writer.x(), "std", sd);
  writer.commit();
  summary.images = n;
  return summary;
}

}  // namespace mgt::data
