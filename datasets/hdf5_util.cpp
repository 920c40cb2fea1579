// HDF5 helpers shared by the format, the converters and the reader; callers hold hdf5_mutex().
#include "datasets/hdf5_util.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <sstream>

namespace mgt::data::h5 {

void silence_errors() { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); }

namespace {
// The innermost entry of the error stack: its description and the function that reported it.
struct Innermost {
  std::string desc, func;
};

herr_t innermost(unsigned n, const H5E_error2_t* err, void* data) {
  // Walking upward, entry 0 is the most specific error; its text says what actually failed.
  if (n == 0 && err && err->desc && *err->desc) {
    auto* out = static_cast<Innermost*>(data);
    out->desc = err->desc;
    if (err->func_name) out->func = err->func_name;
    // A failed read or write of the file driver: "file write failed: time = <a ctime, with its
    // line break>, filename = ..., errno = 28, error message = '...', buf = 0x...": its errno says it.
    if (const size_t at = out->desc.find(", errno = "); at != std::string::npos) {
      const int error = std::atoi(out->desc.c_str() + at + 10);
      if (error > 0) {
        out->desc = std::strerror(error);
        out->func.clear();
      }
    }
  }
  return 0;
}

Innermost walk_errors() {
  Innermost found;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, innermost, &found);
  // The text is taken: clear the stack. A thread that exits with entries on it leaks their strings
  // (HDF5 frees a thread's error stack, not what it holds), e.g. the prefetch thread after a failed read.
  H5Eclear2(H5E_DEFAULT);
  return found;
}
}  // namespace

TemporaryOutput::TemporaryOutput(const std::string& out)
    : out_(out), file_on_disk_(out, "output file", [this](AtomicFile::Step step, int error) {
        if (step == AtomicFile::Step::create)
          return "output file '" + out_ + "' could not be created (" + file_on_disk_.temporary() +
                 "): " + std::strerror(error);
        const std::string how = step == AtomicFile::Step::rename ? "rename from " : "fsync of ";
        return "output file '" + out_ + "' could not be written (" + how + file_on_disk_.temporary() +
               "): " + std::strerror(error);
      }) {
  silence_errors();
  // Created here (new, never through a link), then opened by HDF5 through /proc/self/fd/N: HDF5
  // opens by name and follows links, and this way that name leads to the new file and no other.
  file_on_disk_.create();
  file_ = file(H5Fcreate(file_on_disk_.descriptor_path().c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT));
  if (!file_)
    throw IoError("output file '" + out + "' could not be created (" + file_on_disk_.temporary() +
                  "): " + error_text());
}

void TemporaryOutput::commit() {
  if (H5Fflush(file_.get(), H5F_SCOPE_GLOBAL) < 0) fail("flushing");
  // A file's close is where buffered data is written: its status counts.
  if (file_.close() < 0) fail("closing");
  file_on_disk_.commit();  // HDF5 wrote it: nothing to append
}

void TemporaryOutput::fail(const std::string& what) const {
  // Thrown on: the destructors close the file and remove the temporary before the line is printed.
  throw IoError("output file '" + out_ + "' could not be written: " + error_text() + " (" + what +
                "); its unfinished temporary is removed");
}

std::string error_text() {
  const Innermost e = walk_errors();
  if (e.desc.empty()) return "unknown HDF5 error";
  return e.func.empty() ? e.desc : e.desc + " (in " + e.func + ")";
}

std::string error_desc() {
  const Innermost e = walk_errors();
  return e.desc.empty() ? std::string("HDF5 error") : e.desc;
}

std::string object_path(const std::string& name) { return !name.empty() && name[0] == '/' ? name : "/" + name; }

std::string type_name(hid_t t) {
  switch (H5Tget_class(t)) {
    case H5T_INTEGER: {
      const bool is_signed = H5Tget_sign(t) == H5T_SGN_2;
      return std::string(is_signed ? "int" : "uint") + std::to_string(8 * H5Tget_size(t));
    }
    case H5T_FLOAT:
      return "float" + std::to_string(8 * H5Tget_size(t));
    case H5T_STRING:
      return "string";
    case H5T_COMPOUND:
      return "compound";
    case H5T_ENUM:
      return "enum";
    case H5T_ARRAY:
      return "array";
    case H5T_VLEN:
      return "vlen";
    case H5T_BITFIELD:
      return "bitfield";
    case H5T_OPAQUE:
      return "opaque";
    case H5T_REFERENCE:
      return "reference";
    case H5T_TIME:
      return "time";
    default:
      return "unknown";
  }
}

