#include "base/atomic_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "mgtrain/error.hpp"

namespace mgt {

namespace {

// 0, or the errno of the step that failed (in *failed).
int try_sync_directory(const std::string& dir, AtomicFile::Step* failed) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    *failed = AtomicFile::Step::open_directory;
    return errno;
  }
  if (::fsync(fd) != 0) {
    const int err = errno;
    ::close(fd);
    *failed = AtomicFile::Step::sync_directory;
    return err;
  }
  if (::close(fd) != 0) {
    *failed = AtomicFile::Step::close_directory;
    return errno;
  }
  return 0;
}

}  // namespace

std::string AtomicFile::temporary_path(const std::string& path) {
  const std::filesystem::path target(path);
  std::string hidden = ".";  // "." + a temporary trips GCC 12's -Wrestrict false positive
  hidden += target.filename().string();
  hidden += ".tmp-" + std::to_string(::getpid());
  return target.has_parent_path() ? (target.parent_path() / hidden).string() : hidden;
}

AtomicFile::AtomicFile(std::string path, Describe describe)
    : path_(std::move(path)), temporary_(temporary_path(path_)), describe_(std::move(describe)) {
  const std::filesystem::path target(path_);
  directory_ = target.has_parent_path() ? target.parent_path().string() : ".";
  // A device or a pipe (/dev/null, /dev/stdout) is written in place: a rename would replace the
  // device itself (as root, /dev/null with a regular file), and such a file has no half to hide.
  struct stat info {};
  if (::stat(path_.c_str(), &info) == 0 && !S_ISREG(info.st_mode) && !S_ISDIR(info.st_mode)) {
    in_place_ = true;
    temporary_ = path_;
  }
}

AtomicFile::AtomicFile(std::string path, std::string what)
    : AtomicFile(std::move(path), [this, what](Step step, int error) {
        const std::string why = step == Step::create
                                    ? "cannot create a file in directory '" + directory_ + "': " + std::strerror(error)
                                    : std::string(std::strerror(error));
        return what + " '" + path_ + "' cannot be written: " + why;
      }) {
  if (path_.empty()) throw IoError(what + ": no path given");
  std::error_code ec;
  if (std::filesystem::is_directory(path_, ec))
    throw IoError(what + " '" + path_ + "' cannot be written: it is a directory");
  create();
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!renamed_ && !in_place_) ::unlink(temporary_.c_str());
}

void AtomicFile::fail(Step step, int error) const { throw IoError(describe_(step, error)); }

void AtomicFile::create() {
  fd_ = ::open(temporary_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) fail(Step::create, errno);
}

void AtomicFile::append(std::string_view bytes) {
  const char* p = bytes.data();
  size_t left = bytes.size();
  while (left > 0) {
    const ssize_t n = ::write(fd_, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail(Step::write, errno);
    p += n;
    left -= static_cast<size_t>(n);
  }
}

void AtomicFile::sync_and_close() {
  if (fd_ < 0) {
    fd_ = ::open(temporary_.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) fail(Step::sync, errno);
  }
  // A device or a pipe has nothing to flush (a pipe's fsync fails with EINVAL).
  if (!in_place_ && ::fsync(fd_) != 0) fail(Step::sync, errno);
  const int closed = ::close(fd_);
  fd_ = -1;
  if (closed != 0) fail(Step::close, errno);
}

void AtomicFile::rename() {
  if (!in_place_ && ::rename(temporary_.c_str(), path_.c_str()) != 0) fail(Step::rename, errno);
  renamed_ = true;
}

void AtomicFile::commit(std::string_view bytes) {
  append(bytes);
  sync_and_close();
  rename();
  Step ignored;
  if (!in_place_) try_sync_directory(directory_, &ignored);
}

void sync_directory(const std::string& dir, const AtomicFile::Describe& describe) {
  AtomicFile::Step failed;
  if (const int err = try_sync_directory(dir, &failed); err != 0) throw IoError(describe(failed, err));
}

}  // namespace mgt
