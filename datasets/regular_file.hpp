#pragma once
// Inputs are read to their end, so a FIFO, a device or a socket given where a file is expected
// would block or never end: they are refused by name before anything opens them.
#include <sys/stat.h>

#include <string>

namespace mgt::data {

// "a directory", "a FIFO", "a character device", ... for a file of `mode` that is not a regular
// file; "" for a regular file. Also for the config file, which the SDK opens itself.
inline std::string non_regular_kind(mode_t mode) {
  if (S_ISREG(mode)) return "";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "a special file";
}

// The same for what `path` is; "" also for a path that cannot be looked at (the caller's own open
// then says why).
inline std::string non_regular_kind(const std::string& path) {
  struct stat info {};
  return ::stat(path.c_str(), &info) != 0 ? "" : non_regular_kind(info.st_mode);
}

}  // namespace mgt::data
