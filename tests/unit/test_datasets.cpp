// The datasets module: IDX/CSV converters, file validation and the sharded prefetching reader,
// all on real HDF5 files in a temporary directory.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <hdf5.h>
#include <sys/mman.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <numeric>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "datasets/convert.hpp"
#include "datasets/crc32.hpp"
#include "datasets/data_files.hpp"
#include "datasets/hdf5_format.hpp"
#include "datasets/hdf5_util.hpp"
#include "datasets/mapped_copy.hpp"
#include "datasets/sharded_reader.hpp"
#include "datasets/token_corpus.hpp"
#include "mgtrain/error.hpp"
#include "mgtrain/rng.hpp"

using namespace mgt;
using namespace mgt::data;
namespace fs = std::filesystem;

namespace {

class TempDir {
 public:
  TempDir() {
    const auto* t = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = fs::temp_directory_path() /
            ("mgt_data_" + std::string(t->test_suite_name()) + "_" + t->name() + "_" + std::to_string(::getpid()));
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  fs::path path_;
};

// A valid gzip member with stored (uncompressed) deflate blocks, so the test needs no zlib of its
// own; the real, compressed case is the Fashion-MNIST test.
std::vector<uint8_t> gzip_stored(const std::vector<uint8_t>& in) {
  uint32_t table[256];
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = c & 1 ? 0xedb88320u ^ (c >> 1) : c >> 1;
    table[i] = c;
  }
  uint32_t crc = 0xffffffffu;
  for (uint8_t b : in) crc = table[(crc ^ b) & 0xff] ^ (crc >> 8);
  crc ^= 0xffffffffu;
  std::vector<uint8_t> out = {0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3};
  size_t pos = 0;
  do {
    const size_t len = std::min<size_t>(in.size() - pos, 65535);
    const bool last = pos + len == in.size();
    out.push_back(last ? 1 : 0);
    out.push_back(static_cast<uint8_t>(len));
    out.push_back(static_cast<uint8_t>(len >> 8));
    out.push_back(static_cast<uint8_t>(~len));
    out.push_back(static_cast<uint8_t>(~len >> 8));
    out.insert(out.end(), in.begin() + static_cast<std::ptrdiff_t>(pos),
               in.begin() + static_cast<std::ptrdiff_t>(pos + len));
    pos += len;
  } while (pos < in.size());
  for (uint32_t v : {crc, static_cast<uint32_t>(in.size())})
    for (int s = 0; s < 32; s += 8) out.push_back(static_cast<uint8_t>(v >> s));
  return out;
}

// Writes an IDX file: magic 0x0000 0x08 <ndims>, big-endian dims, then bytes; gzip or plain.
void write_idx(const std::string& path, uint32_t magic, const std::vector<uint32_t>& dims,
               const std::vector<uint8_t>& data, bool gz) {
  std::vector<uint8_t> bytes;
  auto be = [&](uint32_t v) {
    for (int s = 24; s >= 0; s -= 8) bytes.push_back(static_cast<uint8_t>(v >> s));
  };
  be(magic);
  for (uint32_t d : dims) be(d);
  bytes.insert(bytes.end(), data.begin(), data.end());
  if (gz) bytes = gzip_stored(bytes);
  {
    std::ofstream(path, std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  }
}

// A hand-made data file with any shapes and types, for the validation and reader tests.
struct H5Spec {
  bool with_x = true, with_y = true;
  std::vector<hsize_t> x_dims;
  hid_t x_type = H5T_NATIVE_FLOAT;  // memory type of x_data (uint8 or float) or another type
  std::vector<float> x_f;
  std::vector<uint8_t> x_u8;
  std::vector<hsize_t> y_dims;
  std::vector<int32_t> y;
  hid_t y_file_type = H5T_STD_I32LE;
  int64_t num_classes = -1;                       // attribute on the root when >= 0
  double mean = NAN, stddev = NAN;                // attributes on x when set
  std::vector<double> channel_mean, channel_std;  // array attributes on x when not empty (per channel)
  hsize_t chunk_rows = 16;
  bool contiguous = false;  // x stored in one piece instead of chunks
  bool deflate = false;
};

void write_h5(const std::string& path, const H5Spec& s) {
  std::lock_guard lock(hdf5_mutex());
  hid_t f = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  ASSERT_GE(f, 0);
  if (s.with_x) {
    hid_t sp = H5Screate_simple(static_cast<int>(s.x_dims.size()), s.x_dims.data(), nullptr);
    hid_t pl = H5Pcreate(H5P_DATASET_CREATE);
    std::vector<hsize_t> chunk = s.x_dims;
    chunk[0] = std::min(chunk[0], s.chunk_rows);
    if (!s.contiguous) H5Pset_chunk(pl, static_cast<int>(chunk.size()), chunk.data());
    if (s.deflate) H5Pset_deflate(pl, 4);
    const bool u8 = s.x_type == H5T_NATIVE_UINT8;
    const bool f32 = s.x_type == H5T_NATIVE_FLOAT;
    hid_t ftype = u8 ? H5T_STD_U8LE : f32 ? H5T_IEEE_F32LE : s.x_type;
    hid_t d = H5Dcreate2(f, "x", ftype, sp, H5P_DEFAULT, pl, H5P_DEFAULT);
    if (u8 && !s.x_u8.empty()) H5Dwrite(d, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, s.x_u8.data());
    if (f32 && !s.x_f.empty()) H5Dwrite(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, s.x_f.data());
    if (!std::isnan(s.mean)) {
      for (auto [name, v] : {std::pair{"mean", s.mean}, std::pair{"std", s.stddev}}) {
        hid_t as = H5Screate(H5S_SCALAR);
        hid_t a = H5Acreate2(d, name, H5T_IEEE_F64LE, as, H5P_DEFAULT, H5P_DEFAULT);
        H5Awrite(a, H5T_NATIVE_DOUBLE, &v);
        H5Aclose(a);
        H5Sclose(as);
      }
    }
    if (!s.channel_mean.empty()) {
      // Float32 arrays, as `data convert --image-folder` writes them.
      for (auto [name, v] : {std::pair{"mean", &s.channel_mean}, std::pair{"std", &s.channel_std}}) {
        const hsize_t count = v->size();
        hid_t as = H5Screate_simple(1, &count, nullptr);
        hid_t a = H5Acreate2(d, name, H5T_IEEE_F32LE, as, H5P_DEFAULT, H5P_DEFAULT);
        H5Awrite(a, H5T_NATIVE_DOUBLE, v->data());
        H5Aclose(a);
        H5Sclose(as);
      }
    }
    H5Dclose(d);
    H5Pclose(pl);
    H5Sclose(sp);
  }
  if (s.with_y) {
    hid_t sp = H5Screate_simple(static_cast<int>(s.y_dims.size()), s.y_dims.data(), nullptr);
    hid_t d = H5Dcreate2(f, "y", s.y_file_type, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    if (!s.y.empty()) H5Dwrite(d, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, s.y.data());
    H5Dclose(d);
    H5Sclose(sp);
  }
  if (s.num_classes >= 0) {
    hid_t as = H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate2(f, "num_classes", H5T_STD_I64LE, as, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(a, H5T_NATIVE_INT64, &s.num_classes);
    H5Aclose(a);
    H5Sclose(as);
  }
  H5Fclose(f);
}

// Rows encode their index: x[row][k] = row * 10 + k (float32, no normalisation), y = row % 7.
constexpr int64_t kNumel = 6;
H5Spec indexed_spec(int64_t n) {
  H5Spec s;
  s.x_dims = {static_cast<hsize_t>(n), 2, 3};
  for (int64_t r = 0; r < n; ++r)
    for (int64_t k = 0; k < kNumel; ++k) s.x_f.push_back(static_cast<float>(r * 10 + k));
  s.y_dims = {static_cast<hsize_t>(n)};
  for (int64_t r = 0; r < n; ++r) s.y.push_back(static_cast<int32_t>(r % 7));
  s.num_classes = 7;
  return s;
}

// Rank `rank` of 3 reading `path` in global batches of 30 (10 rows a rank), shuffled with `seed`.
ReaderOptions three_ranks(const std::string& path, int rank, uint64_t seed) {
  ReaderOptions o;
  o.path = path;
  o.global_batch = 30;
  o.world = 3;
  o.rank = rank;
  o.seed = seed;
  return o;
}

// The rows of a batch, checking every element and label against the row it encodes.
std::vector<int64_t> rows_of(const Batch& b) {
  std::vector<int64_t> rows;
  EXPECT_EQ(b.x.dim(0), b.rows);
  for (int64_t i = 0; i < b.rows; ++i) {
    const float* p = b.x.data() + i * kNumel;
    const auto row = static_cast<int64_t>(p[0]) / 10;
    for (int64_t k = 0; k < kNumel; ++k) EXPECT_EQ(p[k], static_cast<float>(row * 10 + k));
    EXPECT_EQ(b.y[i], row % 7) << "label of row " << row;
    rows.push_back(row);
  }
  return rows;
}

template <typename F>
void expect_data_error(F&& f, const std::vector<std::string>& parts) {
  try {
    f();
    ADD_FAILURE() << "expected mgt::DataError";
  } catch (const DataError& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    for (const auto& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
  }
}

std::vector<uint8_t> read_x_u8(const std::string& path, size_t n) {
  std::lock_guard lock(hdf5_mutex());
  std::vector<uint8_t> x(n);
  hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  hid_t d = H5Dopen2(f, "/x", H5P_DEFAULT);
  EXPECT_GE(H5Dread(d, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, x.data()), 0);
  H5Dclose(d);
  H5Fclose(f);
  return x;
}

template <typename T>
std::vector<T> read_all(const std::string& path, const char* name, hid_t mem_type, size_t n) {
  std::lock_guard lock(hdf5_mutex());
  std::vector<T> v(n);
  hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  hid_t d = H5Dopen2(f, name, H5P_DEFAULT);
  EXPECT_GE(H5Dread(d, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()), 0);
  H5Dclose(d);
  H5Fclose(f);
  return v;
}

}  // namespace

// ---------------------------------------------------------------- IDX

TEST(DataIdx, RoundTripsGzipAndPlain) {
  TempDir dir;
  const uint32_t n = 70, h = 3, w = 5;  // 70 rows: more than one 64-row chunk, a partial last one
  std::vector<uint8_t> pixels(n * h * w), labels(n);
  for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<uint8_t>((i * 37 + 11) % 256);
  for (uint32_t i = 0; i < n; ++i) labels[i] = static_cast<uint8_t>(i % 10);
  double sum = 0, sq = 0;
  for (uint8_t p : pixels) {
    sum += p / 255.0;
    sq += (p / 255.0) * (p / 255.0);
  }
  const double mean = sum / pixels.size(), sd = std::sqrt(sq / pixels.size() - mean * mean);

  for (const bool gz_images : {true, false}) {
    const std::string img = dir.file(gz_images ? "img.gz" : "img"), lab = dir.file(gz_images ? "lab" : "lab.gz");
    write_idx(img, 0x803, {n, h, w}, pixels, gz_images);
    write_idx(lab, 0x801, {n}, labels, !gz_images);
    const std::string out = dir.file(gz_images ? "a.h5" : "b.h5");
    std::vector<std::string> names;
    for (int c = 0; c < 10; ++c) names.push_back("class" + std::to_string(c));
    convert_idx(img, lab, out, gz_images ? names : std::vector<std::string>{});

    const DatasetInfo info = open_dataset_info(out);
    EXPECT_EQ(info.num_samples, n);
    EXPECT_EQ(info.sample_shape, (Shape{1, h, w}));
    EXPECT_EQ(info.x_type, "uint8");
    EXPECT_EQ(info.y_type, "int32");
    EXPECT_EQ(info.num_classes, 10);
    EXPECT_EQ(info.x_chunk, (Shape{64, 1, h, w}));
    ASSERT_TRUE(info.normalized_attrs);
    EXPECT_NEAR(info.mean, mean, 1e-6);
    EXPECT_NEAR(info.stddev, sd, 1e-6);
    EXPECT_EQ(info.class_names, gz_images ? names : std::vector<std::string>{});
    EXPECT_EQ(read_x_u8(out, pixels.size()), pixels);
    const auto y = read_all<int32_t>(out, "/y", H5T_NATIVE_INT32, n);
    EXPECT_EQ(std::vector<int32_t>(labels.begin(), labels.end()), y);
    const auto counts = class_counts(info);
    EXPECT_EQ(counts, std::vector<int64_t>(10, 7));

    const std::string text = inspect(out);
    EXPECT_NE(text.find("samples:       70"), std::string::npos) << text;
    EXPECT_NE(text.find("[1, 3, 5]"), std::string::npos) << text;
    EXPECT_NE(text.find("chunks [64, 1, 3, 5]"), std::string::npos) << text;
    EXPECT_NE(text.find("source"), std::string::npos) << text;
    if (gz_images) EXPECT_NE(text.find("class9"), std::string::npos) << text;
  }
}

TEST(DataIdx, BadMagicNamesTheFile) {
  TempDir dir;
  write_idx(dir.file("img"), 0x803, {2, 2, 2}, std::vector<uint8_t>(8, 1), false);
  write_idx(dir.file("lab"), 0x803, {2, 1, 1}, std::vector<uint8_t>(2, 1), true);  // images magic
  expect_data_error([&] { convert_idx(dir.file("img"), dir.file("lab"), dir.file("o.h5")); },
                    {dir.file("lab"), "magic 0x00000803", "expected 0x00000801"});
  write_idx(dir.file("lab2"), 0x801, {2}, {0, 1}, false);
  write_idx(dir.file("img2"), 0x802, {2, 4}, std::vector<uint8_t>(8, 1), false);
  expect_data_error([&] { convert_idx(dir.file("img2"), dir.file("lab2"), dir.file("o.h5")); },
                    {dir.file("img2"), "expected 0x00000803"});
  EXPECT_FALSE(fs::exists(dir.file("o.h5")));
}

TEST(DataIdx, CountMismatchAndTruncationNameTheFile) {
  TempDir dir;
  write_idx(dir.file("img"), 0x803, {3, 2, 2}, std::vector<uint8_t>(12, 1), true);
  write_idx(dir.file("lab"), 0x801, {4}, {0, 1, 2, 3}, false);
  expect_data_error([&] { convert_idx(dir.file("img"), dir.file("lab"), dir.file("o.h5")); },
                    {dir.file("img"), "3 images", "4 labels"});
  write_idx(dir.file("short"), 0x803, {4, 2, 2}, std::vector<uint8_t>(10, 1), true);  // 16 needed
  expect_data_error([&] { convert_idx(dir.file("short"), dir.file("lab"), dir.file("o.h5")); },
                    {dir.file("short"), "truncated"});
  expect_data_error([&] { convert_idx(dir.file("nope"), dir.file("lab"), dir.file("o.h5")); },
                    {dir.file("nope"), "does not exist"});
  EXPECT_FALSE(fs::exists(dir.file("o.h5")));
  // No temporary file is left behind either.
  for (const auto& e : fs::directory_iterator(dir.file("")))
    EXPECT_EQ(e.path().filename().string().find(".tmp-"), std::string::npos) << e.path();
}

// ---------------------------------------------------------------- CSV

TEST(DataCsv, RoundTripsWithAndWithoutHeader) {
  TempDir dir;
  for (const bool header : {true, false}) {
    const std::string csv = dir.file(header ? "h.csv" : "n.csv");
    std::ofstream f(csv);
    if (header) f << "p0,p1,label,p2,p3\n";
    for (int r = 0; r < 9; ++r) f << r << "," << (r * 3) % 256 << "," << r % 3 << ", 200," << 255 - r << "\r\n";
    f << "\n";
    f.close();
    const std::string out = dir.file(header ? "h.h5" : "n.h5");
    convert_csv(csv, out, 2, Shape{2, 2});
    const DatasetInfo info = open_dataset_info(out);
    EXPECT_EQ(info.num_samples, 9);
    EXPECT_EQ(info.sample_shape, (Shape{2, 2}));
    EXPECT_EQ(info.x_type, "uint8");  // all integers in [0, 255]
    EXPECT_EQ(info.num_classes, 3);
    const auto x = read_x_u8(out, 36);
    const auto y = read_all<int32_t>(out, "/y", H5T_NATIVE_INT32, 9);
    for (int r = 0; r < 9; ++r) {
      EXPECT_EQ(x[r * 4 + 0], r);
      EXPECT_EQ(x[r * 4 + 1], (r * 3) % 256);
      EXPECT_EQ(x[r * 4 + 2], 200);
      EXPECT_EQ(x[r * 4 + 3], 255 - r);
      EXPECT_EQ(y[r], r % 3);
    }
  }
}

TEST(DataCsv, FloatFeaturesLastLabelColumnAndErrors) {
  TempDir dir;
  const std::string csv = dir.file("f.csv");
  std::ofstream(csv) << "0.5,-1.25,1e3,4\n2,3,4,0\n";
  convert_csv(csv, dir.file("f.h5"), -1, Shape{3});
  const DatasetInfo info = open_dataset_info(dir.file("f.h5"));
  EXPECT_EQ(info.x_type, "float32");
  EXPECT_EQ(info.num_classes, 5);
  const auto x = read_all<float>(dir.file("f.h5"), "/x", H5T_NATIVE_FLOAT, 6);
  EXPECT_EQ(x, (std::vector<float>{0.5f, -1.25f, 1000.0f, 2, 3, 4}));

  std::ofstream(dir.file("bad.csv")) << "1,2,3,0\n1,2,0\n";
  expect_data_error([&] { convert_csv(dir.file("bad.csv"), dir.file("o.h5"), 3, Shape{3}); },
                    {dir.file("bad.csv"), "line 2", "3 columns, expected 4"});
  expect_data_error([&] { convert_csv(csv, dir.file("o.h5"), 3, Shape{2, 2}); }, {csv, "needs 4"});
  std::ofstream(dir.file("lab.csv")) << "1,2,3,0.5\n";
  expect_data_error([&] { convert_csv(dir.file("lab.csv"), dir.file("o.h5"), 3, Shape{3}); },
                    {dir.file("lab.csv"), "line 1", "label"});
  EXPECT_FALSE(fs::exists(dir.file("o.h5")));
}

// ---------------------------------------------------------------- validation

TEST(DataInfo, MissingOrNonHdf5FileNamesTheFile) {
  TempDir dir;
  expect_data_error([&] { open_dataset_info(dir.file("missing.h5")); }, {dir.file("missing.h5"), "does not exist"});
  std::ofstream(dir.file("text.h5")) << "this is not HDF5\n";
  expect_data_error([&] { open_dataset_info(dir.file("text.h5")); }, {dir.file("text.h5"), "not an HDF5 file"});
}

TEST(DataInfo, StructuralErrorsNameFileDatasetAndExpectation) {
  TempDir dir;
  const std::string f = dir.file("s.h5");
  H5Spec s = indexed_spec(10);
  s.with_x = false;
  write_h5(f, s);
  expect_data_error([&] { open_dataset_info(f); }, {f, "'/x'", "does not exist"});

  s = indexed_spec(10);
  s.with_y = false;
  write_h5(f, s);
  expect_data_error([&] { open_dataset_info(f); }, {f, "'/y'", "does not exist"});

  s = indexed_spec(10);
  s.x_dims = {60};
  write_h5(f, s);
  expect_data_error([&] { open_dataset_info(f); }, {f, "'/x' has rank 1, expected at least 2 ([N, ...])"});

  s = indexed_spec(10);
  s.y_dims = {9};
  s.y.resize(9);
  write_h5(f, s);
  expect_data_error([&] { open_dataset_info(f); }, {f, "'/y' has 9 labels, expected 10"});

  s = indexed_spec(10);
  s.y_dims = {10, 1};
  write_h5(f, s);
  expect_data_error([&] { open_dataset_info(f); }, {f, "'/y' has rank 2, expected 1"});

  s = indexed_spec(10);
  s.x_type = H5T_STD_I16LE;
  write_h5(f, s);
  expect_data_error([&] { open_dataset_info(f); }, {f, "'/x' has type int16, expected uint8 or float32"});

  s = indexed_spec(10);
  s.y_file_type = H5T_IEEE_F32LE;
  write_h5(f, s);
  expect_data_error([&] { open_dataset_info(f); }, {f, "'/y' has type float32, expected an integer type"});

  // Custom names are honoured in the messages.
  s = indexed_spec(10);
  write_h5(f, s);
  expect_data_error([&] { open_dataset_info(f, "images", "y"); }, {f, "'/images'", "does not exist"});
  EXPECT_EQ(open_dataset_info(f).num_classes, 7);
}

TEST(DataInfo, NumClassesFromLabelsWithoutAttribute) {
  TempDir dir;
  H5Spec s = indexed_spec(12);
  s.num_classes = -1;
  write_h5(dir.file("a.h5"), s);
  const DatasetInfo info = open_dataset_info(dir.file("a.h5"));
  EXPECT_EQ(info.num_classes, 7);
  EXPECT_FALSE(info.normalized_attrs);
  EXPECT_EQ(info.x_type, "float32");
}

TEST(DataInfo, ReadsUtf8StringAttributesAsH5pyWritesThem) {
  TempDir dir;
  write_h5(dir.file("a.h5"), indexed_spec(12));
  {
    std::lock_guard lock(hdf5_mutex());
    h5::Id file = h5::file(H5Fopen(dir.file("a.h5").c_str(), H5F_ACC_RDWR, H5P_DEFAULT));
    ASSERT_TRUE(file);
    h5::write_attr_utf8(file.get(), "source", "caf\xc3\xa9 scans");
    std::vector<std::string> values;
    ASSERT_TRUE(h5::read_attr_strings(file.get(), "source", values));
    ASSERT_EQ(values.size(), 1u);
    EXPECT_EQ(values[0], "caf\xc3\xa9 scans");
  }
  EXPECT_NE(inspect(dir.file("a.h5")).find("source = \"caf\xc3\xa9 scans\""), std::string::npos)
      << inspect(dir.file("a.h5"));
}

// Rows a file declares but never stored read back as the fill value (zeros): the file is refused
// when it opens, on each dataset the reader reads, naming the dataset and the chunks stored.
TEST(DataInfo, DeclaredButUnwrittenRowsAreRefusedOnEveryDataset) {
  TempDir dir;
  const std::string f = dir.file("partial.h5");
  // x declares 1000 rows in chunks of 16 and stores the first 32; y stores all 1000 labels.
  H5Spec s = indexed_spec(1000);
  s.with_x = false;
  write_h5(f, s);
  {
    std::lock_guard lock(hdf5_mutex());
    h5::Id file = h5::file(H5Fopen(f.c_str(), H5F_ACC_RDWR, H5P_DEFAULT));
    ASSERT_TRUE(file);
    const hsize_t dims[3] = {1000, 2, 3}, chunk[3] = {16, 2, 3}, written[3] = {32, 2, 3};
    h5::Id space = h5::space(H5Screate_simple(3, dims, nullptr));
    h5::Id dcpl = h5::plist(H5Pcreate(H5P_DATASET_CREATE));
    H5Pset_chunk(dcpl.get(), 3, chunk);
    h5::Id x =
        h5::dataset(H5Dcreate2(file.get(), "x", H5T_IEEE_F32LE, space.get(), H5P_DEFAULT, dcpl.get(), H5P_DEFAULT));
    ASSERT_TRUE(x);
    const hsize_t start[3] = {0, 0, 0};
    h5::Id memory = h5::space(H5Screate_simple(3, written, nullptr));
    ASSERT_GE(H5Sselect_hyperslab(space.get(), H5S_SELECT_SET, start, nullptr, written, nullptr), 0);
    ASSERT_GE(H5Dwrite(x.get(), H5T_NATIVE_FLOAT, memory.get(), space.get(), H5P_DEFAULT, s.x_f.data()), 0);
  }
  expect_data_error([&] { open_dataset_info(f); }, {f, "'/x'", "1000 rows", "stores 2 of its 63 chunks"});
  ReaderOptions o;
  o.path = f;
  o.global_batch = 16;
  expect_data_error([&] { ShardedReader reader(o); }, {f, "'/x'", "stores 2 of its 63 chunks"});

  // The same on y, with num_classes given (so the labels are not scanned for it) and y contiguous.
  s = indexed_spec(40);
  s.y.clear();  // created, never written
  write_h5(f, s);
  expect_data_error([&] { open_dataset_info(f); }, {f, "'/y'", "no stored data"});

  // x contiguous and never written.
  s = indexed_spec(40);
  s.with_x = false;
  write_h5(f, s);
  {
    std::lock_guard lock(hdf5_mutex());
    h5::Id file = h5::file(H5Fopen(f.c_str(), H5F_ACC_RDWR, H5P_DEFAULT));
    const hsize_t dims[3] = {40, 2, 3};
    h5::Id space = h5::space(H5Screate_simple(3, dims, nullptr));
    h5::Id x =
        h5::dataset(H5Dcreate2(file.get(), "x", H5T_IEEE_F32LE, space.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
    ASSERT_TRUE(x);
  }
  expect_data_error([&] { open_dataset_info(f); }, {f, "'/x'", "no stored data"});
}

// ---------------------------------------------------------------- reader

TEST(DataReader, ValidatesBatchAndWorld) {
  TempDir dir;
  write_h5(dir.file("f.h5"), indexed_spec(50));
  ReaderOptions o;
  o.path = dir.file("f.h5");
  o.global_batch = 100;
  o.world = 3;
  try {
    ShardedReader r(o);
    ADD_FAILURE() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(), "train.global_batch = 100 is not divisible by the world size 3");
  }
  o.global_batch = 128;
  o.world = 1;
  expect_data_error([&] { ShardedReader r(o); },
                    {"data file '" + o.path + "' has 50 samples, fewer than one global batch of 128"});
  o.path = dir.file("missing.h5");
  expect_data_error([&] { ShardedReader r(o); }, {o.path, "does not exist"});
}

TEST(DataReader, BatchesFollowThePermutationAndShardByRank) {
  TempDir dir;
  const int64_t n = 103, B = 12;
  write_h5(dir.file("f.h5"), indexed_spec(n));
  ReaderOptions o;
  o.path = dir.file("f.h5");
  o.global_batch = B;
  o.seed = 5;

  ShardedReader one(o);
  EXPECT_EQ(one.batches_per_epoch(), 8);
  EXPECT_EQ(one.local_batch(), 12);
  EXPECT_EQ(one.info().sample_shape, (Shape{2, 3}));
  one.start(0, 0);
  std::vector<std::vector<int64_t>> reference;
  for (int64_t e = 0; e < 3; ++e) {
    const auto perm = rng::epoch_permutation(5, e, n);
    std::set<int64_t> seen;
    for (int64_t b = 0; b < 8; ++b) {
      Batch batch = one.next();
      EXPECT_EQ(batch.epoch, e);
      EXPECT_EQ(batch.batch_in_epoch, b);
      EXPECT_EQ(batch.first_sample, 0);
      EXPECT_GE(batch.wait_seconds, 0.0);
      EXPECT_EQ(batch.x.shape(), (Shape{12, 2, 3}));
      const auto rows = rows_of(batch);
      EXPECT_EQ(rows, std::vector<int64_t>(perm.begin() + b * B, perm.begin() + (b + 1) * B));
      seen.insert(rows.begin(), rows.end());
      reference.push_back(rows);
    }
    EXPECT_EQ(seen.size(), 96u);  // no row twice within an epoch
  }

  for (const int world : {2, 4}) {
    std::vector<std::unique_ptr<ShardedReader>> ranks;
    for (int r = 0; r < world; ++r) {
      ReaderOptions ro = o;
      ro.rank = r;
      ro.world = world;
      ro.prefetch_depth = 1 + r;  // any depth gives the same stream
      ranks.push_back(std::make_unique<ShardedReader>(ro));
      EXPECT_EQ(ranks.back()->local_batch(), B / world);
      ranks.back()->start(0, 0);  // all threads read concurrently (under hdf5_mutex)
    }
    for (const auto& expected : reference) {
      std::vector<int64_t> joined;
      for (int r = 0; r < world; ++r) {
        Batch b = ranks[static_cast<size_t>(r)]->next();
        EXPECT_EQ(b.rows, B / world);
        EXPECT_EQ(b.first_sample, r * B / world);
        const auto rows = rows_of(b);
        joined.insert(joined.end(), rows.begin(), rows.end());
      }
      EXPECT_EQ(joined, expected) << "world " << world;
    }
  }
}

TEST(DataReader, SameSeedSameStreamOtherEpochOtherOrder) {
  TempDir dir;
  write_h5(dir.file("f.h5"), indexed_spec(64));
  ReaderOptions o;
  o.path = dir.file("f.h5");
  o.global_batch = 16;
  o.seed = 9;
  ShardedReader a(o), b(o);
  a.start(0, 0);
  b.start(0, 0);
  std::vector<std::vector<int64_t>> seq;
  for (int i = 0; i < 8; ++i) {
    const auto ra = rows_of(a.next());
    EXPECT_EQ(ra, rows_of(b.next()));
    seq.push_back(ra);
  }
  EXPECT_NE(seq[0], seq[4]);  // epoch 1 batch 0 differs from epoch 0 batch 0
  ReaderOptions other = o;
  other.seed = 10;
  ShardedReader c(other);
  c.start(0, 0);
  EXPECT_NE(rows_of(c.next()), seq[0]);

  // Without shuffle the stream is the file order, every epoch.
  o.shuffle = false;
  ShardedReader plain(o);
  for (int i = 0; i < 6; ++i) {
    std::vector<int64_t> want(16);
    std::iota(want.begin(), want.end(), (i % 4) * 16);
    EXPECT_EQ(rows_of(plain.next()), want);  // next() without start() starts at (0, 0)
  }
}

TEST(DataReader, StartMidStreamMatchesReadingFromTheBeginning) {
  TempDir dir;
  write_h5(dir.file("f.h5"), indexed_spec(100));
  ReaderOptions o;
  o.path = dir.file("f.h5");
  o.global_batch = 20;
  o.world = 2;
  o.rank = 1;
  o.seed = 3;
  ShardedReader full(o);
  full.start(0, 0);
  std::vector<std::vector<int64_t>> seq;
  for (int i = 0; i < 13; ++i) seq.push_back(rows_of(full.next()));
  ShardedReader resumed(o);
  resumed.start(1, 2);  // 5 batches per epoch: position 7
  for (int i = 7; i < 13; ++i) {
    Batch b = resumed.next();
    EXPECT_EQ(b.epoch, i / 5);
    EXPECT_EQ(b.batch_in_epoch, i % 5);
    EXPECT_EQ(rows_of(b), seq[static_cast<size_t>(i)]);
  }
  // Restarting the same reader, including at "end of epoch" == start of the next.
  full.start(1, 5);
  EXPECT_EQ(rows_of(full.next()), seq[10]);
  full.start(0, 1);
  EXPECT_EQ(rows_of(full.next()), seq[1]);
  expect_data_error([&] { full.start(0, 6); }, {o.path, "batch 6"});
}

TEST(DataReader, LastPartialBatchWithoutDropLast) {
  TempDir dir;
  const int64_t n = 103;
  write_h5(dir.file("f.h5"), indexed_spec(n));
  ReaderOptions o;
  o.path = dir.file("f.h5");
  o.global_batch = 12;
  o.drop_last = false;
  o.shuffle = false;
  o.world = 4;
  const int64_t expected_rows[4] = {3, 3, 1, 0};  // 7 rows in batch 8: slices [0,3) [3,6) [6,7) []
  for (int r = 0; r < 4; ++r) {
    o.rank = r;
    ShardedReader reader(o);
    EXPECT_EQ(reader.batches_per_epoch(), 9);
    reader.start(0, 8);
    Batch b = reader.next();
    EXPECT_EQ(b.batch_in_epoch, 8);
    EXPECT_EQ(b.rows, expected_rows[r]);
    EXPECT_EQ(b.x.dim(0), expected_rows[r]);
    const auto rows = rows_of(b);
    for (size_t i = 0; i < rows.size(); ++i) EXPECT_EQ(rows[i], 96 + r * 3 + static_cast<int64_t>(i));
    Batch next = reader.next();  // then epoch 1 starts again
    EXPECT_EQ(next.epoch, 1);
    EXPECT_EQ(next.rows, 3);
  }
  // Fewer samples than one batch is fine for evaluation.
  o.world = 1;
  o.rank = 0;
  o.global_batch = 128;
  ShardedReader eval(o);
  EXPECT_EQ(eval.batches_per_epoch(), 1);
  EXPECT_EQ(eval.next().rows, n);
}

TEST(DataReader, NormalisesUint8WithMeanAndStd) {
  TempDir dir;
  H5Spec s;
  const int64_t n = 40;
  s.x_type = H5T_NATIVE_UINT8;
  s.x_dims = {static_cast<hsize_t>(n), 1, 2, 2};
  for (int64_t r = 0; r < n; ++r)
    for (int k = 0; k < 4; ++k) s.x_u8.push_back(static_cast<uint8_t>(r * 6 + k));
  s.y_dims = {static_cast<hsize_t>(n)};
  for (int64_t r = 0; r < n; ++r) s.y.push_back(static_cast<int32_t>(r % 4));
  s.mean = 0.25;
  s.stddev = 0.5;
  write_h5(dir.file("u.h5"), s);
  ReaderOptions o;
  o.path = dir.file("u.h5");
  o.global_batch = 8;
  o.seed = 1;
  ShardedReader reader(o);
  EXPECT_EQ(reader.info().num_classes, 4);
  for (int i = 0; i < 10; ++i) {
    Batch b = reader.next();
    for (int64_t j = 0; j < b.rows; ++j) {
      const float* p = b.x.data() + j * 4;
      // Invert the normalisation of the first pixel to find the row, then check all four.
      const auto v0 = static_cast<int>(std::lround((p[0] * 0.5f + 0.25f) * 255.0f));
      const int row = v0 / 6;
      for (int k = 0; k < 4; ++k) EXPECT_FLOAT_EQ(p[k], (static_cast<float>(row * 6 + k) / 255.0f - 0.25f) / 0.5f);
      EXPECT_EQ(b.y[j], row % 4);
    }
  }
}

// ---------------------------------------------------------------- per-channel normalisation

// A 3-channel uint8 file [n, 3, 2, 2]: x[row][c][k] = row * 12 + c * 4 + k, y = row % 5.
H5Spec colour_spec(int64_t n) {
  H5Spec s;
  s.x_type = H5T_NATIVE_UINT8;
  s.x_dims = {static_cast<hsize_t>(n), 3, 2, 2};
  for (int64_t r = 0; r < n; ++r)
    for (int k = 0; k < 12; ++k) s.x_u8.push_back(static_cast<uint8_t>(r * 12 + k));
  s.y_dims = {static_cast<hsize_t>(n)};
  for (int64_t r = 0; r < n; ++r) s.y.push_back(static_cast<int32_t>(r % 5));
  s.channel_mean = {0.1, 0.2, 0.3};
  s.channel_std = {0.5, 0.25, 0.125};
  return s;
}

TEST(DataReader, NormalisesEachChannelWithItsOwnMeanAndStd) {
  TempDir dir;
  const int64_t n = 20;
  const std::vector<float> mean{0.1f, 0.2f, 0.3f}, sd{0.5f, 0.25f, 0.125f};
  write_h5(dir.file("rgb.h5"), colour_spec(n));
  const DatasetInfo info = open_dataset_info(dir.file("rgb.h5"));
  ASSERT_TRUE(info.normalized_attrs);
  EXPECT_EQ(info.channel_mean, mean);
  EXPECT_EQ(info.channel_std, sd);
  EXPECT_NE(
      inspect(dir.file("rgb.h5")).find("normalisation: per channel, mean [0.1, 0.2, 0.3], std [0.5, 0.25, 0.125]"),
      std::string::npos)
      << inspect(dir.file("rgb.h5"));

  ReaderOptions o;
  o.path = dir.file("rgb.h5");
  o.global_batch = 4;
  o.seed = 2;
  ShardedReader reader(o);
  std::set<int> rows;
  for (int i = 0; i < 5; ++i) {
    Batch b = reader.next();
    ASSERT_EQ(b.x.shape(), (Shape{4, 3, 2, 2}));
    for (int64_t j = 0; j < b.rows; ++j) {
      const float* p = b.x.data() + j * 12;
      const int row = static_cast<int>(std::lround((p[0] * sd[0] + mean[0]) * 255.0f)) / 12;
      rows.insert(row);
      EXPECT_EQ(b.y[j], row % 5);
      for (int c = 0; c < 3; ++c)
        for (int k = 0; k < 4; ++k)
          EXPECT_FLOAT_EQ(p[c * 4 + k], (static_cast<float>(row * 12 + c * 4 + k) / 255.0f - mean[c]) / sd[c])
              << "row " << row << " channel " << c;
    }
  }
  EXPECT_EQ(rows.size(), 20u);

  // The same statistics on a float32 file (its values taken as they are).
  H5Spec f = colour_spec(n);
  f.x_type = H5T_NATIVE_FLOAT;
  for (uint8_t v : f.x_u8) f.x_f.push_back(static_cast<float>(v));
  f.x_u8.clear();
  write_h5(dir.file("rgb_f.h5"), f);
  o.path = dir.file("rgb_f.h5");
  o.shuffle = false;
  ShardedReader floats(o);
  Batch b = floats.next();
  for (int64_t j = 0; j < b.rows; ++j)
    for (int c = 0; c < 3; ++c)
      for (int k = 0; k < 4; ++k)
        EXPECT_FLOAT_EQ(b.x.data()[j * 12 + c * 4 + k],
                        (static_cast<float>(j * 12 + c * 4 + k) - mean[c]) * (1.0f / sd[c]));

  // A scalar std beside a per-channel mean applies to every channel.
  H5Spec mixed = colour_spec(n);
  mixed.channel_std = {0.5};
  write_h5(dir.file("mixed.h5"), mixed);
  EXPECT_EQ(open_dataset_info(dir.file("mixed.h5")).channel_std, (std::vector<float>{0.5f, 0.5f, 0.5f}));
}

TEST(DataFormat, PerChannelStatisticsMustMatchTheChannels) {
  TempDir dir;
  H5Spec s = colour_spec(10);
  s.channel_mean = {0.1, 0.2};
  write_h5(dir.file("two.h5"), s);
  expect_data_error(
      [&] { open_dataset_info(dir.file("two.h5")); },
      {dir.file("two.h5"), "attribute 'mean' has 2 values, expected 1 or 3 (one per channel of samples [3, 2, 2])"});
  s = colour_spec(10);
  s.channel_std = {0.5, 0.0, 0.5};
  write_h5(dir.file("zero.h5"), s);
  expect_data_error(
      [&] { open_dataset_info(dir.file("zero.h5")); },
      {dir.file("zero.h5"), "attribute 'std' of '/x' (channel 1) is 0, expected a number from 1.17549e-38"});
}

// The reader normalises in float32: statistics it cannot hold would make every sample Inf or NaN,
// seen only as a non-finite gradient steps later. Refused at open, naming the attribute.
TEST(DataFormat, StatisticsMustFitFloat32) {
  TempDir dir;
  H5Spec s = colour_spec(10);
  s.channel_mean = {0.1, 1e300, 0.3};  // stored as float32 arrays: inf
  write_h5(dir.file("mean.h5"), s);
  expect_data_error([&] { open_dataset_info(dir.file("mean.h5")); },
                    {dir.file("mean.h5"),
                     "attribute 'mean' of '/x' (channel 1) is inf, expected a finite number "
                     "of magnitude at most 3.40282e+38 (float32)"});
  s = colour_spec(10);
  s.channel_mean.clear();
  s.channel_std.clear();
  s.mean = -4e38;
  s.stddev = 0.5;
  write_h5(dir.file("scalar.h5"), s);
  expect_data_error([&] { open_dataset_info(dir.file("scalar.h5")); },
                    {dir.file("scalar.h5"), "attribute 'mean' of '/x' is -4e+38, expected a finite number"});
  // A std whose inverse float32 cannot hold, and a negative one.
  for (const double sd : {1e-40, -0.5, 1e39}) {
    s.mean = 0.5;
    s.stddev = sd;
    write_h5(dir.file("std.h5"), s);
    char text[64];
    std::snprintf(text, sizeof text, "attribute 'std' of '/x' is %g, expected a number from", sd);
    expect_data_error([&] { open_dataset_info(dir.file("std.h5")); }, {dir.file("std.h5"), text});
  }
}

// ---------------------------------------------------------------- augmentation

TEST(DataAugment, ParsesTheListAndNamesABadEntry) {
  EXPECT_FALSE(parse_augmentation("").any());
  EXPECT_FALSE(parse_augmentation("  ").any());
  Augmentation a = parse_augmentation("crop:4,flip");
  EXPECT_EQ(a.crop_padding, 4);
  EXPECT_TRUE(a.flip);
  a = parse_augmentation(" flip , crop: 2 ");
  EXPECT_EQ(a.crop_padding, 2);
  EXPECT_TRUE(a.flip);
  a = parse_augmentation("crop:1");
  EXPECT_FALSE(a.flip);
  for (const auto& [spec, entry, why] : std::vector<std::tuple<std::string, std::string, std::string>>{
           {"crop:x,flip", "crop:x", "has padding 'x'"},
           {"crop:0", "crop:0", "has padding '0'"},
           {"crop:1025", "crop:1025", "has padding '1025'"},
           {"crop", "crop", "has no padding"},
           {"flip:1", "flip:1", "gives flip an argument"},
           {"flip,rotate:5", "rotate:5", "is not an augmentation"},
           {"crop:4,,flip", "", "is empty"},
           {"flip,flip", "flip", "repeats flip"},
           {"crop:4,crop:2", "crop:2", "repeats crop"}}) {
    try {
      parse_augmentation(spec);
      ADD_FAILURE() << "expected ConfigError for '" << spec << "'";
    } catch (const ConfigError& e) {
      const std::string msg = e.what();
      EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
      EXPECT_NE(msg.find("entry '" + entry + "' of '" + spec + "' " + why), std::string::npos) << msg;
      EXPECT_NE(msg.find("expected a comma-separated list of crop:P"), std::string::npos) << msg;
    }
  }
}

// Rows [n, 2, 3, 4] float32 encode their index: x[row][k] = row * 100 + k + 1 (never 0, the pad).
constexpr int64_t kImageNumel = 24;
H5Spec image_spec(int64_t n) {
  H5Spec s;
  s.x_dims = {static_cast<hsize_t>(n), 2, 3, 4};
  for (int64_t r = 0; r < n; ++r)
    for (int64_t k = 0; k < kImageNumel; ++k) s.x_f.push_back(static_cast<float>(r * 100 + k + 1));
  s.y_dims = {static_cast<hsize_t>(n)};
  for (int64_t r = 0; r < n; ++r) s.y.push_back(static_cast<int32_t>(r % 7));
  s.num_classes = 7;
  return s;
}

// The row a sample came from (its label checked), from any value that is not padding.
int64_t image_row(const float* p, int32_t label) {
  for (int64_t k = 0; k < kImageNumel; ++k)
    if (p[k] != 0.0f) {
      const auto row = static_cast<int64_t>(p[k] - 1) / 100;
      EXPECT_EQ(label, row % 7);
      return row;
    }
  ADD_FAILURE() << "a sample of padding only";
  return -1;
}

// Every augmented sample of `batches` batches, by (epoch, row).
std::map<std::pair<int64_t, int64_t>, std::vector<float>> augmented_samples(ReaderOptions o, int world, int batches) {
  std::map<std::pair<int64_t, int64_t>, std::vector<float>> out;
  std::vector<std::unique_ptr<ShardedReader>> ranks;
  for (int r = 0; r < world; ++r) {
    o.rank = r;
    o.world = world;
    ranks.push_back(std::make_unique<ShardedReader>(o));
  }
  for (int i = 0; i < batches; ++i)
    for (auto& reader : ranks) {
      Batch b = reader->next();
      for (int64_t j = 0; j < b.rows; ++j) {
        const float* p = b.x.data() + j * kImageNumel;
        out[{b.epoch, image_row(p, b.y[j])}].assign(p, p + kImageNumel);
      }
    }
  return out;
}

TEST(DataAugment, ASampleDependsOnlyOnSeedEpochAndRow) {
  TempDir dir;
  const int64_t n = 48;
  write_h5(dir.file("img.h5"), image_spec(n));
  ReaderOptions o;
  o.path = dir.file("img.h5");
  o.seed = 11;
  o.augment = parse_augmentation("crop:1,flip");
  o.global_batch = 12;
  const auto reference = augmented_samples(o, 1, 8);  // epochs 0 and 1
  ASSERT_EQ(reference.size(), 96u);
  // Another rank split, another batch size and the in-memory path: the same sample, the same bits.
  EXPECT_EQ(augmented_samples(o, 4, 8), reference);
  o.global_batch = 8;
  EXPECT_EQ(augmented_samples(o, 2, 12), reference);
  o.in_memory = true;
  EXPECT_EQ(augmented_samples(o, 1, 12), reference);
  // A reader started mid-stream (a resume) draws the same as one that read up to there.
  o.in_memory = false;
  ShardedReader resumed(o);
  resumed.start(1, 3);
  Batch b = resumed.next();
  for (int64_t j = 0; j < b.rows; ++j) {
    const float* p = b.x.data() + j * kImageNumel;
    EXPECT_EQ(std::vector<float>(p, p + kImageNumel), reference.at({1, image_row(p, b.y[j])}));
  }
  // It is random: not every sample is the identity, and epochs draw anew.
  int unchanged = 0, same_in_both_epochs = 0;
  for (int64_t row = 0; row < n; ++row) {
    std::vector<float> original(kImageNumel);
    std::iota(original.begin(), original.end(), static_cast<float>(row * 100 + 1));
    unchanged += reference.at({0, row}) == original;
    same_in_both_epochs += reference.at({0, row}) == reference.at({1, row});
  }
  EXPECT_LT(unchanged, 12);  // 1 in 18 draws is the identity
  EXPECT_LT(same_in_both_epochs, 12);
  // Another seed, other draws of the same samples.
  o.seed = 12;
  o.global_batch = 12;
  const auto other = augmented_samples(o, 1, 4);
  int same_under_other_seed = 0;
  for (const auto& [key, sample] : other) same_under_other_seed += reference.at(key) == sample;
  EXPECT_LT(same_under_other_seed, 12);
}

TEST(DataAugment, CropPadsWithWhatZeroNormalisesToAndFlipMirrorsTheWidth) {
  TempDir dir;
  // One 1x3x3 uint8 image, 10..90, normalised with mean 0.5 and std 0.25: the padding is 0 in the
  // raw image, so (0 - 0.5) / 0.25 = -2 after normalisation.
  H5Spec s;
  s.x_type = H5T_NATIVE_UINT8;
  s.x_dims = {1, 1, 3, 3};
  s.x_u8 = {10, 20, 30, 40, 50, 60, 70, 80, 90};
  s.y_dims = {1};
  s.y = {0};
  s.mean = 0.5;
  s.stddev = 0.25;
  write_h5(dir.file("one.h5"), s);
  ReaderOptions o;
  o.path = dir.file("one.h5");
  o.global_batch = 1;
  o.seed = 3;
  o.augment = parse_augmentation("crop:1,flip");
  auto norm = [](int v) { return (static_cast<float>(v) / 255.0f - 0.5f) / 0.25f; };
  const int pad = 0;  // the raw value of padding
  // Expected raw images for some draws (offset_y, offset_x, flip), the padded image being
  //   0  0  0  0  0
  //   0 10 20 30  0
  //   0 40 50 60  0
  //   0 70 80 90  0
  //   0  0  0  0  0
  const std::map<std::tuple<int64_t, int64_t, bool>, std::vector<int>> known = {
      {{1, 1, false}, {10, 20, 30, 40, 50, 60, 70, 80, 90}},
      {{0, 0, false}, {pad, pad, pad, pad, 10, 20, pad, 40, 50}},
      {{2, 2, false}, {50, 60, pad, 80, 90, pad, pad, pad, pad}},
      {{1, 1, true}, {30, 20, 10, 60, 50, 40, 90, 80, 70}},
      {{0, 0, true}, {pad, pad, pad, 20, 10, pad, 50, 40, pad}},
      {{2, 0, true}, {50, 40, pad, 80, 70, pad, pad, pad, pad}},
  };
  ShardedReader reader(o);
  std::set<std::tuple<int64_t, int64_t, bool>> seen;
  int flips = 0;
  const int epochs = 400;
  for (int e = 0; e < epochs; ++e) {
    Batch b = reader.next();  // one sample per epoch: a new draw each time
    ASSERT_EQ(b.epoch, e);
    const AugmentDraw d = augment_draw(o.augment, o.seed, e, 0);
    ASSERT_GE(d.offset_y, 0);
    ASSERT_LE(d.offset_y, 2);
    ASSERT_GE(d.offset_x, 0);
    ASSERT_LE(d.offset_x, 2);
    flips += d.flip;
    const auto key = std::tuple{d.offset_y, d.offset_x, d.flip};
    seen.insert(key);
    const auto it = known.find(key);
    if (it == known.end()) continue;
    for (int k = 0; k < 9; ++k)
      EXPECT_FLOAT_EQ(b.x.data()[k], norm(it->second[static_cast<size_t>(k)])) << "element " << k;
  }
  EXPECT_EQ(seen.size(), 18u);  // every window and both flips occur
  EXPECT_NEAR(flips, epochs / 2, epochs / 8);

  // Per-channel padding on a colour image: each channel pads with its own normalised 0.
  H5Spec rgb = colour_spec(4);
  write_h5(dir.file("rgb.h5"), rgb);
  o.path = dir.file("rgb.h5");
  o.global_batch = 4;
  o.augment = parse_augmentation("crop:2");
  ShardedReader colour(o);
  int padded = 0;
  for (int e = 0; e < 20; ++e) {
    Batch b = colour.next();
    for (int64_t j = 0; j < b.rows; ++j)
      for (int c = 0; c < 3; ++c)
        for (int k = 0; k < 4; ++k) {
          const float v = b.x.data()[j * 12 + c * 4 + k];
          const float zero = (0.0f - static_cast<float>(rgb.channel_mean[c])) / static_cast<float>(rgb.channel_std[c]);
          padded += v == zero;
          // Either padding of this channel or a pixel of this channel (12 r + 4 c + k', k' < 4).
          const long raw = std::lround(
              (v * static_cast<float>(rgb.channel_std[c]) + static_cast<float>(rgb.channel_mean[c])) * 255.0f);
          EXPECT_TRUE(v == zero || (raw % 12) / 4 == c) << "channel " << c << " value " << v;
        }
  }
  EXPECT_GT(padded, 0);
}

TEST(DataAugment, RefusesSamplesThatAreNotImages) {
  TempDir dir;
  write_h5(dir.file("flat.h5"), indexed_spec(20));  // samples [2, 3]
  ReaderOptions o;
  o.path = dir.file("flat.h5");
  o.global_batch = 4;
  o.augment = parse_augmentation("flip");
  try {
    ShardedReader reader(o);
    ADD_FAILURE() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()), "data.augment needs samples of shape [C, H, W], but data file '" + o.path +
                                         "' has samples of shape [2, 3]");
  }
}

TEST(DataReader, ReadErrorsReachNextAsDataError) {
  TempDir dir;
  H5Spec s = indexed_spec(30);
  s.x_f[17 * kNumel] = std::numeric_limits<float>::quiet_NaN();
  write_h5(dir.file("bad.h5"), s);
  ReaderOptions o;
  o.path = dir.file("bad.h5");
  o.global_batch = 10;
  o.shuffle = false;
  ShardedReader reader(o);
  reader.start(0, 0);
  EXPECT_EQ(rows_of(reader.next()).front(), 0);
  expect_data_error([&] { reader.next(); }, {o.path, "row 17 of '/x'"});
  expect_data_error([&] { reader.next(); }, {o.path, "row 17"});  // stays failed
  reader.start(0, 2);                                             // a fresh start past the bad batch works
  EXPECT_EQ(rows_of(reader.next()).front(), 20);
}

// Every label is checked when the reader opens the file, however it reads the rows, not when its
// row comes up steps (and checkpoints) later.
TEST(DataReader, LabelsOutOfRangeAreRefusedBeforeTheFirstBatch) {
  TempDir dir;
  H5Spec s = indexed_spec(30);
  s.y[17] = 9;  // num_classes is 7
  write_h5(dir.file("bad.h5"), s);
  for (const ReadMode mode : {ReadMode::Direct, ReadMode::Runs})
    for (const bool in_memory : {false, true}) {
      ReaderOptions o;
      o.path = dir.file("bad.h5");
      o.global_batch = 10;
      o.read_mode = mode;
      o.in_memory = in_memory;
      expect_data_error([&] { ShardedReader reader(o); },
                        {o.path, "dataset '/y' row 17 has label 9, expected 0 <= label < 7 (num_classes)"});
    }
}

// NaN or Inf in float32 samples stops the reader at the row that holds it, naming the file, the
// row and the element, before the model turns it into a non-finite gradient.
TEST(DataReader, NonFiniteFloatSamplesReachNextAsDataErrorWithTheRow) {
  TempDir dir;
  for (const float bad : {std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::infinity()}) {
    const std::string f = dir.file("nonfinite.h5");
    H5Spec s = indexed_spec(30);
    s.x_f[17 * kNumel + 4] = bad;
    write_h5(f, s);
    for (const bool in_memory : {false, true}) {
      ReaderOptions o;
      o.path = f;
      o.global_batch = 10;
      o.shuffle = false;
      o.in_memory = in_memory;
      ShardedReader reader(o);
      EXPECT_EQ(rows_of(reader.next()).front(), 0);
      expect_data_error([&] { reader.next(); },
                        {f, "row 17 of '/x'", "element 4", std::isnan(bad) ? "NaN" : "-inf", "epoch 0, batch 1"});
    }
  }
}

TEST(DataReader, CorruptChunkReachesNextAsDataErrorWithRows) {
  TempDir dir;
  const std::string f = dir.file("corrupt.h5");
  H5Spec s = indexed_spec(64);  // four deflated chunks of 16 rows
  s.deflate = true;
  write_h5(f, s);
  haddr_t addr = 0;
  hsize_t size = 0;
  {
    std::lock_guard lock(hdf5_mutex());
    hid_t file = H5Fopen(f.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    hid_t d = H5Dopen2(file, "/x", H5P_DEFAULT);
    hid_t sp = H5Dget_space(d);
    hsize_t offset[3];
    unsigned mask = 0;
    ASSERT_GE(H5Dget_chunk_info(d, sp, 1, offset, &mask, &addr, &size), 0);  // rows 16..31
    ASSERT_EQ(offset[0], 16u);
    H5Sclose(sp);
    H5Dclose(d);
    H5Fclose(file);
  }
  {
    std::fstream io(f, std::ios::in | std::ios::out | std::ios::binary);
    io.seekp(static_cast<std::streamoff>(addr));
    const std::string junk(size, '\x5a');
    io.write(junk.data(), static_cast<std::streamsize>(junk.size()));
  }
  ReaderOptions o;
  o.path = f;
  o.global_batch = 16;
  o.shuffle = false;
  ShardedReader reader(o);
  EXPECT_EQ(rows_of(reader.next()).front(), 0);
  expect_data_error([&] { reader.next(); }, {f, "reading rows 16..31 of dataset '/x' failed", "epoch 0, batch 1"});
}

TEST(DataReader, UnionSelectionGivesTheSameBatches) {
  TempDir dir;
  write_h5(dir.file("f.h5"), indexed_spec(90));
  ReaderOptions o = three_ranks(dir.file("f.h5"), 2, 11);
  o.read_mode = ReadMode::Runs;
  ShardedReader runs(o);
  o.read_mode = ReadMode::Union;
  ShardedReader uni(o);
  for (int i = 0; i < 7; ++i) EXPECT_EQ(rows_of(runs.next()), rows_of(uni.next()));
}

// Rows read straight from the file (the default) are the rows HDF5 reads, chunked (the last chunk
// short of rows) or contiguous, float32 or uint8; a deflated file goes through HDF5.
TEST(DataReader, DirectReadsGiveTheSameBatches) {
  TempDir dir;
  for (const bool contiguous : {false, true}) {
    for (const bool u8 : {false, true}) {
      H5Spec s = indexed_spec(90);
      s.contiguous = contiguous;
      if (u8) {
        s.x_type = H5T_NATIVE_UINT8;
        for (float v : s.x_f) s.x_u8.push_back(static_cast<uint8_t>(static_cast<int>(v) % 251));
        s.x_f.clear();
      }
      const std::string f = dir.file(std::string(contiguous ? "contiguous" : "chunked") + (u8 ? "_u8" : "") + ".h5");
      write_h5(f, s);
      ReaderOptions o = three_ranks(f, 1, 9);
      ShardedReader direct(o);
      o.read_mode = ReadMode::Runs;
      ShardedReader through_hdf5(o);
      EXPECT_TRUE(direct.reads_directly()) << f;
      EXPECT_FALSE(through_hdf5.reads_directly()) << f;
      for (int i = 0; i < 7; ++i) {
        Batch a = direct.next(), b = through_hdf5.next();
        ASSERT_EQ(a.rows, b.rows) << f;
        EXPECT_EQ(std::vector<int32_t>(a.y, a.y + a.rows), std::vector<int32_t>(b.y, b.y + b.rows)) << f;
        EXPECT_EQ(std::vector<float>(a.x.data(), a.x.data() + a.x.numel()),
                  std::vector<float>(b.x.data(), b.x.data() + b.x.numel()))
            << f << " batch " << i;
      }
    }
  }
  H5Spec s = indexed_spec(90);
  s.deflate = true;
  write_h5(dir.file("deflated.h5"), s);
  ReaderOptions o;
  o.path = dir.file("deflated.h5");
  o.global_batch = 30;
  EXPECT_FALSE(ShardedReader(o).reads_directly());
}

// The rows' and checkpoints' CRC-32 is zlib's, whatever the length, alignment or running value: the
// files written before kept their checksums, and other tools check them with zlib.
TEST(RowChecksum, Crc32IsZlibs) {
  std::vector<unsigned char> bytes(4200);
  uint32_t state = 12345;
  for (unsigned char& b : bytes) b = static_cast<unsigned char>((state = state * 1103515245u + 12345u) >> 24);
  for (size_t length = 0; length <= 2100; ++length)
    for (size_t offset : {size_t{0}, size_t{1}, size_t{7}, size_t{64} + 3})
      for (uint32_t seed : {0u, 0xdeadbeefu}) {
        const unsigned char* at = bytes.data() + offset;
        ASSERT_EQ(mgt::crc32_update(seed, at, length),
                  static_cast<uint32_t>(crc32(seed, at, static_cast<uInt>(length))))
            << "length " << length << ", offset " << offset << ", seed " << seed;
      }
  EXPECT_EQ(mgt::crc32_update(0, "123456789", 9), 0xCBF43926u);  // the check value of CRC-32
}

// The rows are read through a mapping of the file: a file cut short under a running reader (rewritten
// in place) is an error naming it, not a SIGBUS from a page past its end.
TEST(DataReader, DirectReadsNameAFileCutShortUnderThem) {
  TempDir dir;
  const std::string f = dir.file("cut.h5");
  H5Spec s = indexed_spec(90);
  s.contiguous = true;
  write_h5(f, s);
  ReaderOptions o;
  o.path = f;
  o.global_batch = 10;
  ShardedReader reader(o);  // maps the file; reads nothing before the first batch
  ASSERT_TRUE(reader.reads_directly());
  haddr_t x_at = HADDR_UNDEF;
  {
    std::lock_guard lock(hdf5_mutex());
    h5::Id file = h5::file(H5Fopen(f.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT));
    ASSERT_TRUE(file);
    h5::Id x = h5::dataset(H5Dopen2(file.get(), "/x", H5P_DEFAULT));
    ASSERT_TRUE(x);
    x_at = H5Dget_offset(x.get());
  }
  ASSERT_NE(x_at, HADDR_UNDEF);
  const auto bytes = std::filesystem::file_size(f);
  const auto cut = static_cast<uintmax_t>(x_at) + kNumel * sizeof(float);  // row 0 is all that is left
  ASSERT_EQ(truncate(f.c_str(), static_cast<off_t>(cut)), 0);
  expect_data_error([&] { reader.next(); },
                    {f, "is now " + std::to_string(cut) + " bytes, was " + std::to_string(bytes), "epoch 0, batch 0",
                     "rewritten while training"});
}

// A page of a mapping past the file's end, once the file is cut short, is a failed copy on any
// thread, not a SIGBUS; the pages the file still has copy as before.
TEST(MappedCopy, PagesPastACutFileFailInsteadOfSigbus) {
  TempDir dir;
  const std::string f = dir.file("mapped.bin");
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  std::ofstream(f, std::ios::binary) << std::string(4 * page, 'm');
  const int fd = open(f.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  prepare_mapped_copies();
  void* at = mmap(nullptr, 4 * page, PROT_READ, MAP_SHARED, fd, 0);
  ASSERT_NE(at, MAP_FAILED);
  const auto* mapping = static_cast<const unsigned char*>(at);
  std::vector<unsigned char> to(2 * page);
  ASSERT_TRUE(copy_from_mapping(to.data(), mapping + page, 2 * page));
  ASSERT_EQ(truncate(f.c_str(), static_cast<off_t>(page + page / 2)), 0);
  for (int attempt = 0; attempt < 3; ++attempt) {
    EXPECT_FALSE(copy_from_mapping(to.data(), mapping + page, 2 * page));
    bool on_thread = true;
    std::thread([&] { on_thread = copy_from_mapping(to.data(), mapping + 3 * page, page); }).join();
    EXPECT_FALSE(on_thread);
  }
  EXPECT_TRUE(copy_from_mapping(to.data(), mapping, page));
  EXPECT_EQ(to[0], 'm');
  munmap(at, 4 * page);
  close(fd);
}

// The whole file in memory gives the batches reading rows from the file gives.
TEST(DataReader, InMemoryGivesTheSameBatches) {
  TempDir dir;
  write_h5(dir.file("f.h5"), indexed_spec(90));
  ReaderOptions o = three_ranks(dir.file("f.h5"), 1, 5);
  ShardedReader from_file(o);
  o.in_memory = true;
  ShardedReader from_memory(o);
  for (int i = 0; i < 7; ++i) {
    Batch a = from_file.next(), b = from_memory.next();
    EXPECT_EQ(rows_of(a), rows_of(b));
    EXPECT_EQ(std::vector<float>(a.x.data(), a.x.data() + a.x.numel()),
              std::vector<float>(b.x.data(), b.x.data() + b.x.numel()));
  }
}

// A reader sharing the caller's core (core/src/base/idle_core.hpp) reads only while the caller waits:
// after a batch is handed out its thread reads no further on its own, where a free-running reader
// fills the whole ring. The batches are the same, across a restart, and it stops cleanly while its
// thread waits for the core.
TEST(DataReader, SharingTheCoreReadsOnlyWhileTheCallerWaits) {
  TempDir dir;
  write_h5(dir.file("f.h5"), indexed_spec(90));
  ReaderOptions o = three_ranks(dir.file("f.h5"), 1, 5);
  o.prefetch_depth = 3;
  std::atomic<int> read_free{0}, read_shared{0};
  o.on_batch_read = [&](auto, auto, int64_t) { ++read_free; };
  ShardedReader free_running(o);
  o.share_core = true;
  o.on_batch_read = [&](auto, auto, int64_t) { ++read_shared; };
  ShardedReader sharing(o);
  for (int restart = 0; restart < 2; ++restart) {
    free_running.start(restart, 1);
    sharing.start(restart, 1);
    for (int i = 0; i < 5; ++i) {
      Batch a = free_running.next(), b = sharing.next();
      EXPECT_EQ(rows_of(a), rows_of(b));
      EXPECT_EQ(std::vector<float>(a.x.data(), a.x.data() + a.x.numel()),
                std::vector<float>(b.x.data(), b.x.data() + b.x.numel()));
    }
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  // The 10 batches handed out, no more; the free-running reader also filled its ring after each run.
  EXPECT_EQ(read_shared.load(), 10) << "the sharing reader read batches while its caller ran";
  EXPECT_GE(read_free.load(), 10 + 3);
  // A second reader sharing meanwhile cannot (one per process): it reads as without.
  ReaderOptions plain = o;
  plain.on_batch_read = nullptr;
  std::atomic<int> read_second{0};
  o.on_batch_read = [&](auto, auto, int64_t) { ++read_second; };
  ShardedReader second(o);
  EXPECT_EQ(rows_of(second.next()), rows_of(ShardedReader(plain).next()));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(read_second.load(), 4);
}

// Prefetch slots from the caller's allocator (pinned memory on a GPU): every slot comes from it and
// goes back to it, and the batches are the same as in ordinary memory.
TEST(DataReader, SlotsComeFromTheGivenAllocator) {
  TempDir dir;
  write_h5(dir.file("f.h5"), indexed_spec(90));
  ReaderOptions o = three_ranks(dir.file("f.h5"), 2, 7);
  o.prefetch_depth = 2;
  ShardedReader plain(o);
  std::vector<std::pair<char*, size_t>> given;
  size_t released = 0;
  o.allocate_slot = [&](size_t bytes) {
    given.emplace_back(static_cast<char*>(std::malloc(bytes)), bytes);
    return static_cast<void*>(given.back().first);
  };
  o.release_slot = [&](void* p) {
    ++released;
    std::free(p);
  };
  {
    ShardedReader custom(o);
    ASSERT_EQ(given.size(), 3u);  // prefetch_depth + 1 slots
    for (const auto& [p, bytes] : given) EXPECT_EQ(bytes, 10u * kNumel * sizeof(float)) << "local batch x sample size";
    for (int i = 0; i < 5; ++i) {
      Batch a = plain.next(), b = custom.next();
      EXPECT_EQ(rows_of(a), rows_of(b));
      const char* x = reinterpret_cast<const char*>(b.x.data());
      EXPECT_TRUE(std::any_of(given.begin(), given.end(), [&](const auto& g) { return x == g.first; }))
          << "batch " << i << " is not in an allocated slot";
    }
  }
  EXPECT_EQ(released, 3u);
}

// ---------------------------------------------------------------- real data

TEST(DataFashion, ConvertsTheRealTrainFile) {
  const std::string src = "/usr/share/datasets/fashion-mnist/";
  if (!fs::exists(src + "train-images-idx3-ubyte.gz")) GTEST_SKIP() << "Fashion-MNIST not installed";
  TempDir dir;
  const std::string out = dir.file("fashion-train.h5");
  convert_idx(src + "train-images-idx3-ubyte.gz", src + "train-labels-idx1-ubyte.gz", out, fashion_mnist_class_names());
  const DatasetInfo info = open_dataset_info(out);
  EXPECT_EQ(info.num_samples, 60000);
  EXPECT_EQ(info.sample_shape, (Shape{1, 28, 28}));
  EXPECT_EQ(info.num_classes, 10);
  EXPECT_EQ(info.class_names.size(), 10u);
  EXPECT_NEAR(info.mean, 0.2860, 1e-3);  // the published Fashion-MNIST statistics
  EXPECT_NEAR(info.stddev, 0.3530, 1e-3);
  EXPECT_EQ(class_counts(info), std::vector<int64_t>(10, 6000));

  ReaderOptions o;
  o.path = out;
  o.global_batch = 128;
  o.seed = 42;
  ShardedReader reader(o);
  EXPECT_EQ(reader.batches_per_epoch(), 468);
  double sum = 0;
  int64_t count = 0;
  for (int i = 0; i < 50; ++i) {
    Batch b = reader.next();
    ASSERT_EQ(b.x.shape(), (Shape{128, 1, 28, 28}));
    for (int64_t j = 0; j < b.rows; ++j) ASSERT_TRUE(b.y[j] >= 0 && b.y[j] < 10);
    for (int64_t k = 0; k < b.x.numel(); ++k) sum += b.x.data()[k];
    count += b.x.numel();
  }
  EXPECT_NEAR(sum / static_cast<double>(count), 0.0, 0.05);  // normalised to zero mean
}

// ---------------------------------------------------------------- data sets in several files

TEST(DataFiles, SpansMapAConcatenationOntoItsFiles) {
  const std::vector<int64_t> starts = {0, 5, 6, 10};  // files of 5, 1 and 4
  using Spans = std::vector<std::tuple<size_t, int64_t, int64_t>>;
  const auto spans = [&](int64_t offset, int64_t count) {
    Spans out;
    for (const FileSpan& s : file_spans(starts, offset, count)) out.emplace_back(s.file, s.offset, s.count);
    return out;
  };
  EXPECT_EQ(spans(0, 3), (Spans{{0, 0, 3}}));
  EXPECT_EQ(spans(4, 1), (Spans{{0, 4, 1}}));
  EXPECT_EQ(spans(5, 1), (Spans{{1, 0, 1}}));
  EXPECT_EQ(spans(4, 3), (Spans{{0, 4, 1}, {1, 0, 1}, {2, 0, 1}}));  // across a one-row file
  EXPECT_EQ(spans(0, 10), (Spans{{0, 0, 5}, {1, 0, 1}, {2, 0, 4}}));
  EXPECT_EQ(spans(9, 1), (Spans{{2, 3, 1}}));
  EXPECT_TRUE(spans(10, 0).empty());
  EXPECT_THROW(file_spans(starts, 8, 3), Error);  // past the end
  // Every range, against a walk over the files.
  for (int64_t offset = 0; offset < 10; ++offset)
    for (int64_t count = 1; offset + count <= 10; ++count) {
      std::vector<int64_t> flat;
      for (const FileSpan& s : file_spans(starts, offset, count))
        for (int64_t i = 0; i < s.count; ++i) flat.push_back(starts[s.file] + s.offset + i);
      std::vector<int64_t> expected(static_cast<size_t>(count));
      std::iota(expected.begin(), expected.end(), offset);
      EXPECT_EQ(flat, expected) << offset << " + " << count;
    }
}

TEST(DataFiles, ListsAndPatternsExpandInOrder) {
  TempDir dir;
  for (const char* name : {"s-10.h5", "s-02.h5", "s-01.h5", "other.h5", "a,b.h5"}) std::ofstream(dir.file(name)) << "x";
  EXPECT_EQ(expand_data_files(dir.file("s-*.h5")),
            (std::vector<std::string>{dir.file("s-01.h5"), dir.file("s-02.h5"), dir.file("s-10.h5")}));
  // A list keeps its order; a pattern's matches are sorted in place.
  EXPECT_EQ(expand_data_files(dir.file("other.h5") + ", " + dir.file("s-0?.h5")),
            (std::vector<std::string>{dir.file("other.h5"), dir.file("s-01.h5"), dir.file("s-02.h5")}));
  // A value that names an existing file is that file, comma or not.
  EXPECT_EQ(expand_data_files(dir.file("a,b.h5")), (std::vector<std::string>{dir.file("a,b.h5")}));
  // One missing file is left to the reader to name, as before.
  EXPECT_EQ(expand_data_files(dir.file("missing.h5")), (std::vector<std::string>{dir.file("missing.h5")}));
  const auto refused = [&](const std::string& spec, const std::string& part) {
    try {
      expand_data_files(spec);
      ADD_FAILURE() << "expected a ConfigError for " << spec;
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
  };
  refused(dir.file("none-*.h5"), "matches no file");
  refused(dir.file("s-01.h5") + ",," + dir.file("s-02.h5"), "an entry is empty");
  refused(dir.file("s-01.h5") + "," + dir.file("s-*.h5"), "twice");
  refused(dir.file("s-01.h5") + "," +
              dir.file("../" + fs::path(dir.file("")).parent_path().filename().string() + "/s-01.h5"),
          "twice");
}

// A data set split into files reads as the one file: the same rows in every batch, whatever the
// split, the read mode and the files' layouts.
TEST(DataFiles, SampleShardsReadAsOneFile) {
  TempDir dir;
  const int64_t n = 100;
  const H5Spec whole = indexed_spec(n);
  write_h5(dir.file("whole.h5"), whole);
  // Pieces of 37, 1, 40 and 22 rows, one stored contiguously.
  const std::vector<int64_t> sizes = {37, 1, 40, 22};
  std::string list;
  int64_t first = 0;
  for (size_t k = 0; k < sizes.size(); ++k) {
    H5Spec piece = indexed_spec(0);
    piece.x_dims = {static_cast<hsize_t>(sizes[k]), 2, 3};
    piece.y_dims = {static_cast<hsize_t>(sizes[k])};
    piece.x_f.assign(whole.x_f.begin() + first * kNumel, whole.x_f.begin() + (first + sizes[k]) * kNumel);
    piece.y.assign(whole.y.begin() + first, whole.y.begin() + first + sizes[k]);
    piece.chunk_rows = 8 + k;
    piece.contiguous = k == 2;
    const std::string name = dir.file("piece-" + std::to_string(k) + ".h5");
    write_h5(name, piece);
    list += (list.empty() ? "" : ",") + name;
    first += sizes[k];
  }
  EXPECT_EQ(open_sample_set_info(list, "x", "y").num_samples, n);
  for (ReadMode mode : {ReadMode::Direct, ReadMode::Runs, ReadMode::Union})
    for (bool in_memory : {false, true})
      for (int rank = 0; rank < 3; ++rank) {
        ReaderOptions one = three_ranks(dir.file("whole.h5"), rank, 17), split = three_ranks(list, rank, 17);
        one.read_mode = split.read_mode = mode;
        one.in_memory = split.in_memory = in_memory;
        ShardedReader a(one), b(split);
        ASSERT_EQ(a.batches_per_epoch(), b.batches_per_epoch());
        for (int i = 0; i < 2 * a.batches_per_epoch(); ++i)
          EXPECT_EQ(rows_of(a.next()), rows_of(b.next())) << "batch " << i << " rank " << rank;
      }
}

TEST(DataFiles, SampleShardsThatDifferAreRefused) {
  TempDir dir;
  write_h5(dir.file("a.h5"), indexed_spec(20));
  H5Spec other = indexed_spec(20);
  other.num_classes = 9;
  write_h5(dir.file("b.h5"), other);
  H5Spec wider = indexed_spec(20);
  wider.x_dims = {20, 3, 2};
  write_h5(dir.file("c.h5"), wider);
  expect_data_error([&] { open_sample_set_info(dir.file("a.h5") + "," + dir.file("b.h5"), "x", "y"); },
                    {"a.h5' and '", "b.h5'", "number of classes 7 vs 9"});
  expect_data_error([&] { ShardedReader(three_ranks(dir.file("a.h5") + "," + dir.file("c.h5"), 0, 1)); },
                    {"c.h5'", "sample shape [2, 3] vs [3, 2]"});
}

TEST(DataFiles, TokenShardsReadAsOneStream) {
  TempDir dir;
  // 3 MiB of text, cut into pieces of uneven sizes: windows cross the files' ends and chunks.
  std::string text;
  for (int64_t i = 0; text.size() < (size_t{3} << 20) + 12345; ++i)
    text += "line " + std::to_string(i * 7919 % 10007) + "\n";
  const std::vector<size_t> cuts = {0, 5, (size_t{1} << 20) + 3, (size_t{2} << 20) + 77777, text.size()};
  std::vector<std::string> pieces;
  std::string list;
  for (size_t k = 0; k + 1 < cuts.size(); ++k) {
    const std::string txt = dir.file("p" + std::to_string(k) + ".txt"), h5 = dir.file("p" + std::to_string(k) + ".h5");
    std::ofstream(txt, std::ios::binary) << text.substr(cuts[k], cuts[k + 1] - cuts[k]);
    pieces.push_back(txt);
    convert_text({txt}, h5);
    list += (list.empty() ? "" : ",") + h5;
  }
  TokenCorpus corpus(list);
  EXPECT_EQ(corpus.info().tokens, static_cast<int64_t>(text.size()));
  EXPECT_EQ(corpus.files().size(), 4u);
  EXPECT_EQ(corpus.info().sources.size(), 4u);
  for (bool in_memory : {false, true}) {
    corpus.open(in_memory);
    std::vector<uint32_t> got;
    for (int64_t offset : {int64_t{0}, int64_t{3}, int64_t{4}, int64_t{1} << 20, (int64_t{2} << 20) + 77700,
                           static_cast<int64_t>(text.size()) - 40})
      for (int64_t count : {1, 2, 33, 200}) {
        if (offset + count > static_cast<int64_t>(text.size())) continue;
        got.assign(static_cast<size_t>(count), 0);
        corpus.read(offset, count, got.data());
        const std::string piece = text.substr(static_cast<size_t>(offset), static_cast<size_t>(count));
        EXPECT_EQ(got, std::vector<uint32_t>(piece.begin(), piece.end()))
            << offset << " + " << count << (in_memory ? " in memory" : "");
      }
  }
}
