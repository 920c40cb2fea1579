#pragma once
// Internal to the datasets module (and any core file that writes HDF5): RAII ids, the one-line
// error text of the HDF5 error stack, and small attribute helpers. Every function here must be
// called with hdf5_mutex() held, because Debian's HDF5 is built without thread safety.
#include <hdf5.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "base/atomic_file.hpp"
#include "mgtrain/error.hpp"
#include "mgtrain/tensor.hpp"

namespace mgt::data::h5 {

// Owns one HDF5 id and closes it with the matching H5?close.
class Id {
 public:
  using Closer = herr_t (*)(hid_t);
  Id() = default;
  Id(hid_t id, Closer closer) : id_(id), closer_(closer) {}
  Id(Id&& o) noexcept : id_(std::exchange(o.id_, H5I_INVALID_HID)), closer_(o.closer_) {}
  Id& operator=(Id&& o) noexcept {
    if (this != &o) {
      reset();
      id_ = std::exchange(o.id_, H5I_INVALID_HID);
      closer_ = o.closer_;
    }
    return *this;
  }
  Id(const Id&) = delete;
  Id& operator=(const Id&) = delete;
  ~Id() { reset(); }
  void reset() {
    if (id_ >= 0 && closer_) closer_(id_);
    id_ = H5I_INVALID_HID;
  }
  // Closes now and returns the close's status (a file's close is where buffered data is written).
  herr_t close() {
    herr_t status = 0;
    if (id_ >= 0 && closer_) status = closer_(id_);
    id_ = H5I_INVALID_HID;
    return status;
  }
  hid_t get() const { return id_; }
  explicit operator bool() const { return id_ >= 0; }

 private:
  hid_t id_ = H5I_INVALID_HID;
  Closer closer_ = nullptr;
};

inline Id file(hid_t id) { return Id(id, H5Fclose); }
inline Id dataset(hid_t id) { return Id(id, H5Dclose); }
inline Id space(hid_t id) { return Id(id, H5Sclose); }
inline Id type(hid_t id) { return Id(id, H5Tclose); }
inline Id plist(hid_t id) { return Id(id, H5Pclose); }
inline Id attr(hid_t id) { return Id(id, H5Aclose); }
inline Id group(hid_t id) { return Id(id, H5Gclose); }

// A new HDF5 file written by HDF5 as the temporary of an AtomicFile (".NAME.tmp-PID-RANDOM"
// beside `out`) and renamed into place by commit(), so that a write that fails half way leaves nothing
// under the final name; the temporary is removed when commit() was never reached. Declare it
// before the ids of the file's datasets, which must be closed before it.
class TemporaryOutput {
 public:
  explicit TemporaryOutput(const std::string& out);
  TemporaryOutput(const TemporaryOutput&) = delete;
  TemporaryOutput& operator=(const TemporaryOutput&) = delete;
  hid_t get() const { return file_.get(); }
  // Flushes, closes, syncs to the disk and renames into place; every other id of the file must be
  // closed first.
  void commit();
  // Throws IoError "output file 'OUT' could not be written: <HDF5's reason, or the errno's text>
  // (<what>); its unfinished temporary is removed".
  [[noreturn]] void fail(const std::string& what) const;

