#pragma once
// A file that grows by whole records (the metrics file's JSON lines, TensorBoard's TFRecords):
// each append is written in full or not at all. A write that fails part-way (a full disk) is cut
// back to where its record began, so a reader never meets half a record, and the reason comes
// back to the caller, which decides whether the run goes on without the file.
#include <string>
#include <string_view>

namespace mgt {

class AppendFile {
 public:
  // Opens `path` for appending, creating it (open_for_writing: never through a symbolic link).
  // Throws IoError "<what> '<path>' cannot be opened for writing: <strerror>", or "<what> '<path>'
  // is a symbolic link to ..." and the like.
  AppendFile(const std::string& path, const std::string& what);
  ~AppendFile();
  AppendFile(const AppendFile&) = delete;
  AppendFile& operator=(const AppendFile&) = delete;

  // Appends `record`; returns "" when all of it is in the file, else the reason (strerror), with
  // none of it left in the file.
  std::string append(std::string_view record);
  // Closes the file; returns "" or the reason close(2) gave (a network file system reports a
  // failed write there). Later appends fail.
  std::string close();
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int fd_ = -1;
};

}  // namespace mgt