bool plain_number(hid_t t) {
  const auto cls = H5Tget_class(t);
  if (cls != H5T_INTEGER && cls != H5T_FLOAT) return false;
  const size_t bits = 8 * H5Tget_size(t), precision = H5Tget_precision(t);
  const int offset = H5Tget_offset(t);
  if (bits == 0 || bits > 64 || precision == 0 || offset < 0 || static_cast<size_t>(offset) + precision > bits)
    return false;
  if (cls == H5T_INTEGER) return true;
  size_t spos = 0, epos = 0, esize = 0, mpos = 0, msize = 0;
  return H5Tget_fields(t, &spos, &epos, &esize, &mpos, &msize) >= 0 && spos < bits && esize > 0 &&
         epos + esize <= bits && mpos + msize <= bits;
}

Shape dims_of(hid_t space) {
  const int rank = H5Sget_simple_extent_ndims(space);
  if (rank <= 0) return {};
  std::vector<hsize_t> d(static_cast<size_t>(rank));
  H5Sget_simple_extent_dims(space, d.data(), nullptr);
  return Shape(d.begin(), d.end());
}

Id utf8_string_type() {
  Id t = type(H5Tcopy(H5T_C_S1));
  if (t && (H5Tset_size(t.get(), H5T_VARIABLE) < 0 || H5Tset_cset(t.get(), H5T_CSET_UTF8) < 0)) t.reset();
  return t;
}

bool has_attr(hid_t obj, const char* name) { return H5Aexists(obj, name) > 0; }

namespace {
void write_scalar(hid_t obj, const char* name, hid_t file_type, hid_t mem_type, const void* v) {
  if (has_attr(obj, name)) H5Adelete(obj, name);
  Id s = space(H5Screate(H5S_SCALAR));
  Id a = attr(H5Acreate2(obj, name, file_type, s.get(), H5P_DEFAULT, H5P_DEFAULT));
  if (!a || H5Awrite(a.get(), mem_type, v) < 0)
    throw IoError(std::string("writing attribute '") + name + "' failed: " + error_text());
}
}  // namespace

void write_attr_int64(hid_t obj, const char* name, int64_t value) {
  write_scalar(obj, name, H5T_STD_I64LE, H5T_NATIVE_INT64, &value);
}

void write_attr_uint32(hid_t obj, const char* name, uint32_t value) {
  write_scalar(obj, name, H5T_STD_U32LE, H5T_NATIVE_UINT32, &value);
}

void write_attr_uint64(hid_t obj, const char* name, uint64_t value) {
  write_scalar(obj, name, H5T_STD_U64LE, H5T_NATIVE_UINT64, &value);
}

void write_attr_double(hid_t obj, const char* name, double value) {
  write_scalar(obj, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &value);
}

void write_attr_string(hid_t obj, const char* name, const std::string& value) {
  // Fixed-length, null-terminated: h5dump and h5py read it without any special handling.
  Id t = type(H5Tcopy(H5T_C_S1));
  H5Tset_size(t.get(), value.size() + 1);
  H5Tset_strpad(t.get(), H5T_STR_NULLTERM);
  write_scalar(obj, name, t.get(), t.get(), value.c_str());
}

void write_attr_utf8(hid_t obj, const char* name, const std::string& value) {
  Id t = utf8_string_type();
  if (!t) throw IoError(std::string("writing attribute '") + name + "' failed: " + error_text());
  const char* ptr = value.c_str();
  write_scalar(obj, name, t.get(), t.get(), &ptr);
}

void write_attr_strings(hid_t obj, const char* name, const std::vector<std::string>& values) {
  if (has_attr(obj, name)) H5Adelete(obj, name);
  size_t width = 1;
  for (const auto& v : values) width = std::max(width, v.size() + 1);
  std::vector<char> buf(width * values.size(), '\0');
  for (size_t i = 0; i < values.size(); ++i) std::memcpy(&buf[i * width], values[i].data(), values[i].size());
  Id t = type(H5Tcopy(H5T_C_S1));
  H5Tset_size(t.get(), width);
  H5Tset_strpad(t.get(), H5T_STR_NULLTERM);
  const hsize_t n = values.size();
  Id s = space(H5Screate_simple(1, &n, nullptr));
  Id a = attr(H5Acreate2(obj, name, t.get(), s.get(), H5P_DEFAULT, H5P_DEFAULT));
  if (!a || H5Awrite(a.get(), t.get(), buf.data()) < 0)
    throw IoError(std::string("writing attribute '") + name + "' failed: " + error_text());
}

