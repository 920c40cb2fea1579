// The HDF5 sample format: opening and validating a data file, class counts and `data inspect`.
#include "datasets/hdf5_format.hpp"

#include <algorithm>
#include <cerrno>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <sstream>

#include "datasets/crc32.hpp"
#include "datasets/hdf5_util.hpp"
#include "datasets/regular_file.hpp"

namespace mgt::data {

std::recursive_mutex& hdf5_mutex() {
  static std::recursive_mutex m;
  return m;
}

namespace {

std::string file_prefix(const std::string& path) { return "data file '" + path + "'"; }

std::string where(const std::string& path, const std::string& name) {
  return file_prefix(path) + ": dataset '" + h5::object_path(name) + "'";
}

// Checks the file is there, readable and HDF5 before asking HDF5 to open it, so the message says
// which of these is wrong rather than HDF5's generic "unable to open file". `named` starts it.
void check_file(const std::string& path, const std::string& named) {
  struct stat info {};
  if (const std::string why = unreachable_path(path, &info); !why.empty()) throw DataError(named + " " + why);
  if (S_ISDIR(info.st_mode)) throw DataError(named + " is a directory, expected an HDF5 file");
  if (const std::string kind = non_regular_kind(info.st_mode); !kind.empty())
    throw DataError(named + " is " + kind + ", not a regular file (expected an HDF5 file)");
  std::ifstream probe(path, std::ios::binary);
  if (!probe) throw DataError(named + " is not readable: " + std::strerror(errno));
  char first = 0;
  if (!probe.read(&first, 1)) throw DataError(named + " is empty, expected an HDF5 file");
  if (H5Fis_hdf5(path.c_str()) <= 0) throw DataError(named + " is not an HDF5 file (no HDF5 signature)");
}

std::string shape_of(const Shape& s) { return shape_string(s); }

// A class count sizes per-class tables (class_counts, the inspect listing, the model's output
// layer), so a damaged num_classes attribute or label must not be able to ask for gigabytes.
constexpr int64_t kMaxClasses = int64_t{1} << 20;

// Refuses a dataset whose rows libhdf5 would make up or misread. Rows never written read back as
// the fill value (zeros), at a cost set by the header alone (a 2 KiB file can declare 2^40 rows and
// store none: a run would train on them), and libhdf5 1.10 overruns its buffers on a stored size
// that disagrees with the layout (an unfiltered chunk shorter than its chunk). So every dataset the
// reader reads must store all its rows: every chunk present, and unfiltered storage of exactly the
// size the layout implies.
void require_rows_stored_at(hid_t dset, const std::string& what, int depth = 0);

// Where libhdf5 1.10 looks for a file another one refers to (a virtual dataset's source, with
// `prefix_variable` HDF5_VDS_PREFIX; an external link's target, HDF5_EXT_PREFIX): as given (an
// absolute path, or relative to the working directory), under each entry of the prefix variable,
// and beside the referring file `from` (any object of it). The first that exists, else "".
std::string find_referred_file(const std::string& source, hid_t from, const char* prefix_variable) {
  namespace fs = std::filesystem;
  std::vector<fs::path> candidates{source};
  if (const char* prefixes = std::getenv(prefix_variable)) {
    std::stringstream list(prefixes);
    for (std::string prefix; std::getline(list, prefix, ':');)
      if (!prefix.empty()) candidates.push_back(fs::path(prefix) / source);
  }
  const ssize_t length = H5Fget_name(from, nullptr, 0);
  if (length > 0) {
    std::string own(static_cast<size_t>(length) + 1, '\0');
    H5Fget_name(from, own.data(), own.size());
    own.resize(static_cast<size_t>(length));
    const fs::path beside = fs::path(own).parent_path();
    candidates.push_back(beside / source);
    candidates.push_back(beside / fs::path(source).filename());
  }
  for (const auto& c : candidates) {
    std::error_code ec;
    if (fs::is_regular_file(c, ec)) return c.string();
  }
  return "";
}

// Why the link `obj` of `file`, which exists, leads to no object: a soft link to a path the file
// lacks, or an external link to a file that is not there or lacks the object, as "a soft link to
// ..." or "an external link to ...". "" when it leads somewhere (to an object that is no dataset,
// or one HDF5 cannot open), which the caller says.
std::string broken_link(hid_t file, const std::string& obj) {
  H5L_info_t info{};
  if (H5Lget_info(file, obj.c_str(), &info, H5P_DEFAULT) < 0) return "";
  if (info.type != H5L_TYPE_SOFT && info.type != H5L_TYPE_EXTERNAL) return "";
  std::vector<char> value(info.u.val_size + 1, '\0');
  if (H5Lget_val(file, obj.c_str(), value.data(), info.u.val_size, H5P_DEFAULT) < 0) return "";
  if (info.type == H5L_TYPE_SOFT) {
    const std::string target(value.data());
    if (H5Lexists(file, target.c_str(), H5P_DEFAULT) > 0) return "";
    return "a soft link to '" + target + "', which the file does not have";
  }
  unsigned flags = 0;
  const char *target_file = nullptr, *target_object = nullptr;
  if (H5Lunpack_elink_val(value.data(), info.u.val_size, &flags, &target_file, &target_object) < 0 || !target_file ||
      !target_object)
    return "";
  const std::string link =
      "an external link to '" + h5::object_path(target_object) + "' in '" + std::string(target_file) + "'";
  const std::string found = find_referred_file(target_file, file, "HDF5_EXT_PREFIX");
  if (found.empty()) return link + ", a file that does not exist";
  const std::string as_found = found == target_file ? link : link + " ('" + found + "')";
  h5::Id target = h5::file(H5Fopen(found.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT));
  if (!target) return as_found + ", which could not be opened: " + h5::error_text();
  if (H5Lexists(target.get(), h5::object_path(target_object).c_str(), H5P_DEFAULT) <= 0)
    return as_found + ", which has no object '" + h5::object_path(target_object) + "'";
  return "";
}

h5::Id open_dataset(hid_t file, const std::string& path, const std::string& name, const char* role, hid_t dapl) {
  const std::string obj = h5::object_path(name);
  if (H5Lexists(file, obj.c_str(), H5P_DEFAULT) <= 0)
    throw DataError(where(path, name) + " does not exist (expected the " + role + ")");
  h5::Id d = h5::dataset(H5Dopen2(file, obj.c_str(), dapl));
  if (!d) {
    const std::string link = broken_link(file, obj);
    throw DataError(where(path, name) + " is " + (link.empty() ? "not a dataset" : link) + " (expected the " + role +
                    ")");
  }
  return d;
}

// A virtual dataset's rows come from datasets in other files; a missing one (or rows no source
// maps) reads back as zeros without an error, so each source must be there and store its rows.
void require_virtual_sources(hid_t dset, hid_t dcpl, const std::string& what, const std::string& rows, int depth) {
  size_t mappings = 0;
  if (H5Pget_virtual_count(dcpl, &mappings) < 0) throw DataError(what + " could not be read: " + h5::error_text());
  h5::Id space = h5::space(H5Dget_space(dset));
  const hssize_t declared = H5Sget_simple_extent_npoints(space.get());
  h5::Id covered;  // the union of the mappings' selections, while they are hyperslabs
  bool all_covered = false, union_known = true;
  auto text = [&](ssize_t (*get)(hid_t, size_t, char*, size_t), size_t i) {
    const ssize_t length = get(dcpl, i, nullptr, 0);
    std::string value(static_cast<size_t>(std::max<ssize_t>(length, 0)) + 1, '\0');
    if (length > 0) get(dcpl, i, value.data(), value.size());
    value.resize(static_cast<size_t>(std::max<ssize_t>(length, 0)));
    return value;
  };
  for (size_t i = 0; i < mappings; ++i) {
    const std::string source_file = text(H5Pget_virtual_filename, i);
    const std::string source_dataset = text(H5Pget_virtual_dsetname, i);
    h5::Id vspace = h5::space(H5Pget_virtual_vspace(dcpl, i));
    std::vector<hsize_t> lo(static_cast<size_t>(std::max(H5Sget_simple_extent_ndims(vspace.get()), 1))), hi(lo.size());
    std::string mapped = "rows";
    if (vspace && H5Sget_select_bounds(vspace.get(), lo.data(), hi.data()) >= 0)
      mapped = "rows " + std::to_string(lo[0]) + ".." + std::to_string(hi[0]);
    const std::string source = "source dataset '" + h5::object_path(source_dataset) + "' of '" + source_file + "'";
    h5::Id source_handle;
    hid_t in = -1;
    if (source_file == ".") {
      in = dset;
    } else {
      const std::string found = find_referred_file(source_file, dset, "HDF5_VDS_PREFIX");
      if (found.empty())
        throw DataError(what + " is virtual and maps its " + mapped + " to " + source +
                        ", a file that does not exist (those rows would read as zeros)");
      source_handle = h5::file(H5Fopen(found.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT));
      if (!source_handle)
        throw DataError(what + " is virtual and maps its " + mapped + " to " + source +
                        ", which could not be opened: " + h5::error_text());
      in = source_handle.get();
    }
    const std::string source_path = h5::object_path(source_dataset);
    if (H5Lexists(in, source_path.c_str(), H5P_DEFAULT) <= 0)
      throw DataError(what + " is virtual and maps its " + mapped + " to " + source +
                      ", a dataset that does not exist (those rows would read as zeros)");
    h5::Id source_set = h5::dataset(H5Dopen2(in, source_path.c_str(), H5P_DEFAULT));
    if (!source_set)
      throw DataError(what + " is virtual and maps its " + mapped + " to " + source + ", which is not a dataset");
    if (depth > 8) throw DataError(what + " is virtual through more than 8 levels of sources (a cycle?)");
    require_rows_stored_at(source_set.get(), what + " (" + source + ")", depth + 1);
    // The rows no mapping covers.
    if (!vspace || all_covered || !union_known) continue;
    const H5S_sel_type kind = H5Sget_select_type(vspace.get());
    if (kind == H5S_SEL_ALL) {
      all_covered = true;
    } else if (kind != H5S_SEL_HYPERSLABS) {
      union_known = false;
    } else if (!covered) {
      covered = h5::space(H5Scopy(vspace.get()));
    } else if (H5Smodify_select(covered.get(), H5S_SELECT_OR, vspace.get()) < 0) {
      union_known = false;
    }
  }
  if (all_covered || !union_known) return;
  const hssize_t mapped = covered ? H5Sget_select_npoints(covered.get()) : 0;
  if (mapped >= 0 && mapped < declared)
    throw DataError(what + " is virtual and declares " + rows + " but its sources map " + std::to_string(mapped) +
                    " of its " + std::to_string(declared) + " values (the rest would read as zeros)");
}

// A filter this HDF5 lacks fails only when a row is first read, with HDF5's plugin search in the
// message; naming the filter before any step tells what to install.
void require_filters_available(hid_t dcpl, const std::string& what) {
  const int filters = H5Pget_nfilters(dcpl);
  for (int i = 0; i < filters; ++i) {
    unsigned flags = 0, config = 0, values[8] = {0};
    size_t count = 8;
    char name[128] = {0};
    const H5Z_filter_t id =
        H5Pget_filter2(dcpl, static_cast<unsigned>(i), &flags, &count, values, sizeof(name), name, &config);
    if (id < 0) throw DataError(what + " has an unreadable filter pipeline: " + h5::error_text());
    std::string filter = "'";
    filter.append(name[0] ? name : "unnamed").append("' (filter id ").append(std::to_string(id)).append(")");
    if (H5Zfilter_avail(id) <= 0)
      throw DataError(what + " is compressed with the HDF5 filter " + filter +
                      ", which this HDF5 does not have (not built in, no plugin for it in HDF5_PLUGIN_PATH); expected "
                      "a built-in filter (gzip, shuffle, fletcher32) or none");
    unsigned info = 0;
    if (H5Zget_filter_info(id, &info) < 0 || !(info & H5Z_FILTER_CONFIG_DECODE_ENABLED))
      throw DataError(what + " is compressed with the HDF5 filter " + filter +
                      ", which this HDF5 cannot decode; expected a filter it can read, such as gzip");
  }
}

void require_rows_stored_at(hid_t dset, const std::string& what, int depth) {
  h5::Id dcpl = h5::plist(H5Dget_create_plist(dset));
  h5::Id type = h5::type(H5Dget_type(dset));
  h5::Id space = h5::space(H5Dget_space(dset));
  const hsize_t element_bytes = H5Tget_size(type.get());  // 1 to 8, checked by the caller
  const Shape dims = h5::dims_of(space.get());
  const int rank = static_cast<int>(dims.size());
  hsize_t declared_bytes = element_bytes;  // fits: the caller checked the whole of x, and y is [N]
  for (const int64_t d : dims) declared_bytes *= static_cast<hsize_t>(d);
  const std::string rows = std::to_string(dims.empty() ? 0 : dims[0]) + " rows";
  const H5D_layout_t layout = H5Pget_layout(dcpl.get());
  if (layout == H5D_VIRTUAL) return require_virtual_sources(dset, dcpl.get(), what, rows, depth);
  if (layout == H5D_CONTIGUOUS || layout == H5D_COMPACT) {
    if (layout == H5D_CONTIGUOUS && H5Pget_external_count(dcpl.get()) > 0) return;  // another file
    if (layout == H5D_CONTIGUOUS && H5Dget_offset(dset) == HADDR_UNDEF)
      throw DataError(what + " declares " + rows + " but has no stored data (created but never written)");
    const hsize_t stored = H5Dget_storage_size(dset);
    if (stored != declared_bytes)
      throw DataError(what + " declares " + rows + " but stores " + std::to_string(stored) + " bytes, expected " +
                      std::to_string(declared_bytes));
    return;
  }
  if (layout != H5D_CHUNKED) return;
  require_filters_available(dcpl.get(), what);
  std::vector<hsize_t> chunk(static_cast<size_t>(rank));
  if (H5Pget_chunk(dcpl.get(), rank, chunk.data()) != rank)
    throw DataError(what + " has an unreadable chunk layout: " + h5::error_text());
  // The chunk grid, per dimension; its size is bounded by the declared bytes (each chunk >= 1 element).
  std::vector<hsize_t> grid(static_cast<size_t>(rank));
  hsize_t expected = 1, chunk_bytes = element_bytes;
  for (int i = 0; i < rank; ++i) {
    const auto d = static_cast<hsize_t>(dims[static_cast<size_t>(i)]);
    if (chunk[static_cast<size_t>(i)] == 0 || chunk[static_cast<size_t>(i)] > (hsize_t{1} << 32))
      throw DataError(what + " has an unreadable chunk layout: chunk dimension " + std::to_string(i) + " is " +
                      std::to_string(chunk[static_cast<size_t>(i)]));
    grid[static_cast<size_t>(i)] = (d + chunk[static_cast<size_t>(i)] - 1) / chunk[static_cast<size_t>(i)];
    expected *= grid[static_cast<size_t>(i)];
    chunk_bytes *= chunk[static_cast<size_t>(i)];
  }
  const bool filtered = H5Pget_nfilters(dcpl.get()) != 0;
  // An index listing more chunks than the extent holds is damaged (shrinking a dataset deletes the
  // chunks outside it), and libhdf5 1.10 overran a buffer reading through one such index.
  hsize_t listed = 0;
  if (H5Dget_num_chunks(dset, space.get(), &listed) < 0)
    throw DataError(what + " could not be read: " + h5::error_text());
  if (listed < expected)
    throw DataError(what + " declares " + rows + " but stores " + std::to_string(listed) + " of its " +
                    std::to_string(expected) + " chunks (created but never all written)");
  if (listed > expected)
    throw DataError(what + " has a chunk index listing " + std::to_string(listed) + " chunks, expected " +
                    std::to_string(expected) + " (a damaged file)");
  // Every chunk of the grid, by its first element (the number of chunks is now that stored, so
  // bounded by the file's size).
  std::vector<hsize_t> at(static_cast<size_t>(rank), 0), index(static_cast<size_t>(rank), 0);
  for (hsize_t k = 0; k < expected; ++k) {
    for (int i = 0; i < rank; ++i)
      at[static_cast<size_t>(i)] = index[static_cast<size_t>(i)] * chunk[static_cast<size_t>(i)];
    unsigned mask = 0;
    haddr_t addr = HADDR_UNDEF;
    hsize_t size = 0;
    if (H5Dget_chunk_info_by_coord(dset, at.data(), &mask, &addr, &size) < 0)
      throw DataError(what + " could not be read: " + h5::error_text());
    if (addr == HADDR_UNDEF)
      throw DataError(what + " declares " + rows + " but has no stored chunk for rows from " + std::to_string(at[0]) +
                      " (created but never written)");
    if (!filtered && size != chunk_bytes)
      throw DataError(what + " stores " + std::to_string(size) + " bytes for the chunk at row " +
                      std::to_string(at[0]) + ", expected " + std::to_string(chunk_bytes));
    for (int i = rank - 1; i >= 0 && ++index[static_cast<size_t>(i)] == grid[static_cast<size_t>(i)]; --i)
      index[static_cast<size_t>(i)] = 0;
  }
}

// Reads y in blocks, so memory does not grow with the row count the file declares, and calls
// f(first_row, labels, count) for each block. open_validated has checked that y stores its rows.
template <class F>
void for_each_label_block(hid_t y, int64_t n, const std::string& what, F&& f) {
  constexpr int64_t kBlock = int64_t{1} << 20;
  std::vector<int32_t> buf(static_cast<size_t>(std::min(n, kBlock)));
  h5::Id file_space = h5::space(H5Dget_space(y));
  for (int64_t row0 = 0; row0 < n; row0 += kBlock) {
    const hsize_t start = static_cast<hsize_t>(row0);
    const hsize_t count = static_cast<hsize_t>(std::min(kBlock, n - row0));
    h5::Id mem_space = h5::space(H5Screate_simple(1, &count, nullptr));
    if (H5Sselect_hyperslab(file_space.get(), H5S_SELECT_SET, &start, nullptr, &count, nullptr) < 0 ||
        H5Dread(y, H5T_NATIVE_INT32, mem_space.get(), file_space.get(), H5P_DEFAULT, buf.data()) < 0)
      throw DataError(what + " could not be read: " + h5::error_text());
    f(row0, buf.data(), static_cast<int64_t>(count));
  }
}

// The reader normalises in float32, (x - mean) x (1 / std): a mean or std that float32 cannot
// hold, or a std whose inverse it cannot, would turn every sample into Inf or NaN, found only as a
// non-finite gradient steps later. Each value of the attribute `name` (of `owner`) is checked.
void require_float32_statistics(const std::string& path, const char* name, const std::string& owner,
                                const std::vector<double>& values) {
  const bool is_std = std::strcmp(name, "std") == 0;
  for (size_t c = 0; c < values.size(); ++c) {
    const double v = values[c];
    const bool fits = is_std ? v >= FLT_MIN && v <= FLT_MAX : std::isfinite(v) && std::fabs(v) <= FLT_MAX;
    if (fits) continue;
    char text[160];
    if (is_std)
      std::snprintf(text, sizeof text,
                    "%g, expected a number from %g to %g (positive, and its inverse finite, in float32)", v,
                    static_cast<double>(FLT_MIN), static_cast<double>(FLT_MAX));
    else
      std::snprintf(text, sizeof text, "%g, expected a finite number of magnitude at most %g (float32)", v,
                    static_cast<double>(FLT_MAX));
    throw DataError(file_prefix(path) + ": attribute '" + name + "' of '" + owner + "'" +
                    (values.size() > 1 ? " (channel " + std::to_string(c) + ")" : std::string()) + " is " + text);
  }
}

}  // namespace

namespace h5 {

void require_rows_stored(hid_t dset, const std::string& what) { require_rows_stored_at(dset, what); }

Id open_readonly(const std::string& path, const std::string& named) {
  silence_errors();
  check_file(path, named);
  Id opened = file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT));
  if (opened) return opened;
  const std::string why = error_text();
  // A copy or a write cut short: HDF5 says it in its own terms ("truncated file: eof = ...").
  unsigned long long has = 0, base = 0, says = 0;
  if (std::sscanf(why.c_str(), "truncated file: eof = %llu, sblock->base_addr = %llu, stored_eof = %llu", &has, &base,
                  &says) == 3)
    throw DataError(named + " could not be opened: it is truncated (" + std::to_string(has) +
                    " bytes, its HDF5 superblock says " + std::to_string(says) + "; copied or written only in part?)");
  throw DataError(named + " could not be opened: " + why);
}

