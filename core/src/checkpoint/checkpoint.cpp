// Checkpoint files (docs/checkpoints.md). Layout, format_version 2:
//   /                  attributes step, epoch, batch_in_epoch (int64), seed (uint64), world_size,
//                      format_version (int64), mgtrain_version, plugins, config (UTF-8 strings),
//                      plugin_paths (UTF-8 string, optional: absent from older checkpoints),
//                      init_from and init_from_sha256 (UTF-8 strings, only in the checkpoints of a
//                      run started by model.init_from, and covered by attributes_crc32 then),
//                      global_batch, samples_in_epoch (int64) and attributes_crc32 (uint32: zlib
//                      CRC-32 of the other attributes and of the names of the root's groups, see
//                      AttributeText), the last three absent from checkpoints older than the
//                      checksums
//   /params/<name>     float32, the parameter's shape; attribute crc32 (zlib) of its bytes
//   /optimizer         attributes optimizer_steps and attributes_crc32; one group per state
//                      buffer ("momentum", ...)
//   /optimizer/<buffer>/<name>   float32 per parameter, same shapes, crc32 each
//   /buffers/<name>    float32, a model buffer (ParameterStore::buffers: batch norm's running
//                      statistics), crc32 each; absent when the model has none
//   /sync              attributes strategy and attributes_crc32 (over the strategy and the names
//                      of its datasets); int64 counters and float32 arrays, crc32 each
// format_version 1 is the same without /sync's attributes_crc32 and without the group names in the
// root's; its checksums are optional only where the checkpoint predates them (no global_batch,
// samples_in_epoch nor attributes_crc32 at the root). In format_version 2 every checksum is
// required.
// All HDF5 calls hold data::hdf5_mutex(): the library here is not thread-safe and the prefetch
// thread reads data files concurrently.
#include "checkpoint/checkpoint.hpp"

#include <fcntl.h>
#include <hdf5.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <string_view>
#include <utility>
#include <vector>

#include "base/atomic_file.hpp"
#include "base/host_memory.hpp"
#include "base/host_name.hpp"
#include "datasets/crc32.hpp"
#include "datasets/hdf5_format.hpp"
#include "datasets/hdf5_util.hpp"
#include "datasets/regular_file.hpp"
#include "datasets/tokenizer.hpp"
#include "mgtrain/error.hpp"
#include "mgtrain/tensor.hpp"
#include "testing/fault_injection.hpp"

namespace fs = std::filesystem;

namespace mgt {

namespace {

constexpr int64_t kFormatVersion = 2;
constexpr int64_t kOldestFormatVersion = 1;
constexpr const char* kChecksumAttr = "crc32";
constexpr const char* kAttributesChecksumAttr = "attributes_crc32";
constexpr const char* kLockFile = ".lock";

std::string quote(const std::string& s) { return "'" + s + "'"; }

// --allow-unchecked: a checkpoint older than the attribute checksums is read (allow_unchecked_checkpoints).
bool unchecked_checkpoints_allowed = false;

std::string errno_text(int err) { return std::strerror(err); }

namespace h5 = data::h5;

// Converts failed HDF5 calls into IoError naming the checkpoint and what was being done. The
// HDF5 text must be taken right after the failing call, before the next one clears the stack.
struct H5Context {
  std::string path;

  [[noreturn]] void fail(const std::string& what) const {
    throw IoError("checkpoint " + quote(path) + ": " + what + ": " + h5::error_desc());
  }
  h5::Id check(hid_t id, h5::Id::Closer closer, const std::string& what) const {
    if (id < 0) fail(what);
    return h5::Id(id, closer);
  }
  void check(herr_t status, const std::string& what) const {
    if (status < 0) fail(what);
  }
  // Runs one of the shared attribute writers, adding the checkpoint's name to its IoError.
  template <typename Write>
  void write_attr(Write&& write) const {
    try {
      write();
    } catch (const IoError& e) {
      throw IoError("checkpoint " + quote(path) + ": " + e.what());
    }
  }
};

// Throws the checkpoint's message for an attribute of `obj_name` that could not be read as
// `expected` ("an integer", "a string").
void check_attr(const H5Context& h5, const h5::AttrFailure& failure, const std::string& obj_name,
                const std::string& name, const char* expected) {
  using Kind = h5::AttrFailure::Kind;
  const std::string prefix = "checkpoint " + quote(h5.path) + ": ";
  switch (failure.kind) {
    case Kind::none:
      return;
    case Kind::query:
      throw IoError(prefix + "cannot read attribute '" + name + "' of " + obj_name + ": " + failure.reason);
    case Kind::absent:
      throw IoError(prefix + obj_name + " has no attribute '" + name + "'");
    case Kind::open:
      throw IoError(prefix + "cannot open attribute '" + name + "' of " + obj_name + ": " + failure.reason);
    case Kind::wrong_class:
      throw IoError(prefix + "attribute '" + name + "' of " + obj_name + " is not " + expected);
    case Kind::not_single:
      throw IoError(prefix + "attribute '" + name + "' of " + obj_name + " holds " + failure.reason +
                    " values, not one: the file is damaged or was edited; use another checkpoint");
    case Kind::string_type:
      throw IoError(prefix + "cannot create string type: " + failure.reason);
    case Kind::type:
    case Kind::read:
      break;
  }
  throw IoError(prefix + "cannot read attribute '" + name + "': " + failure.reason);
}

template <typename T>
T read_int_attr(const H5Context& h5, hid_t obj, const std::string& obj_name, const std::string& name, hid_t mem_type) {
  T value{};
  check_attr(h5, h5::read_attr_integer(obj, name.c_str(), mem_type, &value), obj_name, name, "an integer");
  return value;
}

std::string read_string_attr(const H5Context& h5, hid_t obj, const std::string& obj_name, const std::string& name) {
  std::string value;
  check_attr(h5, h5::read_attr_text(obj, name.c_str(), value), obj_name, name, "a string");
  return value;
}

uint32_t checksum_bytes(const void* data, size_t size) { return crc32_update(0, data, size); }

uint32_t checksum(const float* data, size_t n) { return checksum_bytes(data, n * sizeof(float)); }

// A group's attributes as one text, in a fixed order, for their checksum: each one as
// "<name>=<length>:<value>\n", so that no two sets of values give the same text.
class AttributeText {
 public:
  void add(const std::string& name, const std::string& value) {
    text_ += name + "=" + std::to_string(value.size()) + ":" + value + "\n";
  }
  void add(const std::string& name, int64_t value) { add(name, std::to_string(value)); }
  void add(const std::string& name, uint64_t value) { add(name, std::to_string(value)); }
  uint32_t checksum() const { return checksum_bytes(text_.data(), text_.size()); }