void write_attr_floats(hid_t obj, const char* name, const std::vector<float>& values) {
  if (has_attr(obj, name)) H5Adelete(obj, name);
  const hsize_t n = values.size();
  Id s = space(H5Screate_simple(1, &n, nullptr));
  Id a = attr(H5Acreate2(obj, name, H5T_IEEE_F32LE, s.get(), H5P_DEFAULT, H5P_DEFAULT));
  if (!a || H5Awrite(a.get(), H5T_NATIVE_FLOAT, values.data()) < 0)
    throw IoError(std::string("writing attribute '") + name + "' failed: " + error_text());
}

namespace {
hssize_t attr_points(hid_t a) {
  Id s = space(H5Aget_space(a));
  return s ? H5Sget_simple_extent_npoints(s.get()) : -1;
}
}  // namespace

bool read_attr_double(hid_t obj, const char* name, double& value) {
  if (!has_attr(obj, name)) return false;
  Id a = attr(H5Aopen(obj, name, H5P_DEFAULT));
  Id t = type(H5Aget_type(a.get()));
  const auto cls = H5Tget_class(t.get());
  if ((cls != H5T_FLOAT && cls != H5T_INTEGER) || !plain_number(t.get()) || attr_points(a.get()) != 1) return false;
  return H5Aread(a.get(), H5T_NATIVE_DOUBLE, &value) >= 0;
}

bool read_attr_doubles(hid_t obj, const char* name, std::vector<double>& values) {
  if (!has_attr(obj, name)) return false;
  Id a = attr(H5Aopen(obj, name, H5P_DEFAULT));
  Id t = type(H5Aget_type(a.get()));
  const auto cls = H5Tget_class(t.get());
  const hssize_t points = attr_points(a.get());
  if ((cls != H5T_FLOAT && cls != H5T_INTEGER) || !plain_number(t.get()) || points < 1) return false;
  values.resize(static_cast<size_t>(points));
  return H5Aread(a.get(), H5T_NATIVE_DOUBLE, values.data()) >= 0;
}

bool read_attr_int64(hid_t obj, const char* name, int64_t& value) {
  if (!has_attr(obj, name)) return false;
  Id a = attr(H5Aopen(obj, name, H5P_DEFAULT));
  Id t = type(H5Aget_type(a.get()));
  if (attr_points(a.get()) != 1 || !plain_number(t.get())) return false;
  if (H5Tget_class(t.get()) == H5T_INTEGER) return H5Aread(a.get(), H5T_NATIVE_INT64, &value) >= 0;
  if (H5Tget_class(t.get()) == H5T_FLOAT) {
    double d = 0;
    if (H5Aread(a.get(), H5T_NATIVE_DOUBLE, &d) < 0) return false;
    // Converting a double outside int64's range (or NaN) is undefined: such a value is no count.
    if (!(d >= -0x1p63 && d < 0x1p63)) return false;
    value = static_cast<int64_t>(d);
    return static_cast<double>(value) == d;
  }
  return false;
}

namespace {
bool read_strings(hid_t a, std::vector<std::string>& values) {
  Id t = type(H5Aget_type(a));
  if (H5Tget_class(t.get()) != H5T_STRING) return false;
  const hssize_t n = attr_points(a);
  if (n < 0) return false;
  values.clear();
  if (H5Tis_variable_str(t.get()) > 0) {
    // Variable-length strings (what h5py writes by default).
    std::vector<char*> ptrs(static_cast<size_t>(n), nullptr);
    Id mt = type(H5Tcopy(H5T_C_S1));
    H5Tset_size(mt.get(), H5T_VARIABLE);
    // HDF5 converts no strings between character sets: UTF-8 ones (h5py's) are read as UTF-8.
    H5Tset_cset(mt.get(), H5Tget_cset(t.get()));
    if (H5Aread(a, mt.get(), ptrs.data()) < 0) return false;
    for (char* p : ptrs) values.emplace_back(p ? p : "");
    Id s = space(H5Aget_space(a));
    H5Dvlen_reclaim(mt.get(), s.get(), H5P_DEFAULT, ptrs.data());
    return true;
  }
  const size_t width = H5Tget_size(t.get());
  std::vector<char> buf(width * static_cast<size_t>(n) + 1, '\0');
  if (H5Aread(a, t.get(), buf.data()) < 0) return false;
  for (hssize_t i = 0; i < n; ++i) {
    const char* p = &buf[static_cast<size_t>(i) * width];
    values.emplace_back(p, strnlen(p, width));
  }
  return true;
}
}  // namespace