// Opens /row_crc32 when it covers this x and y; it must then be [N] of an unsigned 32-bit type.
void open_row_checksums(Opened& o, const std::string& path, const std::string& x_name, const std::string& y_name,
                        DatasetInfo& info) {
  const std::string obj = object_path(kRowChecksums);
  if (H5Lexists(o.file.get(), obj.c_str(), H5P_DEFAULT) <= 0) return;
  Id crc = dataset(H5Dopen2(o.file.get(), obj.c_str(), H5P_DEFAULT));
  if (!crc) {
    const std::string link = broken_link(o.file.get(), obj);
    throw DataError(where(path, kRowChecksums) +
                    (link.empty() ? " could not be opened: " + error_text() : " is " + link));
  }
  std::vector<std::string> covers;
  if (!read_attr_strings(crc.get(), "datasets", covers) || covers.size() != 2 ||
      object_path(covers[0]) != object_path(x_name) || object_path(covers[1]) != object_path(y_name))
    return;  // the checksums of other datasets in the same file
  Id space = h5::space(H5Dget_space(crc.get()));
  Id t = type(H5Dget_type(crc.get()));
  const Shape dims = dims_of(space.get());
  if (dims.size() != 1 || dims[0] != info.num_samples || H5Tget_class(t.get()) != H5T_INTEGER ||
      H5Tget_size(t.get()) != 4 || H5Tget_sign(t.get()) != H5T_SGN_NONE)
    throw DataError(where(path, kRowChecksums) + " is " + type_name(t.get()) + " " + shape_of(dims) +
                    ", expected uint32 [" + std::to_string(info.num_samples) + "] (one checksum per row)");
  require_rows_stored_at(crc.get(), where(path, kRowChecksums));
  o.row_crc = std::move(crc);
  info.row_checksums = true;
}