 private:
  std::string text_;
};

// The root attributes the checksum covers, in their order.
// From format_version 2 the names of the root's groups too: a group deleted whole (/sync, /buffers)
// would otherwise be read as state the run never kept.
AttributeText root_attribute_text(const CheckpointMeta& meta, int64_t format_version, int64_t samples_in_epoch,
                                  const std::set<std::string>& groups) {
  AttributeText text;
  text.add("format_version", format_version);
  text.add("step", meta.step);
  text.add("epoch", meta.epoch);
  text.add("batch_in_epoch", meta.batch_in_epoch);
  text.add("samples_in_epoch", samples_in_epoch);
  text.add("global_batch", meta.global_batch);
  text.add("seed", meta.seed);
  text.add("world_size", meta.world_size);
  text.add("mgtrain_version", meta.mgtrain_version);
  text.add("plugins", meta.plugins);
  text.add("plugin_paths", meta.plugin_paths);
  text.add("config", meta.config_ini);
  if (!meta.init_from.empty()) {
    text.add("init_from", meta.init_from);
    text.add("init_from_sha256", meta.init_from_sha256);
  }
  if (format_version >= 2)
    for (const auto& name : groups) text.add("group", name);
  return text;
}

AttributeText optimizer_attribute_text(int64_t optimizer_steps) {
  AttributeText text;
  text.add("optimizer_steps", optimizer_steps);
  return text;
}

// /sync's strategy and the names of its datasets: another strategy's name would make the resumed
// strategy drop the state, a dataset gone would drop a rank's part of it.
AttributeText sync_attribute_text(const std::string& strategy, const std::set<std::string>& dataset_names) {
  AttributeText text;
  text.add("strategy", strategy);
  for (const auto& name : dataset_names) text.add("dataset", name);
  return text;
}

// What the file's format says about its checksums (read_meta).
struct FormatInfo {
  int64_t version = 0;
  bool checksummed = false;  // the root carries attributes_crc32, so /optimizer must too
};

bool has_attribute(const H5Context& h5, hid_t obj, const std::string& name) {
  bool exists = false;
  if (const h5::AttrFailure failure = h5::attr_exists(obj, name.c_str(), exists))
    throw IoError("checkpoint " + quote(h5.path) + ": cannot read attribute '" + name + "': " + failure.reason);
  return exists;
}

// A checksum the file's format requires is missing: its attributes cannot be trusted.
[[noreturn]] void missing_checksum(const H5Context& h5, const std::string& obj_name, const std::string& covers,
                                   const std::string& why_expected) {
  throw IoError("checkpoint " + quote(h5.path) + ": " + obj_name + " has no attribute '" + kAttributesChecksumAttr +
                "' (the checksum of " + covers + "), expected in " + why_expected +
                ": the file is damaged or was edited; use another checkpoint");
}

// The value of `key` in `section` of an INI text as Config::to_ini writes it; nullopt if absent.
std::optional<std::string> ini_value(const std::string& ini, const std::string& section, const std::string& key) {
  std::istringstream in(ini);
  std::string current;
  auto trim = [](std::string s) {
    const auto first = s.find_first_not_of(" \t\r");
    const auto last = s.find_last_not_of(" \t\r");
    return first == std::string::npos ? std::string() : s.substr(first, last - first + 1);
  };
  for (std::string line; std::getline(in, line);) {
    line = trim(line);
    if (line.size() >= 2 && line.front() == '[' && line.back() == ']') {
      current = trim(line.substr(1, line.size() - 2));
    } else if (const auto eq = line.find('=');
               eq != std::string::npos && current == section && trim(line.substr(0, eq)) == key) {
      return trim(line.substr(eq + 1));
    }
  }
  return std::nullopt;
}

std::optional<int64_t> parse_int64(const std::string& text) {
  int64_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

// "nan", "inf" or "-inf".
std::string non_finite_name(float v) { return std::isnan(v) ? "nan" : v > 0 ? "inf" : "-inf"; }

std::string hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

// The attribute checksum stored on `obj` (named `obj_name`) against `computed` over what it covers:
// "<what> checksum mismatch" where they differ. The root, /optimizer and /sync each have one.
void check_attribute_checksum(const H5Context& h5, hid_t obj, const std::string& obj_name, const std::string& what,
                              uint32_t computed) {
  const auto stored = read_int_attr<uint32_t>(h5, obj, obj_name, kAttributesChecksumAttr, H5T_NATIVE_UINT32);
  if (stored != computed)
    throw IoError("checkpoint " + quote(h5.path) + ": " + what + " checksum mismatch (stored " + hex32(stored) +
                  ", computed " + hex32(computed) + ")");
}

// Object headers carry no modification times, so the same state gives byte-identical files.
h5::Id untimed_plist(const H5Context& h5, hid_t cls) {
  h5::Id plist = h5.check(H5Pcreate(cls), H5Pclose, "cannot create property list");
  h5.check(H5Pset_obj_track_times(plist.get(), false), "cannot set property list");
  return plist;
}

h5::Id create_group(const H5Context& h5, hid_t parent, const std::string& name, const std::string& full) {
  h5::Id gcpl = untimed_plist(h5, H5P_GROUP_CREATE);
  return h5.check(H5Gcreate2(parent, name.c_str(), H5P_DEFAULT, gcpl.get(), H5P_DEFAULT), H5Gclose,
                  "cannot create group " + quote(full));
}

void write_dataset(const H5Context& h5, hid_t group, const std::string& name, const Shape& shape, const float* data) {
  std::vector<hsize_t> dims(shape.begin(), shape.end());
  h5::Id space = h5.check(
      dims.empty() ? H5Screate(H5S_SCALAR) : H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr),
      H5Sclose, "cannot create dataspace for '" + name + "'");
  h5::Id dcpl = untimed_plist(h5, H5P_DATASET_CREATE);
  h5::Id dset =
      h5.check(H5Dcreate2(group, name.c_str(), H5T_IEEE_F32LE, space.get(), H5P_DEFAULT, dcpl.get(), H5P_DEFAULT),
               H5Dclose, "cannot create dataset '" + name + "'");
  const auto numel = static_cast<size_t>(shape_numel(shape));
  if (numel > 0)
    h5.check(H5Dwrite(dset.get(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, data),
             "cannot write dataset '" + name + "'");
  h5.write_attr([&] { h5::write_attr_uint32(dset.get(), kChecksumAttr, checksum(data, numel)); });
}

// Lists the links of a group, in name order.
std::vector<std::string> group_members(const H5Context& h5, hid_t group, const std::string& gname) {
  H5G_info_t info;
  h5.check(H5Gget_info(group, &info), "cannot list " + gname);
  std::vector<std::string> names;
  for (hsize_t i = 0; i < info.nlinks; ++i) {
    const ssize_t len = H5Lget_name_by_idx(group, ".", H5_INDEX_NAME, H5_ITER_INC, i, nullptr, 0, H5P_DEFAULT);
    h5.check(static_cast<herr_t>(len < 0 ? -1 : 0), "cannot list " + gname);
    std::string name(static_cast<size_t>(len) + 1, '\0');
    h5.check(static_cast<herr_t>(H5Lget_name_by_idx(group, ".", H5_INDEX_NAME, H5_ITER_INC, i, name.data(), name.size(),
                                                    H5P_DEFAULT) < 0
                                     ? -1
                                     : 0),
             "cannot list " + gname);
    name.resize(static_cast<size_t>(len));
    names.push_back(std::move(name));
  }
  return names;
}

// /tokenizer: uint8 bytes of the SentencePiece model, with their crc32 and sha256.
void write_tokenizer(const H5Context& h5, hid_t file, const std::string& model) {
  const hsize_t size = model.size();
  h5::Id space = h5.check(H5Screate_simple(1, &size, nullptr), H5Sclose, "cannot create dataspace for 'tokenizer'");
  h5::Id dcpl = untimed_plist(h5, H5P_DATASET_CREATE);
  h5::Id dset = h5.check(H5Dcreate2(file, "tokenizer", H5T_STD_U8LE, space.get(), H5P_DEFAULT, dcpl.get(), H5P_DEFAULT),
                         H5Dclose, "cannot create dataset 'tokenizer'");
  h5.check(H5Dwrite(dset.get(), H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, model.data()),
           "cannot write dataset 'tokenizer'");
  h5.write_attr([&] {
    h5::write_attr_uint32(dset.get(), kChecksumAttr, checksum_bytes(model.data(), model.size()));
    h5::write_attr_string(dset.get(), "sha256", data::tokenizer_sha256(model));
  });
}

// The tokenizer's bytes, checked against their crc32 and sha256.
std::string read_tokenizer(const H5Context& h5, hid_t file) {
  const std::string full = "/tokenizer";
  h5::Id dset = h5.check(H5Dopen2(file, "tokenizer", H5P_DEFAULT), H5Dclose, "cannot open dataset " + quote(full));
  h5::Id space = h5.check(H5Dget_space(dset.get()), H5Sclose, "cannot read the shape of " + quote(full));
  const Shape dims = h5::dims_of(space.get());
  if (dims.size() != 1 || dims[0] < 1)
    throw DataError("checkpoint " + quote(h5.path) + ": dataset " + quote(full) + " has shape " + shape_string(dims) +
                    ", expected [bytes] (a SentencePiece model)");
  std::string bytes(static_cast<size_t>(dims[0]), '\0');
  h5.check(H5Dread(dset.get(), H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, bytes.data()),
           "cannot read dataset " + quote(full));
  uint32_t stored = 0;
  if (data::h5::read_attr_integer(dset.get(), kChecksumAttr, H5T_NATIVE_UINT32, &stored))
    throw IoError("checkpoint " + quote(h5.path) + ": dataset " + quote(full) + " has no attribute 'crc32'");
  const uint32_t computed = checksum_bytes(bytes.data(), bytes.size());
  std::string sha;
  if (computed != stored || data::h5::read_attr_text(dset.get(), "sha256", sha) || sha != data::tokenizer_sha256(bytes))
    throw IoError("checkpoint " + quote(h5.path) + ": dataset " + quote(full) + " checksum mismatch (stored " +
                  hex32(stored) + ", computed " + hex32(computed) + ", or its sha256 differs)");
  return bytes;
}

h5::Id open_group(const H5Context& h5, hid_t parent, const std::string& name, const std::string& full) {
  const htri_t exists = H5Lexists(parent, name.c_str(), H5P_DEFAULT);
  h5.check(static_cast<herr_t>(exists), "cannot open group " + quote(full));
  if (exists == 0) throw IoError("checkpoint " + quote(h5.path) + " has no group " + quote(full));
  return h5.check(H5Gopen2(parent, name.c_str(), H5P_DEFAULT), H5Gclose, "cannot open group " + quote(full));
}

// A dataset's declared size against what the file stores, before anything is allocated or read
// for it: a dataset extended with nothing written (or whose chunks were never stored) would have
// HDF5 hand back gigabytes of fill value, allocated first, checked against its checksum last.
// mgtrain writes every array contiguous and whole; a chunked one (another writer) must store every
// chunk. Returns the element count.
size_t stored_element_count(const H5Context& h5, hid_t dset, const std::string& full, const Shape& shape,
                            size_t element_size) {
  const auto damaged = [&](const std::string& what) {
    return IoError("checkpoint " + quote(h5.path) + ": dataset " + quote(full) + " declares shape " +
                   shape_string(shape) + " but " + what +
                   ": the file is damaged or was edited; use another checkpoint");
  };
  uint64_t numel = 1, bytes = 0;
  for (const int64_t d : shape)
    if (d < 0 || __builtin_mul_overflow(numel, static_cast<uint64_t>(d), &numel))
      throw damaged("that is more elements than a size can hold");
  if (__builtin_mul_overflow(numel, element_size, &bytes) || bytes > static_cast<uint64_t>(PTRDIFF_MAX))
    throw damaged("that is more bytes than a size can hold");
  if (numel == 0) return 0;
  h5::Id dcpl = h5.check(H5Dget_create_plist(dset), H5Pclose, "cannot read dataset " + quote(full));
  const hsize_t stored = H5Dget_storage_size(dset);
  if (H5Pget_layout(dcpl.get()) != H5D_CHUNKED) {
    if (stored != bytes)
      throw damaged("stores " + std::to_string(stored) + " of its " + std::to_string(bytes) + " bytes");
    return static_cast<size_t>(numel);
  }
  std::vector<hsize_t> chunk(shape.size());
  if (H5Pget_chunk(dcpl.get(), static_cast<int>(chunk.size()), chunk.data()) != static_cast<int>(chunk.size()))
    h5.fail("cannot read the chunks of dataset " + quote(full));
  uint64_t expected_chunks = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    const uint64_t per_dim = (static_cast<uint64_t>(shape[i]) + chunk[i] - 1) / std::max<hsize_t>(chunk[i], 1);
    if (__builtin_mul_overflow(expected_chunks, per_dim, &expected_chunks))
      throw damaged("that is more chunks than a size can hold");
  }
  h5::Id space = h5.check(H5Dget_space(dset), H5Sclose, "cannot read dataset " + quote(full));
  hsize_t chunks = 0;
  h5.check(H5Dget_num_chunks(dset, space.get(), &chunks), "cannot read the chunks of dataset " + quote(full));
  if (chunks != expected_chunks || stored == 0)
    throw damaged("stores " + std::to_string(chunks) + " of its " + std::to_string(expected_chunks) + " chunks");
  return static_cast<size_t>(numel);
}

// A vector of `n` elements for dataset `full`; out of host memory names it.
template <typename T>
std::vector<T> allocate_for(const H5Context& h5, const std::string& full, size_t n) {
  try {
    return std::vector<T>(n);
  } catch (const std::bad_alloc&) {
    throw HostMemoryError("reading dataset " + quote(full) + " of checkpoint " + quote(h5.path) + " (" +
                          std::to_string(n * sizeof(T) >> 20) + " MiB)");
  }
}

// Reads one float32 dataset whose shape must be `expected`, verifying its checksum.
std::vector<float> read_dataset(const H5Context& h5, hid_t group, const std::string& group_path,
                                const std::string& name, const Shape& expected, const std::string& what) {
  const std::string full = group_path + "/" + name;
  const htri_t exists = H5Lexists(group, name.c_str(), H5P_DEFAULT);
  h5.check(static_cast<herr_t>(exists), "cannot open dataset " + quote(full));
  if (exists == 0)
    throw DataError("checkpoint " + quote(h5.path) + " has no " + what + " " + quote(name) + " (dataset " +
                    quote(full) + ")");
  h5::Id dset = h5.check(H5Dopen2(group, name.c_str(), H5P_DEFAULT), H5Dclose, "cannot open dataset " + quote(full));
  h5::Id type = h5.check(H5Dget_type(dset.get()), H5Tclose, "cannot read dataset " + quote(full));
  if (H5Tget_class(type.get()) != H5T_FLOAT || H5Tget_size(type.get()) != sizeof(float))
    throw DataError("checkpoint " + quote(h5.path) + ": dataset " + quote(full) + " is not float32");
  h5::Id space = h5.check(H5Dget_space(dset.get()), H5Sclose, "cannot read dataset " + quote(full));
  const int rank = H5Sget_simple_extent_ndims(space.get());
  h5.check(static_cast<herr_t>(rank), "cannot read dataset " + quote(full));
  const Shape shape = h5::dims_of(space.get());
  if (shape != expected)
    throw DataError("checkpoint " + quote(h5.path) + ": " + what + " " + quote(name) + " has shape " +
                    shape_string(shape) + ", the model expects " + shape_string(expected));
  std::vector<float> data =
      allocate_for<float>(h5, full, stored_element_count(h5, dset.get(), full, shape, sizeof(float)));
  if (!data.empty())
    h5.check(H5Dread(dset.get(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, data.data()),
             "cannot read dataset " + quote(full));
  const auto stored =
      read_int_attr<uint32_t>(h5, dset.get(), "dataset " + quote(full), kChecksumAttr, H5T_NATIVE_UINT32);
  const uint32_t computed = checksum(data.data(), data.size());
  if (stored != computed)
    throw IoError("checkpoint " + quote(h5.path) + ": dataset " + quote(full) + " checksum mismatch (stored " +
                  hex32(stored) + ", computed " + hex32(computed) + ")");
  // A run that diverged writes NaN or Inf with valid checksums; such a model is no use to resume,
  // evaluate or compare, and would only show later as "loss nan".
  const auto bad = std::find_if(data.begin(), data.end(), [](float v) { return !std::isfinite(v); });
  if (bad != data.end())
    throw DataError("checkpoint " + quote(h5.path) + ": dataset " + quote(full) + " holds a non-finite value (" +
                    non_finite_name(*bad) + " at index " + std::to_string(bad - data.begin()) + " of " +
                    std::to_string(data.size()) + "): the run that wrote it had diverged; use an earlier checkpoint");
  return data;
}

// A sync strategy's state (/sync): counters as int64 datasets, arrays as float32 ones, each with
// its checksum.
void write_sync_state(const H5Context& h5, hid_t file, const SyncState& sync) {
  h5::Id group = create_group(h5, file, "sync", "/sync");
  std::set<std::string> names;
  for (const auto& entry : sync.counters) names.insert(entry.first);
  for (const auto& entry : sync.arrays) names.insert(entry.first);
  h5.write_attr([&] {
    h5::write_attr_utf8(group.get(), "strategy", sync.strategy);
    h5::write_attr_uint32(group.get(), kAttributesChecksumAttr, sync_attribute_text(sync.strategy, names).checksum());
  });
  for (const auto& [name, values] : sync.counters) {
    const hsize_t dims[1] = {values.size()};
    h5::Id space = h5.check(H5Screate_simple(1, dims, nullptr), H5Sclose, "cannot create dataspace for '" + name + "'");
    h5::Id dcpl = untimed_plist(h5, H5P_DATASET_CREATE);
    h5::Id dset = h5.check(
        H5Dcreate2(group.get(), name.c_str(), H5T_STD_I64LE, space.get(), H5P_DEFAULT, dcpl.get(), H5P_DEFAULT),
        H5Dclose, "cannot create dataset '/sync/" + name + "'");
    if (!values.empty())
      h5.check(H5Dwrite(dset.get(), H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()),
               "cannot write dataset '/sync/" + name + "'");
    h5.write_attr([&] {
      h5::write_attr_uint32(dset.get(), kChecksumAttr, checksum_bytes(values.data(), values.size() * sizeof(int64_t)));
    });
  }
  for (const auto& [name, values] : sync.arrays)
    write_dataset(h5, group.get(), name, {static_cast<int64_t>(values.size())}, values.data());
}

// The state a strategy kept, checksums verified (arrays also finite); empty without /sync.
SyncState read_sync_state(const H5Context& h5, hid_t file, const FormatInfo& format) {
  SyncState sync;
  const htri_t exists = H5Lexists(file, "sync", H5P_DEFAULT);
  h5.check(static_cast<herr_t>(exists), "cannot open group '/sync'");
  if (exists == 0) return sync;
  h5::Id group = open_group(h5, file, "sync", "/sync");
  sync.strategy = read_string_attr(h5, group.get(), "group '/sync'", "strategy");
  const std::vector<std::string> members = group_members(h5, group.get(), "'/sync'");
  if (has_attribute(h5, group.get(), kAttributesChecksumAttr)) {
    check_attribute_checksum(
        h5, group.get(), "group '/sync'", "group '/sync' (attribute 'strategy' and the names of its datasets)",
        sync_attribute_text(sync.strategy, std::set<std::string>(members.begin(), members.end())).checksum());
  } else if (format.version >= 2) {
    missing_checksum(h5, "group '/sync'", "its attribute 'strategy' and the names of its datasets",
                     "every checkpoint of format_version " + std::to_string(format.version));
  }
  for (const auto& name : members) {
    const std::string full = "/sync/" + name;
    h5::Id dset =
        h5.check(H5Dopen2(group.get(), name.c_str(), H5P_DEFAULT), H5Dclose, "cannot open dataset " + quote(full));
    h5::Id type = h5.check(H5Dget_type(dset.get()), H5Tclose, "cannot read dataset " + quote(full));
    h5::Id space = h5.check(H5Dget_space(dset.get()), H5Sclose, "cannot read dataset " + quote(full));
    const Shape shape = h5::dims_of(space.get());
    const H5T_class_t type_class = H5Tget_class(type.get());
    if (shape.size() != 1 || (type_class != H5T_INTEGER && type_class != H5T_FLOAT) ||
        H5Tget_size(type.get()) != (type_class == H5T_INTEGER ? sizeof(int64_t) : sizeof(float)))
      throw DataError("checkpoint " + quote(h5.path) + ": dataset " + quote(full) +
                      " is neither a one-dimensional int64 nor a float32 array (shape " + shape_string(shape) + ")");
    if (type_class == H5T_FLOAT) {
      sync.arrays[name] = read_dataset(h5, group.get(), "/sync", name, shape, "sync state");
      continue;
    }
    std::vector<int64_t> values =
        allocate_for<int64_t>(h5, full, stored_element_count(h5, dset.get(), full, shape, sizeof(int64_t)));
    if (!values.empty())
      h5.check(H5Dread(dset.get(), H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()),
               "cannot read dataset " + quote(full));
    const auto stored =
        read_int_attr<uint32_t>(h5, dset.get(), "dataset " + quote(full), kChecksumAttr, H5T_NATIVE_UINT32);
    const uint32_t computed = checksum_bytes(values.data(), values.size() * sizeof(int64_t));
    if (stored != computed)
      throw IoError("checkpoint " + quote(h5.path) + ": dataset " + quote(full) + " checksum mismatch (stored " +
                    hex32(stored) + ", computed " + hex32(computed) + ")");
    sync.counters[name] = std::move(values);
  }
  return sync;
}

// Every value of the root attributes in range and consistent with the others and with the stored
// config, else one DataError naming the checkpoint and the attribute. For an older checkpoint
// without global_batch, takes it from the stored config.
void validate_meta(const std::string& path, CheckpointMeta& meta, std::optional<int64_t> samples_in_epoch) {
  const std::string where = "checkpoint " + quote(path) + ": attribute ";
  auto at_least = [&](const char* name, int64_t value, int64_t minimum) {
    if (value < minimum)
      throw DataError(where + quote(name) + " = " + std::to_string(value) + ", expected >= " + std::to_string(minimum));
  };
  at_least("step", meta.step, 0);
  at_least("epoch", meta.epoch, 0);
  at_least("batch_in_epoch", meta.batch_in_epoch, 0);
  at_least("world_size", meta.world_size, 1);
  const auto config_seed = ini_value(meta.config_ini, "train", "seed");
  if (config_seed && *config_seed != std::to_string(meta.seed))
    throw DataError(where + "'seed' = " + std::to_string(meta.seed) +
                    ", but its attribute 'config' says train.seed = " + *config_seed);
  const auto config_batch_text = ini_value(meta.config_ini, "train", "global_batch");
  const std::optional<int64_t> config_batch = config_batch_text ? parse_int64(*config_batch_text) : std::nullopt;
  if (!samples_in_epoch) {
    // An older checkpoint: its run's global batch is the one its config names.
    if (config_batch && *config_batch > 0) meta.global_batch = *config_batch;
    return;
  }
  at_least("global_batch", meta.global_batch, 1);
  if (config_batch && *config_batch != meta.global_batch)
    throw DataError(where + "'global_batch' = " + std::to_string(meta.global_batch) +
                    ", but its attribute 'config' says train.global_batch = " + *config_batch_text);
  int64_t expected = 0;
  if (__builtin_mul_overflow(meta.batch_in_epoch, meta.global_batch, &expected) || *samples_in_epoch != expected)
    throw DataError(where + "'samples_in_epoch' = " + std::to_string(*samples_in_epoch) +
                    ", expected batch_in_epoch x global_batch = " + std::to_string(meta.batch_in_epoch) + " x " +
                    std::to_string(meta.global_batch));
}

CheckpointMeta read_meta(const H5Context& h5, hid_t file, FormatInfo* format = nullptr) {
  const std::string root = "the root group";
  const auto version = read_int_attr<int64_t>(h5, file, root, "format_version", H5T_NATIVE_INT64);
  if (version < kOldestFormatVersion || version > kFormatVersion)
    throw IoError("checkpoint " + quote(h5.path) + " has format_version " + std::to_string(version) +
                  ", this mgtrain reads format_version " + std::to_string(kOldestFormatVersion) + " to " +
                  std::to_string(kFormatVersion));
  CheckpointMeta meta;
  meta.step = read_int_attr<int64_t>(h5, file, root, "step", H5T_NATIVE_INT64);
  meta.epoch = read_int_attr<int64_t>(h5, file, root, "epoch", H5T_NATIVE_INT64);
  meta.batch_in_epoch = read_int_attr<int64_t>(h5, file, root, "batch_in_epoch", H5T_NATIVE_INT64);
  meta.seed = read_int_attr<uint64_t>(h5, file, root, "seed", H5T_NATIVE_UINT64);
  meta.world_size = read_int_attr<int64_t>(h5, file, root, "world_size", H5T_NATIVE_INT64);
  meta.mgtrain_version = read_string_attr(h5, file, root, "mgtrain_version");
  meta.plugins = read_string_attr(h5, file, root, "plugins");
  // Written since the attribute was added; a checkpoint from before has none.
  if (has_attribute(h5, file, "plugin_paths")) meta.plugin_paths = read_string_attr(h5, file, root, "plugin_paths");
  meta.config_ini = read_string_attr(h5, file, root, "config");
  // Only a run started by model.init_from has them, always both.
  if (has_attribute(h5, file, "init_from")) {
    meta.init_from = read_string_attr(h5, file, root, "init_from");
    meta.init_from_sha256 = read_string_attr(h5, file, root, "init_from_sha256");
  }

  // Written since the attribute checksum was added, with it; older checkpoints have none of the
  // three and are validated below all the same. One that has the others but not the checksum has
  // lost it.
  const bool has_checksum = has_attribute(h5, file, kAttributesChecksumAttr);
  const std::string covers =
      "step, epoch, batch_in_epoch, samples_in_epoch, global_batch, seed, world_size, config, ..." +
      std::string(version >= 2 ? ", and the names of its groups" : "");
  if (!has_checksum && version >= 2)
    missing_checksum(h5, root, covers, "every checkpoint of format_version " + std::to_string(version));
  if (!has_checksum && (has_attribute(h5, file, "global_batch") || has_attribute(h5, file, "samples_in_epoch")))
    missing_checksum(h5, root, covers,
                     "a checkpoint with attributes 'global_batch' and 'samples_in_epoch' (written with it)");
  // Without the root's checksum nothing ties step, config and parameters together: lowering
  // format_version and dropping the checksums would let an edited file pass as an old one.
  if (!has_checksum && !unchecked_checkpoints_allowed)
    throw IoError("checkpoint " + quote(h5.path) + " has format_version " + std::to_string(version) +
                  " without attribute checksums (written before they were added, or edited to look so): its "
                  "step, config and attributes cannot be verified; refused (--allow-unchecked reads it anyway)");
  std::optional<int64_t> samples_in_epoch;
  if (has_checksum) {
    meta.global_batch = read_int_attr<int64_t>(h5, file, root, "global_batch", H5T_NATIVE_INT64);
    samples_in_epoch = read_int_attr<int64_t>(h5, file, root, "samples_in_epoch", H5T_NATIVE_INT64);
    const std::vector<std::string> groups = group_members(h5, file, root);
    check_attribute_checksum(
        h5, file, root, "root attributes (" + covers + ")",
        root_attribute_text(meta, version, *samples_in_epoch, std::set<std::string>(groups.begin(), groups.end()))
            .checksum());
  }
  validate_meta(h5.path, meta, samples_in_epoch);
  if (H5Lexists(file, "tokenizer", H5P_DEFAULT) > 0) meta.tokenizer_model = read_tokenizer(h5, file);
  if (format) *format = {version, has_checksum};
  return meta;
}

// /optimizer's optimizer_steps, its checksum verified (required where the root has one).
int64_t read_optimizer_steps(const H5Context& h5, hid_t opt, const FormatInfo& format) {
  const std::string group = "group '/optimizer'";
  const auto steps = read_int_attr<int64_t>(h5, opt, group, "optimizer_steps", H5T_NATIVE_INT64);
  if (has_attribute(h5, opt, kAttributesChecksumAttr)) {
    check_attribute_checksum(h5, opt, group, "attribute 'optimizer_steps' of group '/optimizer'",
                             optimizer_attribute_text(steps).checksum());
  } else if (format.checksummed) {
    missing_checksum(h5, group, "optimizer_steps", "a checkpoint whose root attributes carry one (written with it)");
  }
  if (steps < 0)
    throw DataError("checkpoint " + quote(h5.path) + ": attribute 'optimizer_steps' of group '/optimizer' = " +
                    std::to_string(steps) + ", expected >= 0");
  return steps;
}

h5::Id open_checkpoint(const H5Context& h5) {
  struct stat info {};
  if (const std::string why = data::unreachable_path(h5.path, &info); !why.empty())
    throw IoError("checkpoint " + quote(h5.path) + " " + why);
  if (const std::string kind = data::non_regular_kind(info.st_mode); !kind.empty())
    throw IoError("checkpoint " + quote(h5.path) + " is " + kind + ", not a regular file");
  if (::access(h5.path.c_str(), R_OK) != 0)
    throw IoError("cannot read checkpoint " + quote(h5.path) + ": " + errno_text(errno));
  return h5.check(H5Fopen(h5.path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose, "cannot open as HDF5");
}

// The checkpoint's words for a failed step of writing `file` (its temporary) or syncing `dir`;
// `final_path` is what the temporary is renamed to.
AtomicFile::Describe describe_failure(const std::string& file, const std::string& final_path, const std::string& dir) {
  return [=](AtomicFile::Step step, int error) {
    using Step = AtomicFile::Step;
    const std::string why = errno_text(error);
    switch (step) {
      case Step::create:
        return "cannot create " + quote(file) + ": " + why;
      case Step::write:
        return "cannot write " + quote(file) + ": " + why;
      case Step::sync:
        return "cannot fsync " + quote(file) + ": " + why;
      case Step::close:
        return "cannot close " + quote(file) + ": " + why;
      case Step::rename:
        return "cannot rename " + quote(file) + " to " + quote(final_path) + ": " + why;
      case Step::open_directory:
        return "cannot open " + quote(dir) + " to fsync it: " + why;
      case Step::sync_directory:
        return "cannot fsync " + quote(dir) + ": " + why;
      case Step::close_directory:
        return "cannot close " + quote(dir) + ": " + why;
    }
    return why;
  };
}

// Makes a rename or removal in the directory durable.
void fsync_directory(const std::string& dir) { sync_directory(dir, describe_failure(dir, dir, dir)); }

// Builds the checkpoint as an HDF5 file image in memory (core driver, no backing store). The disk
// is then written with plain POSIX calls: HDF5 1.10 leaves a file whose write failed (ENOSPC,
// EFBIG) half-closed and crashes at exit, and errno reaches the message intact this way.
// `path` names the checkpoint in messages; `image_name` (unique, never on disk) names the image.
FileImage build_image(const std::string& path, const std::string& image_name, const CheckpointMeta& meta,
                      const ParameterStore& store, Optimizer* optimizer) {
  std::lock_guard lock(data::hdf5_mutex());
  h5::silence_errors();
  const H5Context h5{path};
  h5::Id fapl = h5.check(H5Pcreate(H5P_FILE_ACCESS), H5Pclose, "cannot create property list");
  h5.check(H5Pset_fapl_core(fapl.get(), size_t{4} << 20, false), "cannot set the core driver");
  h5::Id file =
      h5.check(H5Fcreate(image_name.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.get()), H5Fclose, "cannot create file");
  {
    const hid_t root = file.get();
    // The position as a sample offset in the epoch too: a run resumed under another global
    // batch continues from that sample (resume_position).
    const int64_t samples_in_epoch = meta.batch_in_epoch * meta.global_batch;
    // The groups written below.
    std::set<std::string> groups = {"params"};
    if (!store.buffers().empty()) groups.insert("buffers");
    if (optimizer != nullptr) groups.insert("optimizer");
    const bool writes_sync = !meta.sync.strategy.empty() && !meta.sync.empty();
    if (writes_sync) groups.insert("sync");
    if (!meta.tokenizer_model.empty()) groups.insert("tokenizer");
    h5.write_attr([&] {
      h5::write_attr_int64(root, "format_version", kFormatVersion);
      h5::write_attr_int64(root, "step", meta.step);
      h5::write_attr_int64(root, "epoch", meta.epoch);
      h5::write_attr_int64(root, "batch_in_epoch", meta.batch_in_epoch);
      h5::write_attr_int64(root, "samples_in_epoch", samples_in_epoch);
      h5::write_attr_int64(root, "global_batch", meta.global_batch);
      h5::write_attr_uint64(root, "seed", meta.seed);
      h5::write_attr_int64(root, "world_size", meta.world_size);
      h5::write_attr_utf8(root, "mgtrain_version", meta.mgtrain_version);
      h5::write_attr_utf8(root, "plugins", meta.plugins);
      h5::write_attr_utf8(root, "plugin_paths", meta.plugin_paths);
      h5::write_attr_utf8(root, "config", meta.config_ini);
      if (!meta.init_from.empty()) {
        h5::write_attr_utf8(root, "init_from", meta.init_from);
        h5::write_attr_utf8(root, "init_from_sha256", meta.init_from_sha256);
      }
      // The datasets carry their own checksums; this one covers the attributes above.
      h5::write_attr_uint32(root, kAttributesChecksumAttr,
                            root_attribute_text(meta, kFormatVersion, samples_in_epoch, groups).checksum());
    });

    const float* flat = store.params_data();
    h5::Id params = create_group(h5, file.get(), "params", "/params");
    for (const auto& p : store.params()) write_dataset(h5, params.get(), p.name, p.shape, flat + p.offset);
    if (!store.buffers().empty()) {
      h5::Id buffers = create_group(h5, file.get(), "buffers", "/buffers");
      for (const auto& b : store.buffers())
        write_dataset(h5, buffers.get(), b.name, b.shape, store.buffers_data() + b.offset);
    }

    if (optimizer != nullptr) {
      h5::Id opt = create_group(h5, file.get(), "optimizer", "/optimizer");
      h5.write_attr([&] {
        h5::write_attr_int64(opt.get(), "optimizer_steps", optimizer->step_count());
        h5::write_attr_uint32(opt.get(), kAttributesChecksumAttr,
                              optimizer_attribute_text(optimizer->step_count()).checksum());
      });
      for (const auto& buffer : optimizer->state_buffers()) {
        h5::Id group = create_group(h5, opt.get(), buffer.name, "/optimizer/" + buffer.name);
        for (const auto& p : store.params()) write_dataset(h5, group.get(), p.name, p.shape, buffer.data + p.offset);
      }
    }
    if (writes_sync) write_sync_state(h5, file.get(), meta.sync);
    if (!meta.tokenizer_model.empty()) write_tokenizer(h5, file.get(), meta.tokenizer_model);
    h5.check(H5Fflush(file.get(), H5F_SCOPE_GLOBAL), "cannot flush file");
  }
  const ssize_t size = H5Fget_file_image(file.get(), nullptr, 0);
  h5.check(static_cast<herr_t>(size < 0 ? -1 : 0), "cannot get the file image");
  FileImage image{std::unique_ptr<char[]>(new char[static_cast<size_t>(size)]), static_cast<size_t>(size)};
  h5.check(static_cast<herr_t>(H5Fget_file_image(file.get(), image.data.get(), image.size) < 0 ? -1 : 0),
           "cannot get the file image");
  h5.check(file.close(), "cannot close file");
  return image;
}

void prune(const std::string& dir, const std::string& just_written, int64_t keep) {
  if (keep <= 0) return;
  std::vector<std::pair<int64_t, std::string>> others;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name == just_written) continue;
    if (const auto n = checkpoint_step(name)) others.emplace_back(*n, name);
  }
  if (ec) throw IoError("cannot list checkpoint directory " + quote(dir) + ": " + ec.message());
  // The checkpoint just written always stays (latest points at it); the oldest others go.
  std::sort(others.begin(), others.end());
  const auto keep_others = static_cast<size_t>(keep - 1);
  if (others.size() <= keep_others) return;
  const size_t remove_count = others.size() - keep_others;
  for (size_t i = 0; i < remove_count; ++i) {
    const std::string path = (fs::path(dir) / others[i].second).string();
    if (::unlink(path.c_str()) != 0 && errno != ENOENT)
      throw IoError("cannot remove old checkpoint " + quote(path) + ": " + errno_text(errno));
  }
}

}  // namespace

std::string latest_state(const std::string& dir) {
  std::optional<std::string> name;
  try {
    name = read_latest_name(dir);
  } catch (const IoError&) {  // the message being built is about another failure
  }
  if (!name) return "there is no earlier checkpoint in " + quote(dir);
  return "the previous checkpoint is intact: " + quote((fs::path(dir) / "latest").string()) + " still names " + *name;
}

std::vector<std::string> list_checkpoints(const std::string& dir) {
  std::vector<std::pair<int64_t, std::string>> found;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    if (const auto n = checkpoint_step(it->path().filename().string())) found.emplace_back(*n, it->path().string());
  std::sort(found.rbegin(), found.rend());
  std::vector<std::string> paths;
  for (auto& [step, path] : found) paths.push_back(std::move(path));
  return paths;
}

namespace {

// Writes the checkpoint file and then `latest`; see write_checkpoint.
std::string write_checkpoint_files(const PreparedCheckpoint& prepared) {
  const std::string& dir = prepared.dir;
  const std::string& name = prepared.name;
  const std::string final_path = (fs::path(dir) / name).string();
  // Written as ".step-<N>.h5.tmp-<pid>-<random>", then ".latest.tmp-<pid>-<random>"
  // (remove_leftover_temporaries).
  AtomicFile file(final_path, "checkpoint", describe_failure(AtomicFile::temporary_path(final_path), final_path, dir));
  file.create();
  fault::at(fault::Phase::checkpoint_before_data, prepared.step);
  file.append(std::string_view(prepared.image.data.get(), prepared.image.size));
  file.sync_and_close();
  fault::at(fault::Phase::checkpoint_after_data, prepared.step);
  fault::at(fault::Phase::checkpoint_before_rename, prepared.step);
  file.rename();
  fsync_directory(dir);

  const std::string latest_path = (fs::path(dir) / "latest").string();
  AtomicFile latest(latest_path, "checkpoint file",
                    describe_failure(AtomicFile::temporary_path(latest_path), latest_path, dir));
  latest.create();
  latest.append(name + "\n");
  latest.sync_and_close();
  latest.rename();
  fsync_directory(dir);
  return final_path;
}

}  // namespace

PreparedCheckpoint prepare_checkpoint(const std::string& dir, const CheckpointMeta& meta, const ParameterStore& store,
                                      Optimizer* optimizer) {
  MGT_CHECK(store.finalized(), Error, "write_checkpoint: the parameter store is not finalized");
  MGT_CHECK(meta.global_batch > 0, Error, "write_checkpoint: the meta has no global batch");
  try {
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec) throw IoError("cannot create checkpoint directory " + quote(dir) + ": " + ec.message());
    if (!fs::is_directory(dir, ec)) throw IoError("checkpoint directory " + quote(dir) + " is not a directory");
  } catch (const IoError& e) {
    throw IoError(std::string(e.what()) + "; " + latest_state(dir));
  }
  PreparedCheckpoint prepared;
  prepared.dir = dir;
  prepared.name = "step-" + std::to_string(meta.step) + ".h5";
  prepared.step = meta.step;
  const std::string final_path = (fs::path(dir) / prepared.name).string();
  // The image's name is only HDF5's handle for it (the core driver writes nothing to disk).
  prepared.image = build_image(final_path, AtomicFile::temporary_path(final_path), meta, store, optimizer);
  return prepared;
}