bool read_attr_strings(hid_t obj, const char* name, std::vector<std::string>& values) {
  if (!has_attr(obj, name)) return false;
  Id a = attr(H5Aopen(obj, name, H5P_DEFAULT));
  return a && read_strings(a.get(), values);
}

AttrFailure attr_exists(hid_t obj, const char* name, bool& exists) {
  const htri_t found = H5Aexists(obj, name);
  if (found < 0) return {AttrFailure::Kind::query, error_desc()};
  exists = found > 0;
  return {};
}

namespace {
using Kind = AttrFailure::Kind;

// Opens a required attribute and reads its type.
AttrFailure open_required(hid_t obj, const char* name, Id& a, Id& t) {
  bool exists = false;
  if (AttrFailure f = attr_exists(obj, name, exists)) return f;
  if (!exists) return {Kind::absent, ""};
  a = attr(H5Aopen(obj, name, H5P_DEFAULT));
  if (!a) return {Kind::open, error_desc()};
  t = type(H5Aget_type(a.get()));
  if (!t) return {Kind::type, error_desc()};
  // Read into one value: an array would be written past it.
  if (const hssize_t points = attr_points(a.get()); points != 1) return {Kind::not_single, std::to_string(points)};
  return {};
}
}  // namespace

AttrFailure read_attr_integer(hid_t obj, const char* name, hid_t mem_type, void* value) {
  Id a, t;
  if (AttrFailure f = open_required(obj, name, a, t)) return f;
  if (H5Tget_class(t.get()) != H5T_INTEGER) return {Kind::wrong_class, ""};
  if (H5Aread(a.get(), mem_type, value) < 0) return {Kind::read, error_desc()};
  return {};
}

AttrFailure read_attr_text(hid_t obj, const char* name, std::string& value) {
  Id a, t;
  if (AttrFailure f = open_required(obj, name, a, t)) return f;
  if (H5Tget_class(t.get()) != H5T_STRING) return {Kind::wrong_class, ""};
  const htri_t is_var = H5Tis_variable_str(t.get());
  if (is_var < 0) return {Kind::read, error_desc()};
  if (is_var > 0) {
    Id mem = utf8_string_type();
    if (!mem) return {Kind::string_type, error_desc()};
    char* ptr = nullptr;
    if (H5Aread(a.get(), mem.get(), &ptr) < 0) return {Kind::read, error_desc()};
    value = ptr != nullptr ? ptr : "";
    H5free_memory(ptr);
    return {};
  }
  const size_t size = H5Tget_size(t.get());
  std::string text(size, '\0');
  Id mem = type(H5Tcopy(H5T_C_S1));
  if (!mem || H5Tset_size(mem.get(), size) < 0) return {Kind::string_type, error_desc()};
  if (H5Aread(a.get(), mem.get(), text.data()) < 0) return {Kind::read, error_desc()};
  text.resize(std::strlen(text.c_str()));
  value = std::move(text);
  return {};
}

std::string attr_to_string(hid_t a) {
  Id t = type(H5Aget_type(a));
  const hssize_t n = attr_points(a);
  const auto cls = H5Tget_class(t.get());
  std::ostringstream out;
  const bool list = n != 1;
  const hssize_t shown = std::min<hssize_t>(n, 16);
  if ((cls == H5T_INTEGER || cls == H5T_FLOAT) && plain_number(t.get())) {
    std::vector<double> v(static_cast<size_t>(std::max<hssize_t>(n, 0)));
    if (n > 0 && H5Aread(a, H5T_NATIVE_DOUBLE, v.data()) < 0) return "<unreadable " + type_name(t.get()) + ">";
    if (list) out << "[";
    for (hssize_t i = 0; i < shown; ++i) out << (i ? ", " : "") << v[static_cast<size_t>(i)];
    if (shown < n) out << ", ... (" << n << " values)";
    if (list) out << "]";
    return out.str();
  }
  if (cls == H5T_STRING) {
    std::vector<std::string> v;
    if (!read_strings(a, v)) return "<unreadable string>";
    if (list) out << "[";
    for (hssize_t i = 0; i < shown; ++i) out << (i ? ", " : "") << '"' << v[static_cast<size_t>(i)] << '"';
    if (shown < n) out << ", ... (" << n << " values)";
    if (list) out << "]";
    return out.str();
  }
  out << "<" << type_name(t.get()) << ", " << n << " values>";
  return out.str();
}

}  // namespace mgt::data::h5
