#pragma once
// Inputs are read to their end, so a FIFO, a device or a socket given where a file is expected
// would block or never end: they are refused by name before anything opens them. And a path that
// cannot be looked at is named with the reason, not as missing.
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>

#include "base/file_kind.hpp"

namespace mgt::data {

// "a directory", "a FIFO", "a character device", ... for a file of `mode` that is not a regular
// file; "" for a regular file. Also for the config file, which the SDK opens itself.
using mgt::non_regular_kind;

// The same for what `path` is; "" also for a path that cannot be looked at (the caller's own open
// then says why).
inline std::string non_regular_kind(const std::string& path) {
  struct stat info {};
  return ::stat(path.c_str(), &info) != 0 ? "" : non_regular_kind(info.st_mode);
}

// Why stat() cannot look at `path`, said after its name ("'P' does not exist"), or "" when it
// can (and *info, where given, holds what it found). "does not exist" is said for nothing there
// alone: a dangling symbolic link, a symbolic link loop (ELOOP) and any other errno (a directory on
// the way that cannot be searched) are named as what they are, since "does not exist" for a path
// that is there sends one looking in the wrong place.
inline std::string unreachable_path(const std::string& path, struct stat* info = nullptr) {
  struct stat found {};
  if (::stat(path.c_str(), info ? info : &found) == 0) return "";
  const int error = errno;
  struct stat link {};
  const bool is_link = ::lstat(path.c_str(), &link) == 0 && S_ISLNK(link.st_mode);
  if (error == ENOENT && !is_link) return "does not exist";
  if (error == ENOENT) {
    char target[4096];
    const ssize_t length = ::readlink(path.c_str(), target, sizeof target);
    return "is a symbolic link to '" + (length > 0 ? std::string(target, static_cast<size_t>(length)) : "?") +
           "', which does not exist";
  }
  if (error == ELOOP)
    return std::string(is_link ? "is a symbolic link loop" : "cannot be reached: a symbolic link on its way loops") +
           " (ELOOP: " + std::strerror(ELOOP) + ")";
  return std::string("cannot be looked at: ") + std::strerror(error);
}

// How a line about a data file found shorter than when the run opened it ends (rewritten in place
// while training: a read past its new end finds zeros through HDF5, a SIGBUS through a mapping).
// The readers of sample and token files measure their file once a batch and name it with this.
inline std::string changed_since_opened(int64_t epoch, int64_t batch) {
  return " when the run opened it (epoch " + std::to_string(epoch) + ", batch " + std::to_string(batch) +
         "): rewritten while training? expected it unchanged";
}

}  // namespace mgt::data