Opened open_validated(const std::string& path, const std::string& x_name, const std::string& y_name, DatasetInfo& info,
                      hid_t x_dapl) {
  Opened o;
  o.file = open_readonly(path, file_prefix(path));
  o.x = open_dataset(o.file.get(), path, x_name, "samples [N, ...]", x_dapl);
  o.y = open_dataset(o.file.get(), path, y_name, "labels [N]", H5P_DEFAULT);

  info = DatasetInfo{};
  info.path = path;
  info.x_name = x_name;
  info.y_name = y_name;

  Id xs = space(H5Dget_space(o.x.get()));
  Id ys = space(H5Dget_space(o.y.get()));
  const Shape xd = dims_of(xs.get());
  const Shape yd = dims_of(ys.get());
  if (xd.size() < 2)
    throw DataError(where(path, x_name) + " has rank " + std::to_string(xd.size()) +
                    ", expected at least 2 ([N, ...])");
  if (yd.size() != 1)
    throw DataError(where(path, y_name) + " has rank " + std::to_string(yd.size()) + ", expected 1 ([N])");
  if (xd[0] < 1) throw DataError(where(path, x_name) + " has 0 samples, expected at least 1");
  if (yd[0] != xd[0])
    throw DataError(where(path, y_name) + " has " + std::to_string(yd[0]) + " labels, expected " +
                    std::to_string(xd[0]) + " (one per sample of '" + object_path(x_name) + "')");

  Id xt = type(H5Dget_type(o.x.get()));
  Id yt = type(H5Dget_type(o.y.get()));
  const std::string xtn = type_name(xt.get());
  if (xtn != "uint8" && xtn != "float32")
    throw DataError(where(path, x_name) + " has type " + xtn + ", expected uint8 or float32");
  if (H5Tget_class(yt.get()) != H5T_INTEGER)
    throw DataError(where(path, y_name) + " has type " + type_name(yt.get()) +
                    ", expected an integer type (class labels)");
  // libhdf5 1.10 trusts an integer type's declared size when it converts the labels: one of
  // thousands of bytes over a chunk stored for 4-byte labels overruns its buffers on H5Dread.
  const size_t y_size = H5Tget_size(yt.get());
  if (y_size != 1 && y_size != 2 && y_size != 4 && y_size != 8)
    throw DataError(where(path, y_name) + " has type " + type_name(yt.get()) +
                    ", expected an integer of 8, 16, 32 or 64 bits (class labels)");
  // The same for a bit layout that does not fit the size (see plain_number); the reader converts
  // x too.
  for (const auto& [t, name] : {std::pair{xt.get(), x_name}, std::pair{yt.get(), y_name}})
    if (!plain_number(t))
      throw DataError(where(path, name) + " has type " + type_name(t) +
                      " with a bit layout that does not fit its size (a damaged file)");
  // Sizes downstream (shape_numel, the reader's buffers) are int64 products of x's dims, so each
  // must be at least 1 and the whole of x, in bytes, must fit in int64.
  int64_t x_bytes = static_cast<int64_t>(H5Tget_size(xt.get()));
  for (const int64_t d : xd)
    if (d < 1 || __builtin_mul_overflow(x_bytes, d, &x_bytes))
      throw DataError(where(path, x_name) + " has shape " + shape_of(xd) +
                      ", expected sizes of at least 1 whose product, in bytes, fits in 64 bits");

  // Before any row is read, here or by the reader: each dataset stores all the rows it declares.
  require_rows_stored_at(o.x.get(), where(path, x_name));
  require_rows_stored_at(o.y.get(), where(path, y_name));

  info.num_samples = xd[0];
  info.sample_shape.assign(xd.begin() + 1, xd.end());
  info.x_type = xtn;
  info.y_type = type_name(yt.get());

  Id dcpl = plist(H5Dget_create_plist(o.x.get()));
  if (H5Pget_layout(dcpl.get()) == H5D_CHUNKED) {
    std::vector<hsize_t> c(xd.size());
    H5Pget_chunk(dcpl.get(), static_cast<int>(c.size()), c.data());
    info.x_chunk.assign(c.begin(), c.end());
  }

  // Attributes: those on x take precedence over those on the root group.
  const hid_t objs[2] = {o.x.get(), o.file.get()};
  for (hid_t h : objs)
    if (read_attr_strings(h, "class_names", info.class_names)) break;
  int64_t nc = 0;
  bool have_nc = false;
  for (hid_t h : objs)
    if ((have_nc = read_attr_int64(h, "num_classes", nc))) break;
  if (have_nc) {
    if (nc < 1 || nc > kMaxClasses)
      throw DataError(file_prefix(path) + ": attribute 'num_classes' is " + std::to_string(nc) + ", expected 1 to " +
                      std::to_string(kMaxClasses));
    info.num_classes = nc;
  } else if (!info.class_names.empty()) {
    info.num_classes = static_cast<int64_t>(info.class_names.size());
  } else {
    // No attribute: the labels themselves say how many classes there are.
    int32_t lo = INT32_MAX, hi = INT32_MIN;
    int64_t lo_row = 0;  // the first row holding the smallest label
    for_each_label_block(o.y.get(), info.num_samples, where(path, y_name),
                         [&](int64_t row0, const int32_t* y, int64_t count) {
                           for (int64_t i = 0; i < count; ++i) {
                             if (y[i] < lo) lo = y[i], lo_row = row0 + i;
                             hi = std::max(hi, y[i]);
                           }
                         });
    if (lo < 0)
      throw DataError(where(path, y_name) + " row " + std::to_string(lo_row) + " has label " + std::to_string(lo) +
                      ", expected a class index >= 0");
    if (hi >= kMaxClasses)
      throw DataError(where(path, y_name) + " has label " + std::to_string(hi) + ", expected a class index below " +
                      std::to_string(kMaxClasses));
    info.num_classes = int64_t{hi} + 1;
  }
  if (!info.class_names.empty() && static_cast<int64_t>(info.class_names.size()) != info.num_classes)
    throw DataError(file_prefix(path) + ": attribute 'class_names' has " + std::to_string(info.class_names.size()) +
                    " names, expected " + std::to_string(info.num_classes) + " (num_classes)");

  open_row_checksums(o, path, x_name, y_name, info);

  // mean and std: scalars over every element, or arrays of one value per channel (samples
  // [C, ...], as colour images are written); a scalar beside an array applies to every channel.
  // An attribute there that is no number would otherwise leave the samples unnormalised unnoticed.
  std::vector<double> means, sds;
  std::string mean_owner, sd_owner;  // "/x" or "/": where each was found
  auto find_doubles = [&](const char* name, std::vector<double>& v, std::string& owner) {
    for (hid_t h : objs) {
      if (!has_attr(h, name)) continue;
      owner = h == o.x.get() ? object_path(x_name) : std::string("/");
      if (read_attr_doubles(h, name, v)) return true;
      Id a = attr(H5Aopen(h, name, H5P_DEFAULT));
      Id t = type(H5Aget_type(a.get()));
      throw DataError(file_prefix(path) + ": attribute '" + name + "' of '" + owner + "' has type " +
                      (t ? type_name(t.get()) : std::string("unknown")) +
                      ", expected numbers (one, or one per channel of the samples)");
    }
    return false;
  };
  const bool has_mean = find_doubles("mean", means, mean_owner);
  const bool has_sd = find_doubles("std", sds, sd_owner);
  if (has_mean != has_sd)
    throw DataError(file_prefix(path) + ": attribute '" + (has_mean ? "mean" : "std") + "' is there but '" +
                    (has_mean ? "std" : "mean") + "' is not, expected both (normalisation) or neither");
  if (has_mean && has_sd) {
    const int64_t channels = info.sample_shape.size() >= 2 ? info.sample_shape[0] : 1;
    for (const auto& [name, values] : {std::pair{"mean", &means}, std::pair{"std", &sds}})
      if (values->size() != 1 && static_cast<int64_t>(values->size()) != channels)
        throw DataError(file_prefix(path) + ": attribute '" + name + "' has " + std::to_string(values->size()) +
                        " values, expected " +
                        (info.sample_shape.size() >= 2
                             ? "1 or " + std::to_string(channels) + " (one per channel of samples " +
                                   shape_of(info.sample_shape) + ")"
                             : "1 (samples " + shape_of(info.sample_shape) + " have no channel axis)"));
    require_float32_statistics(path, "mean", mean_owner, means);
    require_float32_statistics(path, "std", sd_owner, sds);
    const size_t n = std::max(means.size(), sds.size());
    for (size_t c = 0; c < n; ++c) {
      const double mean = means[means.size() == 1 ? 0 : c], sd = sds[sds.size() == 1 ? 0 : c];
      if (n > 1) {
        info.channel_mean.push_back(static_cast<float>(mean));
        info.channel_std.push_back(static_cast<float>(sd));
      }
    }
    info.normalized_attrs = true;
    info.mean = static_cast<float>(means[0]);
    info.stddev = static_cast<float>(sds[0]);
  }
  return o;
}

}  // namespace h5

