#include "base/atomic_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "mgtrain/error.hpp"

namespace mgt {

AtomicFile::AtomicFile(std::string path, std::string what) : path_(std::move(path)), what_(std::move(what)) {
  namespace fs = std::filesystem;
  if (path_.empty()) throw IoError(what_ + ": no path given");
  std::error_code ec;
  if (fs::is_directory(path_, ec)) fail("it is a directory");
  const fs::path target(path_);
  const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  std::string hidden = ".";  // "." + a temporary trips GCC 12's -Wrestrict false positive
  hidden += target.filename().string();
  hidden += ".tmp-" + std::to_string(::getpid());
  temporary_ = (dir / hidden).string();
  fd_ = ::open(temporary_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) {
    const int err = errno;
    temporary_.clear();
    fail(std::string("cannot create a file in directory '") + dir.string() + "': " + std::strerror(err));
  }
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!temporary_.empty()) ::unlink(temporary_.c_str());
}

void AtomicFile::fail(const std::string& why) const {
  throw IoError(what_ + " '" + path_ + "' cannot be written: " + why);
}

void AtomicFile::append(std::string_view bytes) {
  const char* p = bytes.data();
  size_t left = bytes.size();
  while (left > 0) {
    const ssize_t n = ::write(fd_, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail(std::strerror(errno));
    p += n;
    left -= static_cast<size_t>(n);
  }
}

void AtomicFile::commit(std::string_view bytes) {
  append(bytes);
  if (::fsync(fd_) != 0) fail(std::strerror(errno));
  const int closed = ::close(fd_);
  fd_ = -1;
  if (closed != 0) fail(std::strerror(errno));
  if (::rename(temporary_.c_str(), path_.c_str()) != 0) fail(std::strerror(errno));
  temporary_.clear();
  // Makes the rename durable; the file is complete either way, so a failure here is not one of it.
  const std::filesystem::path target(path_);
  const std::string dir = target.has_parent_path() ? target.parent_path().string() : ".";
  const int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd >= 0) {
    ::fsync(dir_fd);
    ::close(dir_fd);
  }
}

}  // namespace mgt