std::string write_checkpoint(const std::string& dir, const CheckpointMeta& meta, const ParameterStore& store,
                             Optimizer* optimizer, int64_t keep, const std::vector<std::string>& replaced,
                             int* replaced_removed) {
  return commit_checkpoint(prepare_checkpoint(dir, meta, store, optimizer), keep, replaced, replaced_removed);
}

std::string commit_checkpoint(const PreparedCheckpoint& prepared, int64_t keep,
                              const std::vector<std::string>& replaced, int* replaced_removed) {
  const std::string& dir = prepared.dir;
  std::string path;
  try {
    path = write_checkpoint_files(prepared);
  } catch (const IoError& e) {
    // A full disk, a quota, a vanished mount: the temporary file is gone again and nothing that
    // existed was replaced. Say so, so nobody deletes the good checkpoint in a hurry.
    throw IoError(std::string(e.what()) + "; " + latest_state(dir));
  }
  const std::string name = fs::path(path).filename().string();
  int removed = 0;
  for (const std::string& old : replaced) {
    if (fs::path(old).filename() == name) continue;  // the rename above already replaced it
    if (::unlink(old.c_str()) == 0) {
      ++removed;
    } else if (errno != ENOENT) {
      throw IoError("cannot remove old checkpoint " + quote(old) + ": " + errno_text(errno));
    }
  }
  if (removed > 0) fsync_directory(dir);
  if (replaced_removed) *replaced_removed = removed;
  prune(dir, name, keep);
  return path;
}

