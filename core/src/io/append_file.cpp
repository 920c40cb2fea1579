#include "io/append_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "base/atomic_file.hpp"
#include "mgtrain/error.hpp"

namespace mgt {

AppendFile::AppendFile(const std::string& path, const std::string& what) : path_(path) {
  std::string why;
  fd_ = open_for_writing(path, WriteOpen::append, why);
  if (fd_ < 0) throw IoError(what + " '" + path + "' " + why);
}

AppendFile::~AppendFile() { close(); }

std::string AppendFile::append(std::string_view record) {
  if (fd_ < 0) return std::strerror(EBADF);
  const off_t start = ::lseek(fd_, 0, SEEK_END);
  if (start < 0) return std::strerror(errno);
  size_t done = 0;
  while (done < record.size()) {
    const ssize_t n = ::write(fd_, record.data() + done, record.size() - done);
    if (n > 0) {
      done += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    const int failure = n < 0 ? errno : ENOSPC;  // write(2) returns 0 only when nothing fits
    // Take back the part that did reach the file, so it ends with a whole record.
    if (done > 0 && ::ftruncate(fd_, start) != 0)
      return std::string(std::strerror(failure)) + " (and cutting the partial record failed: " + std::strerror(errno) +
             ")";
    return std::strerror(failure);
  }
  return {};
}

std::string AppendFile::close() {
  if (fd_ < 0) return {};
  const int status = ::close(fd_);
  fd_ = -1;
  return status == 0 ? std::string() : std::strerror(errno);
}

}  // namespace mgt