uint32_t row_crc32_label(uint32_t crc_of_row, int32_t label) {
  unsigned char le[4];
  const auto u = static_cast<uint32_t>(label);
  for (int i = 0; i < 4; ++i) le[i] = static_cast<unsigned char>(u >> (8 * i));
  return crc32_update(crc_of_row, le, 4);
}

DatasetInfo open_dataset_info(const std::string& path, const std::string& x_name, const std::string& y_name) {
  std::lock_guard lock(hdf5_mutex());
  DatasetInfo info;
  h5::open_validated(path, x_name, y_name, info);
  return info;
}

std::string label_error(const DatasetInfo& info, int64_t row, int32_t label) {
  return where(info.path, info.y_name) + " row " + std::to_string(row) + " has label " + std::to_string(label) +
         ", expected 0 <= label < " + std::to_string(info.num_classes) + " (num_classes)";
}

std::vector<int64_t> class_counts(const DatasetInfo& info) {
  std::lock_guard lock(hdf5_mutex());
  DatasetInfo fresh;
  h5::Opened o = h5::open_validated(info.path, info.x_name, info.y_name, fresh);
  std::vector<int64_t> counts(static_cast<size_t>(fresh.num_classes), 0);
  const std::string what = where(info.path, info.y_name);
  for_each_label_block(o.y.get(), fresh.num_samples, what, [&](int64_t row0, const int32_t* y, int64_t count) {
    for (int64_t i = 0; i < count; ++i) {
      if (y[i] < 0 || y[i] >= fresh.num_classes) throw DataError(label_error(fresh, row0 + i, y[i]));
      ++counts[static_cast<size_t>(y[i])];
    }
  });
  return counts;
}