namespace {

// "host H, pid P" from a lock file's "host H pid P" line; an explanation where it says nothing yet.
std::string lock_holder(int fd) {
  char buf[512];
  const ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
  std::istringstream in(std::string(buf, n > 0 ? static_cast<size_t>(n) : 0));
  std::string host_word, host, pid_word, pid;
  if (in >> host_word >> host >> pid_word >> pid && host_word == "host" && pid_word == "pid")
    return "host " + host + ", pid " + pid;
  return "a process that has not written its host and pid yet";
}

}  // namespace

CheckpointDirLock::CheckpointDirLock(std::string dir) : dir_(std::move(dir)) {
  const std::string where = "checkpoint.dir " + quote(dir_);
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec) throw IoError(where + " cannot be created: " + ec.message());
  if (!fs::is_directory(dir_, ec)) throw IoError(where + " is not a directory: " + errno_text(ENOTDIR));
  // Every checkpoint is a new file renamed into place: create and remove one now rather than find
  // out after the training (access(W_OK) says yes to root on a read-only mount, for one).
  // Named as a temporary is (".write-check.tmp-<pid>-<random>"), so nobody can plant a link there.
  const std::string probe = AtomicFile::temporary_path((fs::path(dir_) / "write-check").string());
  std::string why;
  const int probe_fd = open_for_writing(probe, WriteOpen::create_new, why);
  if (probe_fd < 0) throw IoError(where + " does not take new files: " + quote(probe) + " " + why);
  ::close(probe_fd);
  ::unlink(probe.c_str());

  // A lock file that is a symbolic link is refused, never opened: it could lead to any file.
  const std::string lock_path = (fs::path(dir_) / kLockFile).string();
  fd_ = open_for_writing(lock_path, WriteOpen::lock, why);
  if (fd_ < 0) throw IoError(where + ": its lock file " + quote(lock_path) + " " + why);
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    const std::string holder = err == EWOULDBLOCK ? lock_holder(fd_) : "";
    ::close(fd_);
    fd_ = -1;
    if (err == EWOULDBLOCK)
      throw IoError(where + " is in use by another job: " + holder + " holds " + quote(lock_path) +
                    "; two jobs in one directory replace each other's checkpoints: give this job another "
                    "checkpoint.dir, or wait until that one ends");
    throw IoError(where + ": cannot lock " + quote(lock_path) + ": " + errno_text(err));
  }
  // Who holds it, for the message a second job prints.
  const std::string holder = "host " + host_name() + " pid " + std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd_, 0) != 0 ||
      ::pwrite(fd_, holder.data(), holder.size(), 0) != static_cast<ssize_t>(holder.size())) {
    const int err = errno;
    ::close(fd_);
    fd_ = -1;
    throw IoError(where + ": cannot write its lock file " + quote(lock_path) + ": " + errno_text(err));
  }
}

