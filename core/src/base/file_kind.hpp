#pragma once
// What a path is, in words, for refusals: readers refuse a FIFO or a device (they would block or
// never end), writers refuse those and a symbolic link too (see open_for_writing).
#include <sys/stat.h>

#include <string>

namespace mgt {

// "a directory", "a FIFO", "a character device", ... for a file of `mode` that is not a regular
// file; "" for a regular file.
inline std::string non_regular_kind(mode_t mode) {
  if (S_ISREG(mode)) return "";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISLNK(mode)) return "a symbolic link";
  return "a special file";
}

}  // namespace mgt