namespace {

std::string filters_of(hid_t dset) {
  h5::Id dcpl = h5::plist(H5Dget_create_plist(dset));
  const int n = H5Pget_nfilters(dcpl.get());
  if (n <= 0) return "no compression";
  std::string out;
  for (int i = 0; i < n; ++i) {
    unsigned flags = 0, cd[8] = {0};
    size_t ncd = 8;
    char name[64] = {0};
    const H5Z_filter_t f =
        H5Pget_filter2(dcpl.get(), static_cast<unsigned>(i), &flags, &ncd, cd, sizeof(name), name, nullptr);
    if (!out.empty()) out += ", ";
    // A filter this HDF5 lacks is named by the file: its control bytes escaped.
    out += f == H5Z_FILTER_DEFLATE && ncd > 0 ? "deflate level " + std::to_string(cd[0]) : printable(name);
  }
  return "filters: " + out;
}

std::string layout_of(hid_t dset) {
  h5::Id dcpl = h5::plist(H5Dget_create_plist(dset));
  switch (H5Pget_layout(dcpl.get())) {
    case H5D_CHUNKED: {
      h5::Id s = h5::space(H5Dget_space(dset));
      std::vector<hsize_t> c(static_cast<size_t>(std::max(H5Sget_simple_extent_ndims(s.get()), 1)));
      H5Pget_chunk(dcpl.get(), static_cast<int>(c.size()), c.data());
      return "chunks " + shape_string(Shape(c.begin(), c.end())) + ", " + filters_of(dset);
    }
    case H5D_CONTIGUOUS:
      return "contiguous (not chunked)";
    case H5D_COMPACT:
      return "compact";
    default:
      return "virtual or unknown layout";
  }
}

struct AttrList {
  hid_t obj;
  std::vector<std::string> lines;
};

herr_t collect_attr(hid_t loc, const char* name, const H5A_info_t*, void* data) {
  auto* list = static_cast<AttrList*>(data);
  h5::Id a = h5::attr(H5Aopen(loc, name, H5P_DEFAULT));
  // Names and values are the file's: quoted with their control bytes escaped.
  list->lines.push_back(printable(name) + " = " + (a ? printable(h5::attr_to_string(a.get())) : "<unreadable>"));
  return 0;
}

std::vector<std::string> attrs_of(hid_t obj) {
  AttrList list{obj, {}};
  hsize_t idx = 0;
  H5Aiterate2(obj, H5_INDEX_NAME, H5_ITER_INC, &idx, collect_attr, &list);
  return list.lines;
}

std::string human_bytes(uintmax_t b) {
  std::ostringstream o;
  o << std::fixed << std::setprecision(1);
  if (b >= (1u << 30))
    o << static_cast<double>(b) / (1u << 30) << " GiB";
  else if (b >= (1u << 20))
    o << static_cast<double>(b) / (1u << 20) << " MiB";
  else if (b >= (1u << 10))
    o << static_cast<double>(b) / (1u << 10) << " KiB";
  else
    o << b << " bytes";
  return o.str();
}

}  // namespace