CheckpointDirLock::~CheckpointDirLock() {
  if (fd_ >= 0) ::close(fd_);  // releases the lock; the file stays, for the next job to lock
}

int CheckpointDirLock::remove_leftover_temporaries() const {
  std::error_code ec;
  int removed = 0;
  for (const auto& entry : fs::directory_iterator(dir_, ec)) {
    const std::string name = entry.path().filename().string();
    const bool temporary =
        name.rfind('.', 0) == 0 && name.find(".tmp-") != std::string::npos &&
        (name.rfind(".step-", 0) == 0 || name.rfind(".latest.tmp-", 0) == 0 || name.rfind(".write-check.tmp-", 0) == 0);
    // A link with such a name is removed too (the link, not what it leads to): the names are
    // unguessable, so none is this run's, and none may lead a later write astray.
    const fs::file_status status = entry.symlink_status(ec);
    if (temporary && (fs::is_regular_file(status) || fs::is_symlink(status)) && fs::remove(entry.path(), ec)) ++removed;
  }
  return removed;
}

namespace {
// What --resume SPEC names, for the checks of which run it continues: a run's `latest` or its
// directory as the checkpoint it names; SPEC itself where it names nothing there (the resume then
// says what is wrong with it), "" for a `latest` that names nothing.
std::string resumed_checkpoint(const std::string& dir, const std::string& spec) {
  try {
    return resolve_resume(dir, spec);
  } catch (const Error&) {
    return spec == "latest" ? "" : spec;
  }
}
}  // namespace

