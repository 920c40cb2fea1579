// Writes the seed corpus of fuzz_dataset_inspect into DIR: small data files from the project's
// CSV converter and, through the HDF5 C API, the variants it never writes (contiguous and compact
// layouts, deflate, variable-length strings, other label types, the newest file format) and a few
// files the inspector must reject. Usage: fuzz_make_seeds DIR
#include <hdf5.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "datasets/convert.hpp"
#include "datasets/hdf5_format.hpp"
#include "datasets/hdf5_util.hpp"

namespace h5 = mgt::data::h5;

namespace {

std::string g_dir;

void check(bool ok, const std::string& what) {
  if (!ok) {
    std::fprintf(stderr, "fuzz_make_seeds: %s failed: %s\n", what.c_str(), h5::error_text().c_str());
    std::exit(1);
  }
}

h5::Id create(const std::string& name, bool latest = false) {
  h5::Id fapl = h5::plist(H5Pcreate(H5P_FILE_ACCESS));
  if (latest) H5Pset_libver_bounds(fapl.get(), H5F_LIBVER_LATEST, H5F_LIBVER_LATEST);
  h5::Id f = h5::file(H5Fcreate((g_dir + "/" + name).c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.get()));
  check(bool(f), "creating " + name);
  return f;
}

enum class Layout { contiguous, compact, chunked, deflate };

void dataset(hid_t file, const char* name, hid_t file_type, hid_t mem_type, std::vector<hsize_t> dims, const void* data,
             Layout layout, hid_t* out = nullptr) {
  h5::Id s = h5::space(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr));
  h5::Id p = h5::plist(H5Pcreate(H5P_DATASET_CREATE));
  if (layout == Layout::compact) H5Pset_layout(p.get(), H5D_COMPACT);
  if (layout == Layout::chunked || layout == Layout::deflate) {
    std::vector<hsize_t> chunk = dims;
    chunk[0] = (dims[0] + 1) / 2;
    H5Pset_chunk(p.get(), static_cast<int>(chunk.size()), chunk.data());
    if (layout == Layout::deflate) {
      H5Pset_shuffle(p.get());
      H5Pset_deflate(p.get(), 4);
    }
  }
  hid_t d = H5Dcreate2(file, name, file_type, s.get(), H5P_DEFAULT, p.get(), H5P_DEFAULT);
  check(d >= 0, std::string("creating ") + name);
  if (data) check(H5Dwrite(d, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) >= 0, std::string("writing ") + name);
  if (out)
    *out = d;
  else
    H5Dclose(d);
}

void csv_seed(const std::string& name, const std::string& text, const mgt::Shape& shape) {
  const std::string csv = g_dir + "/." + name + ".csv";
  std::ofstream(csv) << text;
  mgt::data::convert_csv(csv, g_dir + "/" + name, 0, shape, 2);
  std::remove(csv.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: fuzz_make_seeds DIR\n");
    return 2;
  }
  g_dir = argv[1];
  h5::silence_errors();

  // What `mgtrain data convert --csv` writes: uint8 and float32 x chunked by rows, int32 y.
  csv_seed("csv_u8.h5", "label,a,b,c,d\n0,0,255,3,4\n1,9,8,7,6\n2,1,1,1,1\n1,0,0,0,0\n", {1, 2, 2});
  csv_seed("csv_f32.h5", "1,0.5,-2\n0,1e3,0.25\n1,3,4\n", {2});

  // float32 x contiguous, int64 y compact; fixed-length class_names and num_classes on the root,
  // mean and std on x.
  {
    h5::Id f = create("contig_f32_i64.h5");
    const float x[6] = {0.f, 1.f, 2.f, 3.f, 4.f, 5.f};
    const int64_t y[3] = {0, 2, 1};
    hid_t xd = -1;
    dataset(f.get(), "x", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, {3, 2}, x, Layout::contiguous, &xd);
    dataset(f.get(), "y", H5T_STD_I64BE, H5T_NATIVE_INT64, {3}, y, Layout::compact);
    h5::write_attr_int64(f.get(), "num_classes", 3);
    h5::write_attr_strings(f.get(), "class_names", {"cat", "dog", "bird"});
    h5::write_attr_string(f.get(), "source", "seed");
    h5::write_attr_double(xd, "mean", 2.5);
    h5::write_attr_double(xd, "std", 1.5);
    H5Dclose(xd);
  }

  // uint8 x with shuffle + deflate, uint8 y; variable-length UTF-8 class_names (as h5py writes)
  // and a float num_classes on x.
  {
    h5::Id f = create("deflate_vlen.h5");
    const uint8_t x[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
    const uint8_t y[4] = {0, 1, 1, 0};
    hid_t xd = -1;
    dataset(f.get(), "x", H5T_STD_U8LE, H5T_NATIVE_UINT8, {4, 3}, x, Layout::deflate, &xd);
    dataset(f.get(), "y", H5T_STD_U8LE, H5T_NATIVE_UINT8, {4}, y, Layout::chunked);
    h5::write_attr_double(xd, "num_classes", 2.0);
    h5::Id t = h5::utf8_string_type();
    const char* names[2] = {"no", "yes"};
    const hsize_t n = 2;
    h5::Id s = h5::space(H5Screate_simple(1, &n, nullptr));
    h5::Id a = h5::attr(H5Acreate2(xd, "class_names", t.get(), s.get(), H5P_DEFAULT, H5P_DEFAULT));
    check(a && H5Awrite(a.get(), t.get(), names) >= 0, "writing class_names");
    h5::write_attr_utf8(f.get(), "source", "vlen");
    H5Dclose(xd);
  }

  // The newest file format (superblock v3, v2 object headers with checksums), rank-3 x, no
  // attributes: the class count comes from the labels.
  {
    h5::Id f = create("latest.h5", true);
    const uint8_t x[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    const int16_t y[2] = {3, 0};
    dataset(f.get(), "x", H5T_STD_U8LE, H5T_NATIVE_UINT8, {2, 2, 2}, x, Layout::chunked);
    dataset(f.get(), "y", H5T_STD_I16LE, H5T_NATIVE_INT16, {2}, y, Layout::contiguous);
  }

  // Rejected files: a label outside num_classes, and x a group with y a string dataset.
  {
    h5::Id f = create("bad_label.h5");
    const uint8_t x[4] = {1, 2, 3, 4};
    const int32_t y[2] = {0, 7};
    dataset(f.get(), "x", H5T_STD_U8LE, H5T_NATIVE_UINT8, {2, 2}, x, Layout::contiguous);
    dataset(f.get(), "y", H5T_STD_I32LE, H5T_NATIVE_INT32, {2}, y, Layout::contiguous);
    h5::write_attr_int64(f.get(), "num_classes", 2);
  }
  {
    h5::Id f = create("bad_types.h5");
    h5::Id g = h5::group(H5Gcreate2(f.get(), "x", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
    h5::Id t = h5::type(H5Tcopy(H5T_C_S1));
    H5Tset_size(t.get(), 4);
    dataset(f.get(), "y", t.get(), t.get(), {2}, "abcdefgh", Layout::contiguous);
  }
  return 0;
}