std::string inspect(const std::string& path, const std::string& x_name, const std::string& y_name) {
  std::lock_guard lock(hdf5_mutex());
  DatasetInfo info;
  h5::Opened o = h5::open_validated(path, x_name, y_name, info);
  const std::vector<int64_t> counts = class_counts(info);

  Shape full{info.num_samples};
  full.insert(full.end(), info.sample_shape.begin(), info.sample_shape.end());
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);

  std::ostringstream out;
  out << "file:          " << printable(path);
  if (!ec) out << " (" << human_bytes(size) << ")";
  out << "\n";
  out << "samples:       " << info.num_samples << "\n";
  out << "sample shape:  " << shape_of(info.sample_shape) << " (" << shape_numel(info.sample_shape) << " values)\n";
  out << "x:             '" << printable(h5::object_path(x_name)) << "' " << info.x_type << " " << shape_of(full)
      << ", " << layout_of(o.x.get()) << "\n";
  out << "y:             '" << printable(h5::object_path(y_name)) << "' " << info.y_type << " [" << info.num_samples
      << "], " << layout_of(o.y.get()) << "\n";
  out << "checksums:     "
      << (info.row_checksums
              ? std::string("'/") + kRowChecksums + "', CRC-32 per row, verified on every read\n"
              : std::string("none (damage to the rows goes unnoticed; `mgtrain data convert` adds them)\n"));
  auto per_channel = [](const std::vector<float>& v) {
    std::ostringstream list;
    for (size_t c = 0; c < v.size(); ++c) list << (c ? ", " : "[") << v[c];
    list << "]";
    return list.str();
  };
  if (info.normalized_attrs && !info.channel_mean.empty())
    out << "normalisation: per channel, mean " << per_channel(info.channel_mean) << ", std "
        << per_channel(info.channel_std)
        << (info.x_type == "uint8" ? " (of values scaled to [0, 1]; the reader applies x/255 then (x-mean)/std)\n"
                                   : " (the reader applies (x-mean)/std)\n");
  else if (info.normalized_attrs)
    out << "normalisation: mean " << info.mean << ", std " << info.stddev
        << (info.x_type == "uint8" ? " (of values scaled to [0, 1]; the reader applies x/255 then (x-mean)/std)\n"
                                   : " (the reader applies (x-mean)/std)\n");
  else
    out << "normalisation: none" << (info.x_type == "uint8" ? " (the reader scales uint8 to [0, 1])\n" : "\n");
  out << "classes:       " << info.num_classes << "\n";
  std::vector<std::string> class_names;
  for (const auto& n : info.class_names) class_names.push_back(printable(n));
  size_t width = 0;
  for (const auto& n : class_names) width = std::max(width, n.size());
  for (size_t c = 0; c < counts.size(); ++c) {
    out << "  " << std::setw(4) << c << "  ";
    if (!info.class_names.empty())
      out << std::left << std::setw(static_cast<int>(width)) << class_names[c] << std::right << "  ";
    out << std::setw(10) << counts[c] << "  (" << std::fixed << std::setprecision(2)
        << 100.0 * static_cast<double>(counts[c]) / static_cast<double>(info.num_samples) << "%)\n";
    out.unsetf(std::ios::fixed);
    out << std::setprecision(6);
  }
  out << "attributes:\n";
  const std::pair<std::string, hid_t> owners[] = {
      {"/", o.file.get()}, {h5::object_path(x_name), o.x.get()}, {h5::object_path(y_name), o.y.get()}};
  for (const auto& [name, obj] : owners) {
    h5::Id g = obj == o.file.get() ? h5::group(H5Gopen2(obj, "/", H5P_DEFAULT)) : h5::Id();
    for (const auto& line : attrs_of(g ? g.get() : obj)) out << "  " << printable(name) << ": " << line << "\n";
  }
  return out.str();
}

}  // namespace mgt::data