std::string checkpoint_of_another_run(const std::string& dir, const std::string& spec) {
  const std::vector<std::string> found = list_checkpoints(dir);
  const std::optional<std::string> latest = read_latest_name(dir);
  if (found.empty() && !latest) return "";
  if (spec == "latest") return "";
  // A run directory or its `latest` names the checkpoint in it.
  const std::string resume = spec.empty() ? spec : resumed_checkpoint(dir, spec);
  if (!resume.empty()) {
    // A checkpoint of this directory continues its run (an older one too: the user's choice).
    std::error_code ec;
    const fs::path parent = fs::path(resume).parent_path();
    if (fs::equivalent(parent.empty() ? fs::path(".") : parent, dir, ec)) return "";
  }
  return !found.empty() ? found.front() : (fs::path(dir) / *latest).string();
}

std::vector<std::string> checkpoints_after(const std::string& dir, const std::string& spec) {
  if (spec.empty()) return {};
  // `latest` names the newest unless moved back by hand: then it rolls back as a path does.
  const std::string resume = resumed_checkpoint(dir, spec);
  if (resume.empty()) return {};
  std::error_code ec;
  const fs::path parent = fs::path(resume).parent_path();
  if (!fs::equivalent(parent.empty() ? fs::path(".") : parent, dir, ec)) return {};
  std::optional<int64_t> resumed_step = checkpoint_step(fs::path(resume).filename().string());
  if (!resumed_step) {
    try {
      resumed_step = read_checkpoint_meta(resume).step;
    } catch (const Error&) {
      return {};  // the resume itself says what is wrong with it
    }
  }
  std::vector<std::string> newer;
  for (const std::string& path : list_checkpoints(dir)) {
    const auto step = checkpoint_step(fs::path(path).filename().string());
    if (step && *step > *resumed_step && !fs::equivalent(path, resume, ec)) newer.push_back(path);
  }
  return newer;
}