 private:
  std::string out_;
  AtomicFile file_on_disk_;  // declared before file_: removes the temporary after HDF5 closed it
  Id file_;
};

// Turns off HDF5's automatic printing of its error stack, so errors reach the user only as our
// one-line messages. Per thread in thread-safe builds, global otherwise: call it at every entry.
void silence_errors();

// The innermost message of the current thread's HDF5 error stack, e.g. "can't open file", or
// "unknown HDF5 error" when the stack is empty. A failed read or write of the file says only its
// errno's text ("No space left on device"), not the driver's dump of pointers and times.
std::string error_text();
// Only that message's description, without the function name, or "HDF5 error" when the stack is
// empty (the checkpoint's messages use this form).
std::string error_desc();

// "/x" for "x"; names are relative to the root group.
std::string object_path(const std::string& name);

// "uint8", "int32", "float32", "string", "compound", ... for a datatype id.
std::string type_name(hid_t type);

// An integer or float type of at most 8 bytes whose bit layout fits in its size: the only numbers
// converted (read into int64, double, float). libhdf5 1.10 converts by the declared layout without
// checking it against the size, and overruns a stack buffer on, e.g., an 8-byte integer of 193 bits.
bool plain_number(hid_t type);

Shape dims_of(hid_t space);

// A variable-length UTF-8 string datatype; invalid when HDF5 could not make it.
Id utf8_string_type();

// Scalar and string attributes on an object (file, group or dataset).
bool has_attr(hid_t obj, const char* name);
void write_attr_int64(hid_t obj, const char* name, int64_t value);
void write_attr_uint32(hid_t obj, const char* name, uint32_t value);
void write_attr_uint64(hid_t obj, const char* name, uint64_t value);
void write_attr_double(hid_t obj, const char* name, double value);
void write_attr_string(hid_t obj, const char* name, const std::string& value);
// Variable-length UTF-8 (utf8_string_type()), as h5py writes a str.
void write_attr_utf8(hid_t obj, const char* name, const std::string& value);
void write_attr_strings(hid_t obj, const char* name, const std::vector<std::string>& values);
// A 1-d float32 array (per-channel mean and std).
void write_attr_floats(hid_t obj, const char* name, const std::vector<float>& values);
// Readers convert any numeric attribute; return false when it is absent or not numeric/string.
bool read_attr_double(hid_t obj, const char* name, double& value);
bool read_attr_int64(hid_t obj, const char* name, int64_t& value);
// A numeric attribute of any number of values (a scalar gives one), e.g. per-channel statistics.
bool read_attr_doubles(hid_t obj, const char* name, std::vector<double>& values);
bool read_attr_strings(hid_t obj, const char* name, std::vector<std::string>& values);

// Attributes a file must have (a checkpoint's): the readers say why one could not be read, with
// HDF5's reason taken at the failing call (the next call clears the error stack), and the caller
// words the message.
struct AttrFailure {
  enum class Kind {
    none,
    query,        // HDF5 could not tell whether the attribute exists
    absent,       // it does not
    open,         // it could not be opened
    type,         // its type could not be read
    wrong_class,  // it is not the kind of value asked for
    not_single,   // it holds other than one value (reason: how many)
    string_type,  // HDF5 could not make the string type to read it as
    read,         // its value could not be read
  };
  Kind kind = Kind::none;
  std::string reason;  // error_desc() of the failing call; empty for absent and wrong_class
  explicit operator bool() const { return kind != Kind::none; }
};
// Whether `obj` has the attribute; a query failure when HDF5 could not tell.
AttrFailure attr_exists(hid_t obj, const char* name, bool& exists);
// An integer attribute of any integer type, converted to `mem_type` into `value`.
AttrFailure read_attr_integer(hid_t obj, const char* name, hid_t mem_type, void* value);
// A string attribute: variable-length UTF-8 (as written here) or fixed-length (as other tools may
// write it), up to its first NUL.
AttrFailure read_attr_text(hid_t obj, const char* name, std::string& value);

// "name = value" rendering of any attribute, for `data inspect`.
std::string attr_to_string(hid_t attr);

}  // namespace mgt::data::h5

namespace mgt::data {
struct DatasetInfo;
}

namespace mgt::data::h5 {

// Opens the HDF5 file at `path` read-only, or throws DataError "<named> <why>" (`named`: "data
// file 'P'", "token file 'P'") saying which is wrong: missing (a dangling link, a loop), not a
// regular file, unreadable, empty, not HDF5, or truncated (shorter than its superblock says), not
// HDF5's generic "unable to open file".
Id open_readonly(const std::string& path, const std::string& named);

// Refuses (DataError "<what> ...") a dataset whose elements libhdf5 would make up or misread:
// every chunk it declares must be stored (one never written reads as the fill value, zeros, and
// a small file can declare 2^50 of them), in the size its layout implies, through filters this
// HDF5 has (a missing one is named). Checked from the chunk index before anything is read or
// allocated for the elements; `what` names the file and the dataset.
void require_rows_stored(hid_t dset, const std::string& what);

// The file and its two datasets, open and validated (see open_dataset_info). `x_dapl` is the
// dataset access property list for x (the reader's chunk cache).
struct Opened {
  Id file, x, y;
  Id row_crc;  // the row checksums of x and y, when the file has them (info.row_checksums)
};
Opened open_validated(const std::string& path, const std::string& x_name, const std::string& y_name, DatasetInfo& info,
                      hid_t x_dapl = H5P_DEFAULT);

}  // namespace mgt::data::h5
