#pragma once
// Inputs are read to their end, so a FIFO, a device or a socket given where a file is expected
// would block or never end: they are refused by name before anything opens them.
#include <sys/stat.h>

#include <string>

namespace mgt::data {

// "a FIFO", "a character device", ... for what `path` is when it exists and is not a regular file
// (a directory included); "" for a regular file or a path that cannot be looked at (the caller's
// own open then says why).
inline std::string non_regular_kind(const std::string& path) {
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0 || S_ISREG(info.st_mode)) return "";
  if (S_ISDIR(info.st_mode)) return "a directory";
  if (S_ISFIFO(info.st_mode)) return "a FIFO";
  if (S_ISCHR(info.st_mode)) return "a character device";
  if (S_ISBLK(info.st_mode)) return "a block device";
  if (S_ISSOCK(info.st_mode)) return "a socket";
  return "a special file";
}

}  // namespace mgt::data