ResumePosition resume_position(const std::string& path, const CheckpointMeta& meta, int64_t global_batch,
                               int64_t num_samples, int64_t batches_per_epoch) {
  // Unknown (an older checkpoint whose config does not say): as it was read before, in batches.
  const int64_t stored_batch = meta.global_batch > 0 ? meta.global_batch : global_batch;
  const std::string where = "checkpoint " + quote(path);
  const int64_t stored_batches = num_samples / stored_batch;
  if (meta.batch_in_epoch >= stored_batches)
    throw DataError(where + ": attribute 'batch_in_epoch' = " + std::to_string(meta.batch_in_epoch) +
                    " is past the end of the epoch: the training data has " + std::to_string(num_samples) +
                    " samples, " + std::to_string(stored_batches) + " batches of " + std::to_string(stored_batch));
  if (stored_batch == global_batch) return {meta.epoch, meta.batch_in_epoch, ""};
  const int64_t offset = meta.batch_in_epoch * stored_batch;  // < num_samples: no overflow
  const std::string at = "sample " + std::to_string(offset) + " of epoch " + std::to_string(meta.epoch + 1);
  if (offset % global_batch != 0)
    throw ConfigError(where + " stopped at " + at + " (batch " + std::to_string(meta.batch_in_epoch) + " of " +
                      std::to_string(stored_batch) + " samples); train.global_batch = " + std::to_string(global_batch) +
                      " does not divide " + std::to_string(offset) +
                      ", so the run cannot continue from that sample: resume with train.global_batch = " +
                      std::to_string(stored_batch) + " or one that divides " + std::to_string(offset));
  ResumePosition position{meta.epoch, offset / global_batch, ""};
  // Past the last full batch of the new size: the rest of the epoch is dropped, as at any epoch's end.
  if (position.batch_in_epoch >= batches_per_epoch) {
    ++position.epoch;
    position.batch_in_epoch = 0;
  }
  position.note = "resuming at " + at + ": batch " + std::to_string(position.batch_in_epoch) + " of epoch " +
                  std::to_string(position.epoch + 1) + " at train.global_batch = " + std::to_string(global_batch) +
                  " (the checkpoint's run took " + std::to_string(stored_batch) + " samples a step)";
  return position;
}

void allow_unchecked_checkpoints(bool allow) { unchecked_checkpoints_allowed = allow; }

CheckpointMeta read_checkpoint_meta(const std::string& path) {
  std::lock_guard lock(data::hdf5_mutex());
  h5::silence_errors();
  const H5Context h5{path};
  h5::Id file = open_checkpoint(h5);
  return read_meta(h5, file.get());
}

CheckpointMeta load_checkpoint(const std::string& path, ParameterStore& store, Optimizer* optimizer) {
  MGT_CHECK(store.finalized(), Error, "load_checkpoint: the parameter store is not finalized");
  std::lock_guard lock(data::hdf5_mutex());
  h5::silence_errors();
  const H5Context h5{path};
  h5::Id file = open_checkpoint(h5);
  FormatInfo format;
  CheckpointMeta meta = read_meta(h5, file.get(), &format);
  meta.sync = read_sync_state(h5, file.get(), format);

  // Everything is read and verified before anything is copied: a bad file leaves the model as it was.
  std::vector<std::vector<float>> params;
  {
    h5::Id group = open_group(h5, file.get(), "params", "/params");
    std::set<std::string> expected;
    for (const auto& p : store.params()) {
      expected.insert(p.name);
      params.push_back(read_dataset(h5, group.get(), "/params", p.name, p.shape, "parameter"));
    }
    for (const auto& name : group_members(h5, group.get(), "'/params'"))
      if (!expected.contains(name))
        throw DataError("checkpoint " + quote(path) + " has parameter " + quote(name) + " (dataset '/params/" + name +
                        "') that the model does not have");
  }

  std::vector<std::vector<float>> model_buffers;
  if (!store.buffers().empty()) {
    h5::Id group = open_group(h5, file.get(), "buffers", "/buffers");
    std::set<std::string> expected;
    for (const auto& b : store.buffers()) {
      expected.insert(b.name);
      model_buffers.push_back(read_dataset(h5, group.get(), "/buffers", b.name, b.shape, "buffer"));
    }
    for (const auto& name : group_members(h5, group.get(), "'/buffers'"))
      if (!expected.contains(name))
        throw DataError("checkpoint " + quote(path) + " has buffer " + quote(name) + " (dataset '/buffers/" + name +
                        "') that the model does not have");
  }

  std::vector<std::vector<std::vector<float>>> states;
  std::vector<OptimizerStateBuffer> buffers;
  int64_t optimizer_steps = 0;
  if (optimizer != nullptr) {
    buffers = optimizer->state_buffers();
    h5::Id opt = open_group(h5, file.get(), "optimizer", "/optimizer");
    optimizer_steps = read_optimizer_steps(h5, opt.get(), format);
    std::set<std::string> expected;
    for (const auto& buffer : buffers) {
      expected.insert(buffer.name);
      const std::string gpath = "/optimizer/" + buffer.name;
      h5::Id group = open_group(h5, opt.get(), buffer.name, gpath);
      std::vector<std::vector<float>> per_param;
      for (const auto& p : store.params())
        per_param.push_back(read_dataset(h5, group.get(), gpath, p.name, p.shape,
                                         "'" + buffer.name + "' optimizer state for parameter"));
      states.push_back(std::move(per_param));
    }
    for (const auto& name : group_members(h5, opt.get(), "'/optimizer'"))
      if (!expected.contains(name))
        throw DataError("checkpoint " + quote(path) + " has optimizer state " + quote(name) + " (group '/optimizer/" +
                        name + "') that the optimizer does not use");
  }

  float* flat = store.params_data();
  const auto& infos = store.params();
  for (size_t i = 0; i < infos.size(); ++i) std::copy(params[i].begin(), params[i].end(), flat + infos[i].offset);
  const auto& buffer_infos = store.buffers();
  for (size_t i = 0; i < buffer_infos.size(); ++i)
    std::copy(model_buffers[i].begin(), model_buffers[i].end(), store.buffers_data() + buffer_infos[i].offset);
  for (size_t b = 0; b < buffers.size(); ++b)
    for (size_t i = 0; i < infos.size(); ++i)
      std::copy(states[b][i].begin(), states[b][i].end(), buffers[b].data + infos[i].offset);
  if (optimizer != nullptr) optimizer->set_step_count(optimizer_steps);
  return meta;
}

std::string resolve_resume(const std::string& dir, const std::string& spec) {
  if (spec == "latest") {
    const std::string latest = (fs::path(dir) / "latest").string();
    const std::optional<std::string> stored = read_latest_name(dir);
    if (!stored) throw IoError("--resume latest: no checkpoint in " + quote(dir) + " (no " + latest + " file)");
    const std::string& name = *stored;
    if (name.empty() || name.find('/') != std::string::npos)
      throw IoError("--resume latest: " + quote(latest) +
                    " does not name a checkpoint file (expected 'step-<N>.h5', found " + quote(name) + ")");
    const std::string path = (fs::path(dir) / name).string();
    if (const std::string why = data::unreachable_path(path); !why.empty())
      throw IoError("--resume latest: " + quote(latest) + " points to " + quote(path) + ", which " + why);
    return path;
  }
  if (const std::string why = data::unreachable_path(spec); !why.empty())
    throw IoError("--resume " + spec + ": checkpoint " + quote(spec) + " " + why);
  return resolve_checkpoint(spec);
}

std::string resolve_checkpoint(const std::string& spec) {
  struct stat info {};
  const bool directory = ::stat(spec.c_str(), &info) == 0 && S_ISDIR(info.st_mode);
  if (!directory && fs::path(spec).filename() != "latest") return spec;
  const fs::path named_dir = directory ? fs::path(spec) : fs::path(spec).parent_path();
  const fs::path dir = named_dir.empty() ? fs::path(".") : named_dir;
  const std::string latest = (dir / "latest").string();
  const std::optional<std::string> name = read_latest_name(dir.string());
  if (!name && !directory) return spec;  // no such `latest`: its reader says so
  if (!name)
    throw IoError("checkpoint " + quote(spec) + " is a directory with no 'latest' file (expected a checkpoint file, " +
                  "a run's checkpoint directory or its 'latest')");
  if (name->empty() || name->find('/') != std::string::npos)
    throw IoError(quote(latest) + " does not name a checkpoint file (expected 'step-<N>.h5', found " + quote(*name) +
                  ")");
  const std::string path = (dir / *name).string();
  if (const std::string why = data::unreachable_path(path); !why.empty())
    throw IoError(quote(latest) + " names " + quote(*name) + ", but " + quote(path) + " " + why);
  return path;
}

namespace {

// Every dataset of a float32 group, checksums verified and values finite, by name.
std::vector<StoredTensor> read_float_group(const H5Context& h5, hid_t file, const std::string& group_path) {
  const std::string relative = group_path.substr(group_path.find_first_not_of('/'));
  h5::Id group = open_group(h5, file, relative, group_path);
  std::vector<StoredTensor> out;
  for (const auto& name : group_members(h5, group.get(), quote(group_path))) {
    StoredTensor t;
    t.name = name;
    {
      h5::Id dset = h5.check(H5Dopen2(group.get(), name.c_str(), H5P_DEFAULT), H5Dclose,
                             "cannot open dataset " + quote(group_path + "/" + name));
      h5::Id space =
          h5.check(H5Dget_space(dset.get()), H5Sclose, "cannot read dataset " + quote(group_path + "/" + name));
      t.shape = h5::dims_of(space.get());
    }
    t.values = read_dataset(h5, group.get(), group_path, name, t.shape, "dataset");
    out.push_back(std::move(t));
  }
  return out;
}

bool has_link(const H5Context& h5, hid_t parent, const std::string& name) {
  const htri_t exists = H5Lexists(parent, name.c_str(), H5P_DEFAULT);
  h5.check(static_cast<herr_t>(exists), "cannot open " + quote(name));
  return exists > 0;
}

}  // namespace

std::vector<StoredTensor> read_checkpoint_group(const std::string& path, const std::string& group_path) {
  std::lock_guard lock(data::hdf5_mutex());
  h5::silence_errors();
  const H5Context h5{path};
  h5::Id file = open_checkpoint(h5);
  read_meta(h5, file.get());  // its attributes are checked whatever the caller reads
  return read_float_group(h5, file.get(), group_path);
}

CheckpointContents read_checkpoint_contents(const std::string& path) {
  std::lock_guard lock(data::hdf5_mutex());
  h5::silence_errors();
  const H5Context h5{path};
  h5::Id file = open_checkpoint(h5);
  FormatInfo format;
  CheckpointContents contents;
  contents.meta = read_meta(h5, file.get(), &format);
  contents.meta.sync = read_sync_state(h5, file.get(), format);
  contents.params = read_float_group(h5, file.get(), "/params");
  if (has_link(h5, file.get(), "buffers")) contents.buffers = read_float_group(h5, file.get(), "/buffers");
  // Every checkpoint mgtrain writes has the optimizer's state: one without it is damaged.
  h5::Id opt = open_group(h5, file.get(), "optimizer", "/optimizer");
  contents.optimizer_steps = read_optimizer_steps(h5, opt.get(), format);
  for (const auto& name : group_members(h5, opt.get(), "'/optimizer'"))
    contents.optimizer[name] = read_float_group(h5, file.get(), "/optimizer/" + name);
  return contents;
}

CheckpointContents read_checkpoint_model(const std::string& path) {
  std::lock_guard lock(data::hdf5_mutex());
  h5::silence_errors();
  const H5Context h5{path};
  h5::Id file = open_checkpoint(h5);
  CheckpointContents contents;
  contents.meta = read_meta(h5, file.get());
  contents.params = read_float_group(h5, file.get(), "/params");
  if (has_link(h5, file.get(), "buffers")) contents.buffers = read_float_group(h5, file.get(), "/buffers");
  return contents;
}

std::optional<int64_t> checkpoint_step(const std::string& name) {
  constexpr std::string_view prefix = "step-", suffix = ".h5";
  if (name.size() <= prefix.size() + suffix.size() || !name.starts_with(prefix) || !name.ends_with(suffix))
    return std::nullopt;
  const std::string_view digits(name.data() + prefix.size(), name.size() - prefix.size() - suffix.size());
  int64_t n = 0;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), n);
  if (ec != std::errc() || end != digits.data() + digits.size() || n < 0) return std::nullopt;
  return n;
}

std::optional<std::string> read_latest_name(const std::string& dir) {
  const std::string latest = (fs::path(dir) / "latest").string();
  const std::string why = data::unreachable_path(latest);
  if (why == "does not exist") return std::nullopt;
  if (!why.empty()) throw IoError(quote(latest) + " " + why + " (expected a file naming the newest checkpoint)");
  std::FILE* f = std::fopen(latest.c_str(), "r");
  if (f == nullptr) throw IoError("cannot read " + quote(latest) + ": " + errno_text(errno));
  char buf[4096];
  const size_t n = std::fread(buf, 1, sizeof buf, f);
  std::fclose(f);
  std::string name(buf, n);
  while (!name.empty() && (name.back() == '\n' || name.back() == '\r' || name.back() == ' ')) name.pop_back();
  return name;
}

}  // namespace mgt
